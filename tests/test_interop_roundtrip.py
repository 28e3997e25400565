"""export --format hf, then import-hf: the same run back, for every kind of run we can export.

BPE runs trained here (joint and separate vocabularies; the paper's interleaved sinusoids and no
output bias, which Marian cannot express) and SentencePiece runs imported from a tiny Marian
model (one shared vocabulary, and separate vocabularies) go through the CLI: export, then
import. The run that comes back must have the same config, the same weights bit for bit, the
same tokenizer files, and translate the same, greedy and beam, token for token.
transformers' ``generate()`` on the exported directory is the independent reference for the
middle step: its greedy output equals ours.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from interop_helpers import built_marian, sentences, strip_generated, write_run_dir  # noqa: E402

from transformer.cli import main  # noqa: E402
from transformer.decoding import greedy_search  # noqa: E402
from transformer.interop import InteropError, export_hf, import_hf  # noqa: E402
from transformer.interop.marian import OUR_CONFIG_KEY  # noqa: E402
from transformer.run.model import load_config, load_model  # noqa: E402
from transformer.translate.translator import Translator  # noqa: E402

KINDS = ["bpe-joint", "bpe-separate", "sentencepiece-joint", "sentencepiece-separate"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.src.json", "tokenizer.tgt.json")
MAX_NEW = 30
TEXTS = [f for f, _ in sentences(12, seed=5)] + ["je suis étudiant", "Ωmega ✓ « ça coûte 5 € »"]


@pytest.fixture(scope="module", params=KINDS)
def round_trip(request, tmp_path_factory):
    """(kind, the original run, the export, the run imported from the export)."""
    kind = request.param
    root = tmp_path_factory.mktemp(kind)
    if kind.startswith("bpe"):
        run = write_run_dir(root / "run", steps=60, joint=kind == "bpe-joint")
    else:
        marian = built_marian(tmp_path_factory.mktemp("marian"), separate=kind == "sentencepiece-separate")[0]
        run = import_hf(marian, root / "run")
    assert main(["export", str(run), "--format", "hf", str(root / "hf")]) == 0
    assert main(["import-hf", str(root / "hf"), str(root / "back")]) == 0
    return kind, run, root / "hf", root / "back"


def test_the_runs_are_what_the_kind_says(round_trip):
    """The four cases really differ: tokenizer backend, vocabulary layout, position layout."""
    kind, run, hf, _ = round_trip
    tr = Translator.from_run_dir(run)
    cfg = tr.model.config
    assert type(tr.vocab.src).__name__ == ("BPETokenizer" if kind.startswith("bpe") else "SentencePieceTokenizer")
    separate = kind.endswith("separate")
    if kind.startswith("bpe"):
        assert tr.vocab.joint == (not separate)
        assert (tr.vocab.src.vocab_size != tr.vocab.tgt.vocab_size) == separate  # 400 and 360
        assert (cfg.sinusoid_layout, cfg.output_bias) == ("interleaved", False)
        assert sorted(p.name for p in hf.glob("tokenizer*.json")) == (
            ["tokenizer.src.json", "tokenizer.tgt.json"] if separate else ["tokenizer.json", "tokenizer_config.json"])
    else:
        assert (tr.vocab.src.vocab != tr.vocab.tgt.vocab) == separate
        assert (cfg.sinusoid_layout, cfg.output_bias) == ("concat", True)
        assert (hf / "target_vocab.json").is_file() == separate and (hf / "source.spm").is_file()
    assert cfg.share_embeddings != separate


def test_same_config_and_weights_bit_for_bit(round_trip):
    _, run, _, back = round_trip
    assert load_config(back) == load_config(run)
    original, again = load_model(run).state_dict(), load_model(back).state_dict()
    assert list(again) == list(original)
    for name, tensor in original.items():
        assert again[name].dtype == tensor.dtype and torch.equal(again[name], tensor), name


def test_same_tokenizer_files(round_trip):
    _, run, _, back = round_trip
    names = [n for n in TOKENIZER_FILES if (run / n).is_file()]
    assert names and names == [n for n in TOKENIZER_FILES if (back / n).is_file()]
    for name in names:
        assert (back / name).read_bytes() == (run / name).read_bytes(), name


@pytest.mark.parametrize("decoding", [dict(strategy="greedy"), dict(strategy="beam", beam_size=4, n_best=2)])
def test_same_translations_token_for_token(round_trip, decoding):
    _, run, _, back = round_trip
    settings = dict(decoding, max_len_a=0, max_len_b=MAX_NEW)
    before = Translator.from_run_dir(run).with_decoding(**settings).translate_n_best(TEXTS)
    after = Translator.from_run_dir(back).with_decoding(**settings).translate_n_best(TEXTS)
    assert [[(h.tokens, h.score) for h in n_best] for n_best in after] == \
        [[(h.tokens, h.score) for h in n_best] for n_best in before]
    assert len({tuple(n_best[0].tokens) for n_best in before}) > 3  # the outputs depend on the input


def test_transformers_generate_on_the_export_equals_our_greedy(round_trip):
    """The independent reference: the exported directory, run by transformers, translates like our run."""
    from transformers import MarianMTModel

    _, run, hf, _ = round_trip
    tr = Translator.from_run_dir(run)
    ids = tr.vocab.src.encode_batch(TEXTS)
    src = torch.full((len(ids), max(map(len, ids))), tr.vocab.src.pad_id)
    for row, s in enumerate(ids):
        src[row, : len(s)] = torch.tensor(s)
    mask = src != tr.vocab.src.pad_id
    with torch.no_grad():
        generated = MarianMTModel.from_pretrained(str(hf)).eval().generate(
            input_ids=src, attention_mask=mask.long(), num_beams=1, do_sample=False, max_new_tokens=MAX_NEW)
    expected = [strip_generated(r, eos_id=tr.vocab.tgt.eos_id, pad_id=tr.vocab.tgt.pad_id) for r in generated.tolist()]
    got = greedy_search(tr.model, src, mask, bos_id=tr.vocab.tgt.bos_id, eos_id=tr.vocab.tgt.eos_id, max_len_a=0,
                        max_len_b=MAX_NEW)
    assert [h.tokens for h in got] == expected


# ---------------------------------------------------------------------------------------------
# An export edited after the fact, and broken exports.


def _export(tmp_path):
    run = write_run_dir(tmp_path / "run", steps=0)
    return run, export_hf(run, tmp_path / "hf")


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_an_edited_config_is_read_as_marian_says(tmp_path):
    """A recorded config that no longer matches the Marian keys (here d_ff edited) is ignored:
    the model is read as Marian describes it (concat layout, an output bias) and computes the same."""
    run, hf = _export(tmp_path)
    _edit(hf / "config.json", lambda c: c[OUR_CONFIG_KEY].update(d_ff=128))
    back = import_hf(hf, tmp_path / "back")
    cfg = load_config(back)
    assert (cfg.sinusoid_layout, cfg.output_bias, cfg.d_ff) == ("concat", True, load_config(run).d_ff)
    src = torch.randint(4, cfg.src_vocab_size, (3, 7), generator=torch.Generator().manual_seed(0))
    tgt = src[:, :5].flip(1)
    with torch.no_grad():
        torch.testing.assert_close(load_model(back)(src, tgt), load_model(run)(src, tgt), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("change, message", [
    (lambda hf: (hf / "tokenizer.json").unlink(), "holds no tokenizer: expected the Marian files"),
    (lambda hf: _edit(hf / "config.json", lambda c: c.update(decoder_start_token_id=3)),
     "decoder_start_token_id=3 but the tokenizer's start token is 1"),
    (lambda hf: _edit(hf / "config.json", lambda c: c.update(eos_token_id=1)),
     "eos_token_id=1 but the tokenizer's </s> is 2"),
    (lambda hf: (hf / "tokenizer.json").write_text('{"model": {"type": "WordPiece"}}'),
     "cannot read the tokenizer"),
], ids=["no-tokenizer", "start-token", "eos-token", "foreign-tokenizer"])
def test_a_broken_export_is_refused_in_one_line(tmp_path, capsys, change, message):
    _, hf = _export(tmp_path)
    change(hf)
    with pytest.raises(InteropError, match=None) as err:
        import_hf(hf, tmp_path / "back")
    assert message in str(err.value)
    capsys.readouterr()  # the export's progress bar
    assert main(["import-hf", str(hf), str(tmp_path / "back")]) == 2
    stderr = capsys.readouterr().err.strip().splitlines()
    assert len(stderr) == 1 and message in stderr[0], stderr
    assert not (tmp_path / "back").exists()


def test_the_languages_and_run_settings_come_back(tmp_path):
    """The run's run_config.json (its languages: French sentences cut by French rules) travels in the
    export's config.json and is written back by the import, so the imported run segments, translates
    documents and names its languages as the original does."""
    from transformer.run.config import RunConfig
    from transformer.translate.document import translate_document
    from transformer.translate.translator import run_languages

    run = write_run_dir(tmp_path / "run", steps=60)
    RunConfig().with_overrides(["data.src_lang=fr", "data.tgt_lang=en"]).save(run / "run_config.json")
    assert main(["export", str(run), "--format", "hf", str(tmp_path / "hf")]) == 0
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "back")]) == 0
    back = tmp_path / "back"
    assert run_languages(back) == run_languages(run) == ("fr", "en")
    assert json.loads((back / "run_config.json").read_text()) == json.loads((run / "run_config.json").read_text())
    text = "Rendez-vous au bât. B à 9 h. Ensuite ?! Je suis étudiant."  # English rules cut "bât." and join "h. Ensuite"
    before, after = (translate_document(Translator.from_run_dir(r), text) for r in (run, back))
    assert len(before.sentences) == 3 and after.text == before.text
    assert [s.source for s in after.sentences] == [s.source for s in before.sentences]


def test_a_marian_model_imports_without_run_settings(tmp_path):
    """A Marian model of someone else's carries no run configuration: the import writes none (as before)."""
    marian = built_marian(tmp_path / "marian")[0]
    assert main(["import-hf", str(marian), str(tmp_path / "run")]) == 0
    assert not (tmp_path / "run" / "run_config.json").exists()
