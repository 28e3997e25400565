"""Translator and the translate / evaluate commands: order, batching, bad input."""

import json
from functools import partial

import pytest
import torch

from transformer.run.model import load_model
from transformer.corpus.builtin import generate_pairs as generate_written_pairs
from transformer.cpu import ENV_SWITCH, build
from transformer.cpu import decoding as cpu_decoding
from transformer.decoding import DecodeConfig
from transformer.model import Transformer
from transformer.text import Vocabularies
from transformer.translate.translator import TranslationWarning, Translator

generate_pairs = partial(generate_written_pairs, written_share=0)  # the plain corpus: tiny models learn it in a few steps

kernels_built = pytest.mark.skipif(not build.available(), reason="the CPU kernels are unavailable (no C compiler)")


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    """The tiny run on the plain corpus, without run_config.json, and 20 of its pairs to evaluate."""
    pairs = generate_pairs(400, seed=1)
    directory = tiny_run(pairs=pairs, languages=None)
    (directory / "pairs.fr").write_text("".join(f + "\n" for f, _ in pairs[:20]), encoding="utf-8")
    (directory / "pairs.en").write_text("".join(e + "\n" for _, e in pairs[:20]), encoding="utf-8")
    return directory


def test_translations_come_back_in_input_order_whatever_the_batching(run_dir, engine):
    sentences = [f for f, _ in generate_pairs(30, seed=3)]
    translator = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="beam", beam_size=3), max_tokens=60)
    together = translator.translate(sentences)
    alone = [translator.translate([s])[0] for s in sentences[:8]]
    assert together[:8] == alone
    one_big_batch = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="beam", beam_size=3), max_tokens=10**6)
    assert one_big_batch.translate(sentences) == together
    assert (type(translator.model) is cpu_decoding.DecodingTransformer) == engine.on


def _count(monkeypatch, name: str) -> list:
    """The calls of one kernel (its arguments), as the engine's modules make them."""
    calls = []
    owner, attribute = (cpu_decoding.decoding_ops, name) if name == "pack" else (cpu_decoding, f"_{name}")
    original = getattr(owner, attribute)
    monkeypatch.setattr(owner, attribute, lambda *a: calls.append(a) or original(*a))
    return calls


@kernels_built
def test_a_loaded_translator_freezes_its_model_and_packs_it_once(run_dir, monkeypatch):
    """from_run_dir owns the model it loads: frozen, prepared for the CPU kernels when the
    translator is made (each linear weight packed once), and no packing while translating."""
    packs = _count(monkeypatch, "pack")
    steps = _count(monkeypatch, "decoder_layer_step")
    translator = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"), max_tokens=40)
    assert not any(p.requires_grad for p in translator.model.parameters())
    linears = [m for m in translator.model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(packs) == len(linears) and not any(int8 for _, int8 in packs)
    assert type(translator.model) is cpu_decoding.DecodingTransformer
    sentences = [f for f, _ in generate_pairs(12, seed=4)]
    assert len(translator._length_sorted_batches(list(range(12)), translator.encode_sources(sentences))) > 2
    first = translator.translate(sentences)
    assert steps and len(packs) == len(linears)  # the kernels ran, on the copies packed at the start
    assert translator.translate(sentences) == first and len(packs) == len(linears)


@pytest.mark.parametrize("decoding", [dict(strategy="greedy"), dict(strategy="beam", beam_size=4),
                                      dict(strategy="beam", beam_size=4, n_best=3)], ids=["greedy", "beam", "n-best"])
def test_translations_equal_with_and_without_the_engine_in_fp32(run_dir, monkeypatch, decoding):
    sentences = [f for f, _ in generate_pairs(24, seed=6)]
    results = {}
    for on in (True, False):
        if not on:
            monkeypatch.setenv(ENV_SWITCH, "0")
        elif not build.available():
            continue
        translator = Translator.from_run_dir(run_dir, decoding=DecodeConfig(**decoding), max_tokens=200)
        assert (type(translator.model) is cpu_decoding.DecodingTransformer) == on
        results[on] = translator.translate_n_best(sentences)
    if len(results) < 2:
        pytest.skip("the CPU kernels are unavailable (no C compiler)")
    assert len({tuple(h[0].tokens) for h in results[False]}) > 12  # the sentences' translations differ
    for with_kernels, without in zip(results[True], results[False]):
        assert [h.tokens for h in with_kernels] == [h.tokens for h in without]
        # measured: scores (log-probabilities of about 63 tokens, near -177) within 4.6e-5 (greedy), 8e-6 (beam)
        assert [h.score for h in with_kernels] == pytest.approx([h.score for h in without], rel=1e-6, abs=1e-4)


@kernels_built
def test_close_gives_the_model_back_as_it_was_handed_in(run_dir):
    model, vocab = load_model(run_dir), Vocabularies.load(run_dir)
    before = {name: type(m) for name, m in model.named_modules()}
    sentences = [f for f, _ in generate_pairs(8, seed=7)]
    translator = Translator(model, vocab, decoding=DecodeConfig(strategy="greedy"))
    assert translator.model is model and type(model) is cpu_decoding.DecodingTransformer
    got = translator.translate(sentences)
    translator.close()
    assert {name: type(m) for name, m in model.named_modules()} == before
    assert not any("packed" in m.__dict__ for m in model.modules())
    assert translator.translate(sentences) == got  # still works, on the model's own code
    translator.close()  # closing twice changes nothing
    assert {name: type(m) for name, m in model.named_modules()} == before


@pytest.fixture(scope="module")
def marian_run_dir(tmp_path_factory):
    """An imported Marian model (SentencePiece tokenizers whose source side appends ``</s>``):
    built locally by tests/interop_helpers.py in a few seconds, shared with the interop tests."""
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from interop_helpers import built_marian

    from transformer.interop import import_hf

    root = tmp_path_factory.mktemp("marian")
    return import_hf(built_marian(root)[0], root / "run")


@pytest.mark.parametrize("model", ["bpe", "sentencepiece"])
def test_empty_and_too_long_inputs_never_lose_other_translations(run_dir, engine, request, model):
    """An empty line translates to "", an over-long one is cut to the model's input limit and still
    translated (non-empty, as it is alone), and neither changes the translations around them."""
    directory = run_dir if model == "bpe" else request.getfixturevalue("marian_run_dir")
    # the BPE run reads 64 learned positions; the Marian one 1024 sinusoidal ones, cut to 100 here
    translator = Translator.from_run_dir(directory, decoding=DecodeConfig(strategy="greedy"),
                                         max_input_tokens=None if model == "bpe" else 100)
    limit = translator.max_input_tokens
    good, other = "je suis étudiant", "le chat mange une pomme"
    long_text = " ".join(["le chat noir mange"] * 60)  # far more tokens than the model reads
    assert len(translator.vocab.src.encode(long_text)) > limit
    alone = {text: translator.translate([text])[0] for text in (good, other)}
    with pytest.warns(TranslationWarning, match=f"translating its first {limit}|first {limit - 1} and the end"):
        long_alone = translator.translate([long_text])[0]
    with pytest.warns(TranslationWarning, match="sentence 4 has"):  # the fourth, numbered from 1
        out = translator.translate(["", good, "   ", long_text, other, good])
    assert out[0] == "" and out[2] == ""
    assert out[1] == out[5] == alone[good] and out[4] == alone[other]
    assert out[3] == long_alone and out[3].strip()
    with pytest.raises(TypeError, match="list of sentences"):
        translator.translate("je suis étudiant")


@pytest.mark.parametrize("seed", range(6))
def test_a_seeded_sample_does_not_depend_on_the_other_sentences(run_dir, seed):
    """``--seed`` promises the same samples for the same seed: a sentence sampled alone and second in
    a batch differed for 6 of 6 seeds."""
    translator = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="sample", seed=seed, n_best=2))
    sentence = "le chat noir mange une pomme rouge"
    alone = translator.translate_n_best([sentence])[0]
    for batch in (["bonjour", sentence], [sentence, "je suis étudiant", "nous mangeons"]):
        with_others = translator.translate_n_best(batch)[batch.index(sentence)]
        assert [h.tokens for h in with_others] == [h.tokens for h in alone]
    other = translator.with_decoding(seed=seed + 10)
    assert [h.tokens for h in other.translate_n_best([sentence])[0]] != [h.tokens for h in alone]


def test_translate_command_arguments_file_stdin_and_json(run_dir, tmp_path, cli):
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


def test_evaluate_command_prints_signatures(run_dir, tmp_path, cli):
    """The scores printed are sacreBLEU's BLEU and chrF of the translations against the references,
    computed here again with sacrebleu. The model is untrained, so the references are made from its
    own translations (every other one kept as is, the others changed) for scores far from 0 and 100."""
    import sacrebleu

    first = cli("evaluate", str(run_dir), "--src", str(run_dir / "pairs.fr"), "--ref", str(run_dir / "pairs.en"),
                "--greedy", "--output", str(tmp_path / "first.txt"))
    assert first.returncode == 0, first.stderr
    hypotheses = (tmp_path / "first.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(hypotheses) == 20
    references = [h if i % 2 == 0 else "the cat " + " ".join(h.split()[: len(h.split()) // 2])
                  for i, h in enumerate(hypotheses)]
    (tmp_path / "refs.txt").write_text("".join(r + "\n" for r in references), encoding="utf-8")
    result = cli("evaluate", str(run_dir), "--src", str(run_dir / "pairs.fr"), "--ref", str(tmp_path / "refs.txt"),
                 "--greedy", "--json", "--output", str(tmp_path / "second.txt"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "second.txt").read_text(encoding="utf-8").split("\n")[:-1] == hypotheses
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    expected_bleu = bleu.corpus_score(hypotheses, [references]).score
    expected_chrf = chrf.corpus_score(hypotheses, [references]).score
    assert 10 < expected_bleu < 90 and 10 < expected_chrf < 90  # the comparison below can tell scores apart
    lines = result.stdout.splitlines()
    assert f"BLEU = {expected_bleu:.2f}  {bleu.get_signature()}" in lines
    assert f"chrF = {expected_chrf:.2f}  {chrf.get_signature()}" in lines
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in str(bleu.get_signature())
    assert "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" in str(chrf.get_signature())
    scores = json.loads(lines[-1])
    assert scores["bleu"] == round(expected_bleu, 2) and scores["chrf"] == round(expected_chrf, 2)
    assert scores["exact_match"] == 0.5 and scores["sentences"] == 20


@kernels_built
def test_int8_translator_decodes_with_int8_weights_in_the_kernels(run_dir, monkeypatch):
    """precision="int8": the model handed in is prepared in place (no copy), its linear weights
    packed as int8 with one scale per output feature; the translations stay close to fp32's."""
    packs = _count(monkeypatch, "pack")
    products = _count(monkeypatch, "packed_linear")
    fp32 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    model = load_model(run_dir)
    packs.clear()
    int8 = Translator(model, fp32.vocab, decoding=DecodeConfig(strategy="greedy"), precision="int8")
    assert int8.model is model and int8.precision == "int8"
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(packs) == len(linears) and all(int8_flag for _, int8_flag in packs)
    assert all(m.packed[0].dtype == torch.int8 and m.packed[1].shape == (m.out_features,) for m in linears)
    sentences = [f for f, _ in generate_pairs(10, seed=3)]
    products.clear()
    got = int8.translate(sentences)
    assert products and all(p[2].numel() for p in products)  # int8 panels: with their scales
    same = sum(a == b for a, b in zip(got, fp32.translate(sentences)))
    assert same >= 8, f"only {same} of 10 translations as in float32"  # measured: 10 of 10
    int8.close()
    assert type(model) is Transformer and not any("packed" in m.__dict__ for m in model.modules())


def test_retired_and_impossible_quantisations_are_refused(run_dir, monkeypatch):
    fp32 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    for retired in ("int8-weights", "int8-dynamic", "int8-mixed", "int4"):
        with pytest.raises(ValueError, match=r"precision must be one of \('fp32', 'bf16', 'int8', 'fp16'\), got '"
                           + retired):
            Translator(fp32.model, fp32.vocab, precision=retired)
    monkeypatch.setenv(ENV_SWITCH, "0")
    with pytest.raises(ValueError, match=f"int8 needs the compiled CPU kernels .*{ENV_SWITCH} not 0"):
        Translator.from_run_dir(run_dir, precision="int8")


@kernels_built
def test_a_second_translator_over_the_same_model_leaves_the_first_as_it_was(run_dir):
    fp32 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    sentences = [f for f, _ in generate_pairs(10, seed=3)]
    before = fp32.translate_n_best(sentences)
    with pytest.raises(ValueError, match="already prepared for decoding"):
        Translator(fp32.model, fp32.vocab, decoding=DecodeConfig(strategy="greedy"), precision="int8")
    after = fp32.translate_n_best(sentences)
    assert [h[0].score for h in after] == pytest.approx([h[0].score for h in before], abs=1e-4)


def test_bf16_translator_decodes_with_a_bf16_copy(run_dir, engine):
    fp32 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    bf16 = Translator(fp32.model, fp32.vocab, decoding=DecodeConfig(strategy="greedy"), precision="bf16")
    assert all(p.dtype == torch.bfloat16 for p in bf16.model.parameters())
    assert all(p.dtype == torch.float32 for p in fp32.model.parameters())  # the original is untouched
    assert not any(getattr(m, "packed", None) for m in bf16.model.modules())  # the kernels are float32: none
    sentences = [f for f, _ in generate_pairs(10, seed=4)]
    hyps = bf16.translate_n_best(sentences)
    assert all(len(h) == 1 and h[0].score <= 0 and isinstance(h[0].score, float) for h in hyps)
    agree = sum(a == b for a, b in zip(bf16.translate(sentences), fp32.translate(sentences)))
    assert agree >= 8  # bf16 rounding may change a near tie, not the translations at large
    beam = bf16.with_decoding(strategy="beam")
    assert beam.model is bf16.model and len(beam.translate(sentences)) == 10


@kernels_built
def test_translate_command_int8(run_dir, cli):
    """``translate --precision int8`` prints, line by line, what an int8 Translator gives: the same text and
    the same scores, which differ from float32's (the int8 weights are in use, not ignored)."""
    sentences = [f for f, _ in generate_pairs(6, seed=3)]
    result = cli("translate", str(run_dir), "--precision", "int8", "--greedy", "--json", *sentences)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    int8 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"), precision="int8")
    fp32 = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    expected, plain = int8.translate_n_best(sentences), fp32.translate_n_best(sentences)
    assert [r["source"] for r in records] == sentences
    for record, hyps in zip(records, expected):
        assert record["translations"][0]["text"] == int8.detokenize(hyps[0])
        assert record["translations"][0]["score"] == pytest.approx(hyps[0].score, abs=1e-4)  # printed to 4 places
    # measured: int8 and float32 scores 0.03 to 0.39 apart on these sentences
    assert max(abs(r["translations"][0]["score"] - h[0].score) for r, h in zip(records, plain)) > 0.01
    text = cli("translate", str(run_dir), "--precision", "int8", "--greedy", *sentences)
    assert text.stdout.split("\n")[:-1] == int8.translate(sentences)


@pytest.mark.parametrize(
    "args, message",
    [
        (["translate", "{run}", "--greedy", "--n-best", "2", "x"], "n_best must be 1"),
        (["translate", "{run}", "--input", "/nope.txt"], "input file not found: /nope.txt"),
        (["translate", "{missing}", "x"], "run directory not found"),
        (["evaluate", "{run}", "--src", "{run}/pairs.fr", "--ref", "{run}/config.json"], "has 20 lines but"),
        (["evaluate", "{run}"], "give --src FILE and --ref FILE"),
        (["translate", "{run}", "x", "--beam", "0"], "beam_size"),
    ],
)
def test_bad_input_gives_a_clear_error(run_dir, tmp_path, args, message, cli):
    args = [a.format(run=run_dir, missing=tmp_path / "missing") for a in args]
    result = cli(*args)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr


def test_run_directory_missing_its_tokenizer(run_dir, tmp_path, cli):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken)
    (broken / "tokenizer.json").unlink()
    result = cli("translate", str(broken), "je suis étudiant")
    assert result.returncode == 2 and "tokenizer" in result.stderr and "Traceback" not in result.stderr


def test_the_decoding_device_is_the_gpu_only_where_there_is_one(monkeypatch):
    from transformer.inference_precision import resolve_device
    for present in (True, False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
        assert resolve_device("auto").type == ("cuda" if present else "cpu")
        assert resolve_device("auto", precision="int8").type == "cpu"  # int8 is a CPU format
        assert resolve_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="device must be one of"):
        resolve_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValueError, match="int8 quantisation is for fp32 CPU inference"):
        resolve_device("cuda", precision="int8")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without a CUDA device")
def test_translate_on_cuda_without_a_gpu_says_so(run_dir, cli):
    done = cli("translate", str(run_dir), "--device", "cuda", input="bonjour\n")
    assert done.returncode == 2 and "no CUDA device" in done.stderr and "--device cpu" in done.stderr
    assert done.stdout == ""
