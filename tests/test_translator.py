"""Translator and the translate / evaluate commands: order, batching, bad input."""

import json
import subprocess
import sys

import pytest
import torch

from transformer.training.checkpoint import save_model
from transformer.config import preset
from transformer.corpus.builtin import generate_pairs
from transformer.decoding import DecodeConfig
from transformer.model import Transformer, packed_linear
from transformer.text import Vocabularies
from transformer.translate.translator import TranslationWarning, Translator


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("run")
    pairs = generate_pairs(400, seed=1)
    vocab = Vocabularies.train(pairs, vocab_size=400)
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size, positional="learned", max_positions=64))
    save_model(model, directory)
    vocab.save(directory)
    (directory / "pairs.fr").write_text("".join(f + "\n" for f, _ in pairs[:20]), encoding="utf-8")
    (directory / "pairs.en").write_text("".join(e + "\n" for _, e in pairs[:20]), encoding="utf-8")
    return directory


def cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "transformer.cli", *args], capture_output=True, text=True, **kwargs)


def test_translations_come_back_in_input_order_whatever_the_batching(run_dir):
    sentences = [f for f, _ in generate_pairs(30, seed=3)]
    translator = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="beam", beam_size=3), max_tokens=60)
    together = translator.translate(sentences)
    alone = [translator.translate([s])[0] for s in sentences[:8]]
    assert together[:8] == alone
    one_big_batch = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="beam", beam_size=3), max_tokens=10**6)
    assert one_big_batch.translate(sentences) == together


def test_a_loaded_translator_freezes_its_model_and_packs_it_once(run_dir, monkeypatch):
    """from_run_dir owns the model it loads: frozen, so the CPU kernels pack its weights in the
    first call only; the translations stay those of PyTorch's operators."""
    from tests.test_packed_linear import count_packing

    translator = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    assert not any(p.requires_grad for p in translator.model.parameters())
    sentences = [f for f, _ in generate_pairs(6, seed=4)]
    if not packed_linear.enabled():
        pytest.skip("compiled CPU kernels unavailable (no C compiler)")
    calls = count_packing(monkeypatch)
    first = translator.translate(sentences)
    packed = len(calls)
    assert packed > 0
    assert translator.translate(sentences) == first and len(calls) == packed
    monkeypatch.setattr(packed_linear, "_enabled", False)
    assert translator.translate(sentences) == first


def test_empty_and_too_long_inputs_never_lose_other_translations(run_dir):
    translator = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    good = "je suis étudiant"
    expected = translator.translate([good])[0]
    long_text = " ".join(["le chat noir mange"] * 40)  # far more tokens than the 64 learned positions
    with pytest.warns(TranslationWarning, match="translating its first 64"):
        out = translator.translate(["", good, "   ", long_text, good])
    assert out[0] == "" and out[2] == ""
    assert out[1] == expected and out[4] == expected
    assert isinstance(out[3], str)
    with pytest.raises(TypeError, match="list of sentences"):
        translator.translate("je suis étudiant")


def test_translate_command_arguments_file_stdin_and_json(run_dir, tmp_path):
    by_args = cli("translate", str(run_dir), "je suis étudiant", "", "nous mangeons", "--greedy")
    assert by_args.returncode == 0, by_args.stderr
    lines = by_args.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""
    source = tmp_path / "in.txt"
    source.write_bytes("je suis étudiant\n\nnous \xff\xfe mangeons\nnous mangeons\n".encode("utf-8", "surrogateescape")
                       if False else b"je suis \xc3\xa9tudiant\n\nnous \xff mangeons\nnous mangeons\n")
    from_file = cli("translate", str(run_dir), "--input", str(source), "--greedy")
    assert from_file.returncode == 0, from_file.stderr
    assert "line 3: invalid UTF-8" in from_file.stderr
    out = from_file.stdout.split("\n")
    assert out[0] == lines[0] and out[1] == "" and out[3] == lines[2]  # the bad line cost nothing else
    piped = cli("translate", str(run_dir), "--greedy", input="je suis étudiant\n")
    assert piped.stdout.split("\n")[0] == lines[0]
    as_json = cli("translate", str(run_dir), "je suis étudiant", "--beam", "3", "--n-best", "2", "--json")
    record = json.loads(as_json.stdout.splitlines()[0])
    assert record["source"] == "je suis étudiant" and len(record["translations"]) == 2
    assert record["translations"][0]["score"] >= record["translations"][1]["score"]
    sampled = [cli("translate", str(run_dir), "je suis étudiant", "--sample", "--seed", "5").stdout for _ in range(2)]
    assert sampled[0] == sampled[1]


def test_evaluate_command_prints_signatures(run_dir):
    result = cli("evaluate", str(run_dir), "--src", str(run_dir / "pairs.fr"), "--ref", str(run_dir / "pairs.en"),
                 "--greedy", "--json")
    assert result.returncode == 0, result.stderr
    assert "BLEU = " in result.stdout and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in result.stdout
    assert "chrF = " in result.stdout and "chrF2" in result.stdout or "nc:6" in result.stdout
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert 0 <= scores["bleu"] <= 100 and scores["sentences"] == 20


def test_int8_translator_quantises_a_copy_and_stays_close_to_fp32(run_dir):
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    fp32 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    int8 = Translator(fp32.model, fp32.vocab, decoding=DecodeConfig(strategy="greedy"), quantize="int8-dynamic")
    assert int8.model is not fp32.model
    assert any(isinstance(m, DynamicQuantizedLinear) for m in int8.model.modules())
    assert not any(isinstance(m, DynamicQuantizedLinear) for m in fp32.model.modules())  # the original is untouched
    src = torch.tensor([fp32.vocab.src.encode_batch(["je suis étudiant"])[0]])
    tgt = torch.tensor([[fp32.vocab.tgt.bos_id, 5, 6, 7]])
    with torch.no_grad():
        a, b = fp32.model(src, tgt), int8.model(src, tgt)
    assert torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 0.99
    sentences = [f for f, _ in generate_pairs(10, seed=3)]
    assert all(isinstance(t, str) for t in int8.translate(sentences))
    with pytest.raises(ValueError, match="quantize must be"):
        Translator(fp32.model, fp32.vocab, quantize="int4")
    with pytest.raises(ValueError, match="fp32 CPU inference"):
        Translator(fp32.model, fp32.vocab, quantize="int8", bf16=True)


def test_int8_weights_translator_packs_int8_copies_and_stays_close_to_fp32(run_dir, monkeypatch):
    from tests.test_packed_linear import count_packing
    from transformer.model import fused_cpu

    fp32 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    auto = Translator(fp32.model, fp32.vocab, quantize="int8")
    expected = "int8-mixed" if packed_linear.enabled() else "int8-dynamic"
    assert auto.quantize == expected
    if not packed_linear.enabled():
        with pytest.raises(ValueError, match="needs the compiled CPU kernels"):
            Translator(fp32.model, fp32.vocab, quantize="int8-weights")
        pytest.skip("compiled CPU kernels unavailable (no C compiler)")
    int8 = Translator(fp32.model, fp32.vocab, decoding=DecodeConfig(strategy="greedy"), quantize="int8-weights")
    assert int8.model is fp32.model  # no copy of the model: only the packed copies are int8
    calls = count_packing(monkeypatch, "pack_s8")
    sentences = [f for f, _ in generate_pairs(10, seed=3)]
    got = int8.translate(sentences)
    assert calls and all(isinstance(t, str) for t in got)
    same = sum(a == b for a, b in zip(got, fp32.translate(sentences)))
    assert same >= 8, f"only {same} of 10 translations as in float32"
    monkeypatch.setattr(fused_cpu, "_enabled", False)
    with pytest.raises(ValueError, match="needs the compiled CPU kernels"):
        Translator(fp32.model, fp32.vocab, quantize="int8-weights")


@pytest.mark.skipif(not packed_linear.enabled(), reason="compiled CPU kernels unavailable (no C compiler)")
def test_int8_mixed_takes_the_dynamic_layers_for_large_batches_only(run_dir, monkeypatch):
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    import transformer.translate.translator as translator_module

    fp32 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="beam", beam_size=2))
    mixed = Translator(fp32.model, fp32.vocab, decoding=fp32.decoding, quantize="int8-mixed", max_tokens=10**6)
    assert mixed.model is fp32.model
    used = []
    original = translator_module.decode
    monkeypatch.setattr(translator_module, "decode", lambda model, *a, **k: used.append(
        any(isinstance(m, DynamicQuantizedLinear) for m in model.modules())) or original(model, *a, **k))
    monkeypatch.setattr(translator_module, "int8_weights_max_rows", lambda: 6)
    sentences = [f for f, _ in generate_pairs(5, seed=5)]
    small = mixed.translate(sentences[:3])  # 3 sentences x 2 beams: the int8 weights
    large = mixed.translate(sentences)  # 10 rows: the dynamic layers
    assert used == [False, True]
    assert small == Translator(fp32.model, fp32.vocab, decoding=fp32.decoding, quantize="int8-weights").translate(sentences[:3])
    assert large == Translator(fp32.model, fp32.vocab, decoding=fp32.decoding, quantize="int8-dynamic",
                               max_tokens=10**6).translate(sentences)


def test_int8_mixed_row_limit_follows_the_cpus_int8_units(monkeypatch):
    import transformer.translate.translator as translator_module

    monkeypatch.setattr(translator_module, "cpu_int8_units", lambda: False)
    assert translator_module.int8_weights_max_rows() == translator_module.INT8_WEIGHTS_MAX_ROWS == 384
    monkeypatch.setattr(translator_module, "cpu_int8_units", lambda: True)  # VNNI or AMX: dynamic layers sooner
    assert translator_module.int8_weights_max_rows() == translator_module.INT8_WEIGHTS_MAX_ROWS_INT8_UNITS == 32


def test_bf16_translator_decodes_with_a_bf16_copy(run_dir):
    fp32 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    bf16 = Translator(fp32.model, fp32.vocab, decoding=DecodeConfig(strategy="greedy"), bf16=True)
    assert all(p.dtype == torch.bfloat16 for p in bf16.model.parameters())
    assert all(p.dtype == torch.float32 for p in fp32.model.parameters())  # the original is untouched
    sentences = [f for f, _ in generate_pairs(10, seed=3)]
    hyps = bf16.translate_n_best(sentences)
    assert all(len(h) == 1 and h[0].score <= 0 and isinstance(h[0].score, float) for h in hyps)
    agree = sum(a == b for a, b in zip(bf16.translate(sentences), fp32.translate(sentences)))
    assert agree >= 8  # bf16 rounding may change a near tie, not the translations at large
    beam = bf16.with_decoding(strategy="beam")
    assert beam.model is bf16.model and len(beam.translate(sentences)) == 10


def test_translate_command_int8(run_dir):
    result = cli("translate", str(run_dir), "--int8", "--greedy", "je suis étudiant")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    both = cli("translate", str(run_dir), "--int8", "--bf16", "je suis étudiant")
    assert both.returncode == 2 and "--int8 or --bf16" in both.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["translate", "{run}", "--greedy", "--n-best", "2", "x"], "n_best must be 1"),
        (["translate", "{run}", "--input", "/nope.txt"], "input file not found: /nope.txt"),
        (["translate", "{missing}", "x"], "model directory not found"),
        (["evaluate", "{run}", "--src", "{run}/pairs.fr", "--ref", "{run}/config.json"], "has 20 lines but"),
        (["evaluate", "{run}"], "give --src FILE and --ref FILE"),
        (["translate", "{run}", "x", "--beam", "0"], "beam_size"),
    ],
)
def test_bad_input_gives_a_clear_error(run_dir, tmp_path, args, message):
    args = [a.format(run=run_dir, missing=tmp_path / "missing") for a in args]
    result = cli(*args)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr


def test_run_directory_missing_its_tokenizer(run_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken)
    (broken / "tokenizer.json").unlink()
    result = cli("translate", str(broken), "je suis étudiant")
    assert result.returncode == 2 and "tokenizer" in result.stderr and "Traceback" not in result.stderr
