"""Import of Hugging Face Marian models: equal tokenization, logits (1e-5) and greedy/beam outputs to generate().

The Marian model is built locally (tests/interop_helpers.py): SentencePiece models trained on
the built-in corpus, a MarianTokenizer and a small MarianMTModel trained for a few seconds.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from interop_helpers import built_marian, sentences, strip_generated  # noqa: E402

from transformer.cli import main  # noqa: E402
from transformer.decoding import beam_search, greedy_search  # noqa: E402
from transformer.interop import InteropError, import_hf  # noqa: E402
from transformer.text.sentencepiece import SentencePieceTokenizer  # noqa: E402
from transformer.translate.translator import Translator  # noqa: E402

MAX_NEW = 40


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """(marian dir, HF model, HF tokenizer, our Translator of the imported run dir)."""
    root = tmp_path_factory.mktemp("marian")
    directory, model, tok = built_marian(root)
    run_dir = import_hf(directory, root / "run")
    return directory, model, tok, Translator.from_run_dir(run_dir)


@pytest.fixture(scope="module")
def batch(marian):
    _, _, tok, _ = marian
    texts = [f for f, _ in sentences(12, seed=5)]
    return texts, tok(texts, return_tensors="pt", padding=True)


def test_run_dir_holds_a_sentencepiece_tokenizer_with_marian_conventions(marian):
    _, hf_model, tok, tr = marian
    assert isinstance(tr.vocab.src, SentencePieceTokenizer) and isinstance(tr.vocab.tgt, SentencePieceTokenizer)
    assert tr.vocab.tgt.bos_id == hf_model.config.decoder_start_token_id == tok.pad_token_id
    assert tr.vocab.tgt.eos_id == hf_model.config.eos_token_id
    cfg = tr.model.config
    assert (cfg.sinusoid_layout, cfg.activation, cfg.output_bias, cfg.scale_embeddings) == ("concat", "silu", True, True)


def test_tokenization_equals_marian_tokenizer(marian):
    _, _, tok, tr = marian
    texts = [f for f, _ in sentences(20, seed=7)] + [">>en<< je suis étudiant", "  ça   coûte 5 € ! ", "Ωmega ✓"]
    assert tr.vocab.src.encode_batch(texts) == tok(texts)["input_ids"]
    targets = [e for _, e in sentences(20, seed=7)]
    labels = tok(text_target=targets)["input_ids"]
    assert [ids + [tr.vocab.tgt.eos_id] for ids in tr.vocab.tgt.encode_batch(targets)] == labels
    for ids in labels:
        assert tr.vocab.tgt.decode(ids) == tok.decode(ids, skip_special_tokens=True)


def test_logits_equal(marian, batch):
    _, hf_model, _, tr = marian
    _, enc = batch
    g = torch.Generator().manual_seed(0)
    tgt = torch.randint(0, tr.model.config.tgt_vocab_size, (enc["input_ids"].shape[0], 9), generator=g)
    tgt[:, 0] = tr.vocab.tgt.bos_id
    with torch.no_grad():
        expected = hf_model(**enc, decoder_input_ids=tgt).logits
        got = tr.model(enc["input_ids"], tgt, enc["attention_mask"].bool())
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_greedy_equals_generate(marian, batch):
    _, hf_model, tok, tr = marian
    texts, enc = batch
    with torch.no_grad():
        generated = hf_model.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=MAX_NEW)
    expected = [strip_generated(r, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id) for r in generated.tolist()]
    got = greedy_search(tr.model, enc["input_ids"], enc["attention_mask"].bool(), bos_id=tr.vocab.tgt.bos_id,
                        eos_id=tr.vocab.tgt.eos_id, max_len_a=0, max_len_b=MAX_NEW)
    assert [h.tokens for h in got] == expected
    assert len({len(e) for e in expected}) > 2 and any(len(e) < MAX_NEW for e in expected)  # not degenerate
    # The whole text path: our Translator's strings equal the Marian tokenizer's decoding of generate().
    tr_greedy = tr.with_decoding(strategy="greedy", max_len_a=0, max_len_b=MAX_NEW)
    assert tr_greedy.translate(texts) == tok.batch_decode(generated, skip_special_tokens=True)


@pytest.mark.parametrize("hf_penalty, ours_penalty", [(1.0, "exponent"), (0.6, "exponent"), (0.0, "none")])
def test_beam_equals_generate(marian, batch, hf_penalty, ours_penalty):
    """generate()'s exact beam search (early_stopping="never") ranks by log P / |Y|^alpha, as ours does."""
    _, hf_model, tok, tr = marian
    _, enc = batch
    with torch.no_grad():
        generated = hf_model.generate(**enc, num_beams=4, do_sample=False, max_new_tokens=MAX_NEW,
                                      length_penalty=hf_penalty, early_stopping="never")
    expected = [strip_generated(r, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id) for r in generated.tolist()]
    got = beam_search(tr.model, enc["input_ids"], enc["attention_mask"].bool(), bos_id=tr.vocab.tgt.bos_id,
                      eos_id=tr.vocab.tgt.eos_id, beam_size=4, length_penalty=ours_penalty, alpha=hf_penalty,
                      max_len_a=0, max_len_b=MAX_NEW)
    assert [n_best[0].tokens for n_best in got] == expected


@pytest.mark.parametrize("hf_penalty, ours_penalty", [(1.0, "exponent"), (0.0, "none")])
def test_k_finished_stopping_equals_generate_early_stopping_true(marian, batch, hf_penalty, ours_penalty):
    """stopping="k_finished" is generate(early_stopping=True): a sentence ends once num_beams hypotheses finished."""
    _, hf_model, tok, tr = marian
    _, enc = batch
    with torch.no_grad():
        generated = hf_model.generate(**enc, num_beams=4, do_sample=False, max_new_tokens=MAX_NEW,
                                      length_penalty=hf_penalty, early_stopping=True)
    expected = [strip_generated(r, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id) for r in generated.tolist()]
    got = beam_search(tr.model, enc["input_ids"], enc["attention_mask"].bool(), bos_id=tr.vocab.tgt.bos_id,
                      eos_id=tr.vocab.tgt.eos_id, beam_size=4, length_penalty=ours_penalty, alpha=hf_penalty,
                      max_len_a=0, max_len_b=MAX_NEW, stopping="k_finished")
    assert [n_best[0].tokens for n_best in got] == expected


def test_bin_weights_separate_vocabularies_relu(tmp_path):
    directory, hf_model, tok = built_marian(tmp_path, separate=True, bin_weights=True, activation="relu", steps=5)
    assert not (directory / "model.safetensors").exists() and (directory / "pytorch_model.bin").is_file()
    tr = Translator.from_run_dir(import_hf(directory, tmp_path / "run"))
    assert not tr.model.config.share_embeddings and tr.model.config.activation == "relu"
    assert tr.vocab.src.vocab != tr.vocab.tgt.vocab
    enc = tok([f for f, _ in sentences(4, seed=3)], return_tensors="pt", padding=True)
    tgt = torch.full((4, 3), tr.vocab.tgt.bos_id)
    with torch.no_grad():
        torch.testing.assert_close(tr.model(enc["input_ids"], tgt, enc["attention_mask"].bool()),
                                   hf_model(**enc, decoder_input_ids=tgt).logits, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Bad input: a clear one-line message, exit status 2, no output directory.


def _broken(marian, tmp_path, change):
    directory = tmp_path / "broken"
    shutil.copytree(marian[0], directory)
    change(directory)
    return directory


def _edit_config(**updates):
    def change(directory):
        cfg = json.loads((directory / "config.json").read_text())
        cfg.update(updates)
        (directory / "config.json").write_text(json.dumps(cfg))
    return change


@pytest.mark.parametrize("change, message", [
    (lambda d: (d / "config.json").unlink(), "not a Hugging Face model directory"),
    (_edit_config(model_type="bart", architectures=["BartForConditionalGeneration"]), "not a Marian model"),
    (_edit_config(architectures=["MarianForCausalLM"]), "unsupported architecture 'MarianForCausalLM'"),
    (lambda d: (d / "target.spm").unlink(), "lacks the Marian tokenizer files ['target.spm']"),
    (_edit_config(vocab_size=500, decoder_vocab_size=500), "vocabulary size mismatch"),
    (_edit_config(encoder_ffn_dim=128, decoder_ffn_dim=128), "weights do not fit config.json"),
    (_edit_config(activation_function="gelu_new"), "unsupported activation 'gelu_new'"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 20), "cannot read weights"),
])
def test_bad_input_is_refused_cleanly(marian, tmp_path, capsys, change, message):
    directory = _broken(marian, tmp_path, change)
    out = tmp_path / "out"
    with pytest.raises(InteropError, match=None) as err:
        import_hf(directory, out)
    assert message in str(err.value)
    assert main(["import-hf", str(directory), str(out)]) == 2
    stderr = capsys.readouterr().err.strip().splitlines()
    assert len(stderr) == 1 and message in stderr[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken"]  # nothing half-written beside it


def test_existing_output_is_never_overwritten(marian, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InteropError, match="already exists"):
        import_hf(marian[0], out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_cli_import_then_translate(marian, tmp_path, capsys):
    _, hf_model, tok, tr = marian
    out = tmp_path / "run"
    assert main(["import-hf", str(marian[0]), str(out)]) == 0
    capsys.readouterr()
    assert main(["translate", str(out), "je suis étudiant", "--greedy", "--max-len-b", str(MAX_NEW)]) == 0
    printed = capsys.readouterr().out.strip()
    with torch.no_grad():
        expected = hf_model.generate(**tok(["je suis étudiant"], return_tensors="pt"), num_beams=1,
                                     do_sample=False, max_new_tokens=len(tr.vocab.src.encode("je suis étudiant")) + MAX_NEW)
    assert printed == tok.decode(expected[0], skip_special_tokens=True)


# ---------------------------------------------------------------------------------------------
# Sharded weights and pickles: only files inside the model directory, only tensors.


def _sharded(marian, tmp_path, entries):
    """A copy of the Marian directory whose weights are split over shard files named by ``entries``
    (a list of file names, one per tensor group); returns the directory."""
    from safetensors.torch import load_file, save_file

    directory = tmp_path / "sharded"
    shutil.copytree(marian[0], directory)
    state = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    names = sorted(state)
    weight_map = {}
    for i, entry in enumerate(entries):
        part = names[i::len(entries)]
        weight_map.update({name: entry for name in part})
        if not entry.startswith("/") and ".." not in entry:
            save_file({name: state[name].contiguous() for name in part}, str(directory / entry))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return directory


def test_sharded_weights_inside_the_directory_are_read(marian, tmp_path):
    directory = _sharded(marian, tmp_path, ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
    tr = Translator.from_run_dir(import_hf(directory, tmp_path / "run"))
    for a, b in zip(tr.model.state_dict().values(), marian[3].model.state_dict().values()):
        torch.testing.assert_close(a.float(), b.float())


@pytest.mark.parametrize("entry", ["/etc/passwd", "../outside.safetensors", "sub/../../outside.safetensors"])
def test_sharded_index_pointing_outside_the_directory_is_refused(marian, tmp_path, capsys, entry):
    """An index entry that is absolute or climbs out with ``..`` was followed (``/etc/passwd`` gave
    ``list index out of range``): refused, naming the entry, before any file is read."""
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(tmp_path / "outside.safetensors"))
    directory = _sharded(marian, tmp_path, ["model-00001-of-00002.safetensors", entry])
    with pytest.raises(InteropError) as err:
        import_hf(directory, tmp_path / "out")
    assert repr(entry) in str(err.value) and "outside the model directory" in str(err.value)
    assert main(["import-hf", str(directory), str(tmp_path / "out")]) == 2
    stderr = capsys.readouterr().err.strip().splitlines()
    assert len(stderr) == 1 and repr(entry) in stderr[0], stderr
    assert not (tmp_path / "out").exists()


class _Payload:
    """A pickle that would run a command when loaded without weights_only."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_a_pickle_that_is_not_weights_only_is_refused_in_one_line(marian, tmp_path, capsys, how):
    """The refusal used to be torch's many-line message advising that ``weights_only=False``
    "will likely succeed": now one line naming the file, why, and safetensors."""
    import pickle

    directory = tmp_path / "pickled"
    shutil.copytree(marian[0], directory)
    (directory / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    state = {"model.shared.weight": torch.zeros(2), "evil": _Payload(marker)}
    if how == "torch.save":
        torch.save(state, directory / "pytorch_model.bin")
    else:
        (directory / "pytorch_model.bin").write_bytes(pickle.dumps(state, protocol=4))
    with pytest.raises(InteropError) as err:
        import_hf(directory, tmp_path / "out")
    message = str(err.value)
    assert "\n" not in message and str(directory / "pytorch_model.bin") in message
    assert "refused" in message and "not a weights-only file" in message and "safetensors" in message
    assert "weights_only=False" not in message and "likely succeed" not in message
    assert main(["import-hf", str(directory), str(tmp_path / "out")]) == 2
    stderr = capsys.readouterr().err.strip().splitlines()
    assert len(stderr) == 1 and "not a weights-only file" in stderr[0], stderr
    assert not marker.exists() and not (tmp_path / "out").exists()
