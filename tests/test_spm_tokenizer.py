"""The SentencePiece tokenizer backend: file round trip, dispatch by what the run directory holds, errors."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("sentencepiece")

from interop_helpers import sentences, train_spm  # noqa: E402

from transformer.interop import MissingExtraError  # noqa: E402
from transformer.errors import UserError  # noqa: E402
from transformer.interop._common import INSTALL_HINT, require  # noqa: E402
from transformer.text.sentencepiece import SentencePieceTokenizer, split_language_code  # noqa: E402
from transformer.text import BPETokenizer, Vocabularies, load_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def proto():
    return train_spm([f for f, _ in sentences()], 100)


def _vocab(proto):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=proto)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)]
    return {p: i for i, p in enumerate(["</s>", "<unk>", ">>en<<", *pieces, "<pad>"])}


def test_encode_decode_and_specials(proto):
    vocab = _vocab(proto)
    tok = SentencePieceTokenizer(proto, vocab, start_token="<pad>", append_eos=True)
    assert (tok.bos_id, tok.pad_id, tok.eos_id, tok.unk_id) == (len(vocab) - 1, len(vocab) - 1, 0, 1)
    ids = tok.encode("  je   suis étudiant ")
    assert ids[-1] == tok.eos_id and tok.unk_id not in ids
    assert tok.decode(ids) == tok.normalize("  je   suis étudiant ") == "je suis étudiant"
    assert tok.decode(ids, skip_special=False) == "je suis étudiant</s>"
    assert tok.encode(">>en<< je")[0] == vocab[">>en<<"] and tok.normalize(">>en<<  je ") == ">>en<< je"
    assert "".join(tok.pieces(ids[:-1])).replace("\u2581", " ").strip() == "je suis étudiant"
    assert tok.encode("Ω")[-2] == tok.unk_id  # a character the model never saw
    assert split_language_code("no code") == ([], "no code")


def test_save_load_and_dispatch(proto, tmp_path):
    src = SentencePieceTokenizer(proto, _vocab(proto), append_eos=True)
    tgt = SentencePieceTokenizer(proto, _vocab(proto), append_eos=False)
    Vocabularies(src, tgt).save(tmp_path)
    loaded = Vocabularies.load(tmp_path)
    assert isinstance(loaded.src, SentencePieceTokenizer) and loaded.src.same_as(src) and loaded.tgt.same_as(tgt)
    texts = [f for f, _ in sentences(10, seed=3)]
    assert loaded.src.encode_batch(texts) == src.encode_batch(texts)
    # The BPE backend is still chosen for BPE files.
    bpe = BPETokenizer.train([f for f, _ in sentences()], vocab_size=300)
    bpe.save(tmp_path / "bpe.json")
    assert isinstance(load_tokenizer(tmp_path / "bpe.json"), BPETokenizer)


def test_bad_vocabularies_are_refused(proto, tmp_path):
    vocab = _vocab(proto)
    with pytest.raises(UserError, match="lacks special tokens"):
        SentencePieceTokenizer(proto, {k: v for k, v in vocab.items() if k != "<pad>"})
    with pytest.raises(UserError, match="ids must be 0"):
        SentencePieceTokenizer(proto, {**vocab, "extra": len(vocab) + 5})
    with pytest.raises(UserError, match="not a valid SentencePiece model"):
        SentencePieceTokenizer(b"not a model", vocab)
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "SentencePiece", "vocab": {}}}')
    with pytest.raises(UserError, match="not a valid SentencePiece tokenizer file"):
        load_tokenizer(tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "SentencePiece", "vocab": [], "spm_model": ""}}')
    with pytest.raises(UserError, match="not a valid SentencePiece tokenizer file"):  # a vocabulary that is no mapping
        load_tokenizer(tmp_path / "tokenizer.json")


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # what a missing package looks like to import
    with pytest.raises(MissingExtraError, match="ctranslate2") as err:
        require("ctranslate2", "export --format ctranslate2")
    assert INSTALL_HINT in str(err.value) and INSTALL_HINT == 'pip install -c constraints.txt -e ".[interop]"'
