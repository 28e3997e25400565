"""Tests for transformer.text: BPE training, special ids, exact round trips, persistence."""

from __future__ import annotations

import itertools
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.errors import UserError
from transformer.text import (
    BOS, BYTE_TOKENS, EOS, JOINT_FILE, PAD, SRC_FILE, TGT_FILE, UNK,
    BPETokenizer, Tokenizer, Vocabularies, load_tokenizer,
)

SUBJECTS = [("le chat", "the cat"), ("la femme", "the woman"), ("l'enfant", "the child"),
            ("un homme", "a man"), ("l'animal", "the animal"), ("mon frère", "my brother"),
            ("la petite fille", "the little girl"), ("le garçon", "the boy")]
VERBS = [("mange", "eats"), ("regarde", "watches"), ("aime", "likes"), ("prépare", "prepares"),
         ("achète", "buys"), ("cherche", "looks for")]
OBJECTS = [("une pomme", "an apple"), ("le gâteau", "the cake"), ("la télévision", "the television"),
           ("un café crème", "a white coffee"), ("des légumes", "some vegetables"),
           ("l'écharpe rouge", "the red scarf")]
ENDINGS = [(".", "."), (" aujourd'hui.", " today."), (" ?", "?"), (" !", "!")]


def make_pairs() -> list[tuple[str, str]]:
    """~1150 generated French/English sentence pairs (no downloads)."""
    pairs = []
    for (sf, se), (vf, ve), (of, oe), (ef, ee) in itertools.product(SUBJECTS, VERBS, OBJECTS, ENDINGS):
        fr, en = f"{sf} {vf} {of}{ef}", f"{se} {ve} {oe}{ee}"
        pairs.append((fr[0].upper() + fr[1:], en[0].upper() + en[1:]))
    pairs += [("Est-ce que tu viens ?", "Are you coming?"), ("« Bonjour ! »", "\"Hello!\""),
              ("C'est 3,5 €.", "It's 3.5 euros."), ("Qu'il parte.", "Let him leave.")] * 5
    return pairs


PAIRS = make_pairs()
VOCAB = 500  # 260 reserved (4 specials + 256 bytes) + alphabet + merges


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train([s for p in PAIRS for s in p], vocab_size=VOCAB)


@pytest.fixture(scope="module")
def joint() -> Vocabularies:
    return Vocabularies.train(PAIRS, vocab_size=VOCAB, joint=True)


@pytest.fixture(scope="module")
def separate() -> Vocabularies:
    return Vocabularies.train(PAIRS, vocab_size=VOCAB, joint=False)


def test_special_ids_and_names(tok):
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.special_ids == {PAD: 0, BOS: 1, EOS: 2, UNK: 3}
    assert tok.pieces([tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id]) == [PAD, BOS, EOS, UNK]
    assert isinstance(tok, Tokenizer)


def test_vocab_size_bounded_and_merges_learned(tok):
    assert tok.vocab_size == VOCAB  # the corpus has enough pairs to fill it
    assert len(tok.encode("le gâteau")) < len("le gâteau")  # merges actually compress


def test_encode_adds_no_bos_eos(tok):
    ids = tok.encode("Le chat mange une pomme.")
    assert ids and tok.bos_id not in ids and tok.eos_id not in ids


@pytest.mark.parametrize("text", [
    "Élève à l'école, où êtes-vous ? Ça coûte cher ; naïve Noël.",
    "l'animal", "qu'il", "aujourd'hui", "Qu'il parte aujourd'hui avec l'animal.",
    "Est-ce que tu viens ?", "« Bonjour ! »", "C'est 3,5 €.",
    "The little girl's brother doesn't like the cake, does he?", "It's 3.5 euros (roughly).",
    "", "a",
])
def test_round_trip_exact(tok, text):
    assert tok.normalize(text) == text  # already normal: round trip must restore it byte for byte
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("raw, normal", [
    ("Tu viens\u202f?", "Tu viens ?"),                    # narrow no-break space (French typography)
    ("«\u00a0Bonjour\u00a0!\u00a0»", "« Bonjour ! »"),      # no-break space
    ("  le   chat\tmange\n une pomme  ", "le chat mange une pomme"),  # whitespace collapsed, stripped
    ("ﬁn …", "fin ..."),                                   # NFKC compatibility folding
    ("ＡＢＣ", "ABC"),                                       # full-width
    ("e\u0301le\u0300ve", "élève"),                         # combining accents composed
])
def test_normalization(tok, raw, normal):
    assert tok.normalize(raw) == normal
    assert tok.decode(tok.encode(raw)) == normal
    assert tok.decode(tok.encode(tok.normalize(raw))) == tok.normalize(raw)


def test_unseen_characters_use_byte_fallback(tok):
    text = "Le chat 漢字 🙂 ok — Ωμέγα ß"
    ids = tok.encode(text)
    assert tok.unk_id not in ids
    assert tok.decode(ids) == text
    assert set(tok.pieces(tok.encode("漢"))) <= {"▁", "<0xE6>", "<0xBC>", "<0xA2>"}
    assert tok.pieces(tok.encode("漢")).count("<0xE6>") == 1


def test_invalid_byte_sequence_decodes_to_replacement_char(tok):
    lone = BYTE_TOKENS.index("<0xE2>") + 4
    assert tok.pieces([lone]) == ["<0xE2>"]
    assert tok.decode([lone]) == "\ufffd"


def test_special_strings_in_text_are_plain_text(tok):
    ids = tok.encode("le <s> chat </s> <pad>")
    assert not set(ids) & {tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id}
    assert tok.decode(ids) == "le <s> chat </s> <pad>"


def test_decode_skip_special(tok):
    ids = [tok.bos_id, *tok.encode("le chat"), tok.eos_id, tok.pad_id, tok.pad_id]
    assert tok.decode(ids) == "le chat"
    kept = tok.decode(ids, skip_special=False)
    assert kept.startswith(BOS) and EOS in kept and kept.endswith(PAD)


def test_batch_matches_single(tok):
    texts = [fr for fr, _ in PAIRS[:50]] + ["", "C'est 3,5 €."]
    batch = tok.encode_batch(texts)
    assert batch == [tok.encode(t) for t in texts]
    assert tok.decode_batch(batch) == [tok.decode(ids) for ids in batch] == texts


def test_pieces_readable(tok):
    pieces = tok.pieces(tok.encode("Le chat mange"))
    assert "".join(pieces).replace("▁", " ").strip() == "Le chat mange"
    assert pieces[0].startswith("▁") and all(isinstance(p, str) and p for p in pieces)
    assert "▁mange" in pieces  # a frequent word is one readable piece


def test_ids_accept_non_python_ints(tok):
    torch = pytest.importorskip("torch")
    ids = tok.encode("le chat")
    assert tok.decode(torch.tensor(ids)) == "le chat"
    assert tok.pieces(torch.tensor(ids)) == tok.pieces(ids)


def test_training_is_deterministic():
    texts = [s for p in PAIRS for s in p]
    a = BPETokenizer.train(texts, vocab_size=VOCAB)
    b = BPETokenizer.train(texts, vocab_size=VOCAB)
    assert a._hf.get_vocab() == b._hf.get_vocab()
    assert a._hf.to_str() == b._hf.to_str()


def test_save_load_identical(tok, tmp_path):
    path = tmp_path / "tok.json"
    tok.save(path)
    assert os.listdir(tmp_path) == ["tok.json"]  # atomic write leaves no temporary file
    back = BPETokenizer.load(path)
    texts = [fr for fr, _ in PAIRS[::37]] + ["Le chat 漢字 🙂", "Est-ce que tu viens ?"]
    assert back.encode_batch(texts) == tok.encode_batch(texts)
    assert back.decode_batch(tok.encode_batch(texts)) == texts
    assert back.special_ids == tok.special_ids and back.vocab_size == tok.vocab_size
    assert back.encode("<s>") == tok.encode("<s>")  # literal specials stay text after reload
    assert isinstance(load_tokenizer(path), BPETokenizer)


def test_load_reads_special_ids_from_vocab(tok, tmp_path):
    """Ids are looked up on load, not assumed to be 0..3."""
    data = json.loads(tok._hf.to_str())
    vocab = data["model"]["vocab"]
    swap = {PAD: vocab[EOS], EOS: vocab[PAD]}
    vocab.update(swap)
    for added in data["added_tokens"]:
        added["id"] = vocab[added["content"]]
    (tmp_path / "t.json").write_text(json.dumps(data), encoding="utf-8")
    back = BPETokenizer.load(tmp_path / "t.json")
    assert (back.pad_id, back.eos_id) == (tok.eos_id, tok.pad_id)


def test_joint_vocabularies(joint):
    assert joint.joint and joint.src is joint.tgt
    fr, en = PAIRS[0]
    assert joint.src.decode(joint.src.encode(fr)) == fr
    assert joint.tgt.decode(joint.tgt.encode(en)) == en
    assert joint.src.encode("the cat") == joint.tgt.encode("the cat")  # one id space


def test_separate_vocabularies(separate):
    assert not separate.joint and separate.src is not separate.tgt
    src_vocab, tgt_vocab = separate.src._hf.get_vocab(), separate.tgt._hf.get_vocab()
    assert src_vocab != tgt_vocab
    assert "▁gâteau" in src_vocab and "▁gâteau" not in tgt_vocab
    assert "▁cake" in tgt_vocab and "▁cake" not in src_vocab
    for tok in (separate.src, separate.tgt):
        assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
        assert tok.vocab_size <= VOCAB


def test_vocabularies_save_load(joint, separate, tmp_path):
    joint.save(tmp_path / "j")
    assert sorted(os.listdir(tmp_path / "j")) == [JOINT_FILE]
    back = Vocabularies.load(tmp_path / "j")
    assert back.joint and back.src.encode("Le chat mange.") == joint.src.encode("Le chat mange.")

    separate.save(tmp_path / "s")
    assert sorted(os.listdir(tmp_path / "s")) == [SRC_FILE, TGT_FILE]
    back = Vocabularies.load(tmp_path / "s")
    assert not back.joint
    fr, en = PAIRS[5]
    assert back.src.encode(fr) == separate.src.encode(fr) and back.tgt.encode(en) == separate.tgt.encode(en)


def test_save_replaces_other_layout(joint, separate, tmp_path):
    separate.save(tmp_path)
    joint.save(tmp_path)
    assert sorted(os.listdir(tmp_path)) == [JOINT_FILE]
    separate.save(tmp_path)
    assert sorted(os.listdir(tmp_path)) == [SRC_FILE, TGT_FILE]


def test_vocabularies_load_errors(separate, tmp_path):
    with pytest.raises(FileNotFoundError, match=JOINT_FILE):
        Vocabularies.load(tmp_path)
    separate.save(tmp_path)
    (tmp_path / TGT_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=TGT_FILE.replace(".", r"\.")):
        Vocabularies.load(tmp_path)
    (tmp_path / JOINT_FILE).write_text("{not json", encoding="utf-8")
    (tmp_path / SRC_FILE).unlink()
    with pytest.raises(UserError, match="not a valid tokenizer JSON"):
        Vocabularies.load(tmp_path)


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        BPETokenizer.load(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(UserError, match="list.json"):
        load_tokenizer(tmp_path / "list.json")
    (tmp_path / "wp.json").write_text(json.dumps({"model": {"type": "WordPiece"}}), encoding="utf-8")
    with pytest.raises(UserError, match="WordPiece"):
        load_tokenizer(tmp_path / "wp.json")


def test_bad_training_inputs():
    with pytest.raises(UserError, match="vocab_size"):
        BPETokenizer.train(["le chat"], vocab_size=100)       # cannot hold specials + bytes
    small = BPETokenizer.train(["abcdefghij klmnop"], vocab_size=265)  # room for 5 of the 17 characters
    assert small.decode(small.encode("abcdefghij klmnop")) == "abcdefghij klmnop"  # the rest as byte tokens
    assert small.vocab_size <= 265
    with pytest.raises(UserError, match="empty"):
        BPETokenizer.train([], vocab_size=VOCAB)
    with pytest.raises(UserError, match="empty"):
        BPETokenizer.train(["", "   "], vocab_size=VOCAB)
    with pytest.raises(TypeError):
        BPETokenizer.train("le chat", vocab_size=VOCAB)     # a str, not an iterable of str
    with pytest.raises(TypeError):
        BPETokenizer.train(["ok", 3], vocab_size=VOCAB)
    with pytest.raises(UserError, match="target texts"):
        Vocabularies.train([("le chat", "")], vocab_size=VOCAB)
    with pytest.raises(UserError, match="source texts"):
        Vocabularies.train([], vocab_size=VOCAB, joint=False)


def test_bad_encode_decode_inputs(tok):
    with pytest.raises(TypeError):
        tok.encode(None)
    with pytest.raises(TypeError):
        tok.encode(b"le chat")
    with pytest.raises(TypeError):
        tok.encode_batch("le chat")
    with pytest.raises(TypeError):
        tok.encode_batch(["le chat", 7])
    with pytest.raises(ValueError, match="token ids"):
        tok.decode([tok.vocab_size])
    with pytest.raises(ValueError, match="token ids"):
        tok.pieces([-1])


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)], ids=["022", "002", "077"])
def test_saved_tokenizer_has_the_mode_of_the_other_run_files(tok, tmp_path, umask, mode):
    """``tokenizer.json`` was written 0600 (``tempfile.mkstemp``) while the other run files get
    what the umask allows (0644 with the usual 022): now it gets the same."""
    old = os.umask(umask)
    try:
        tok.save(tmp_path / "tok.json")
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(old)
    assert (tmp_path / "tok.json").stat().st_mode & 0o777 == mode == (tmp_path / "plain.txt").stat().st_mode & 0o777
    assert sorted(os.listdir(tmp_path)) == ["plain.txt", "tok.json"]


# ------------------------------------------------------------------ a literal "▁" (U+2581) in the text
@pytest.mark.parametrize("text", ["x▁y", "▁", "▁▁", "▁x", "x▁", "le ▁ chat", "x ▁y", "▁ x", "x▁ y", "漢▁字",
                                  "le chat▁mange une pomme", "<s>▁</s>", "a▁▁ ▁b"])
def test_a_literal_word_boundary_mark_survives(tok, text):
    """``▁`` is the Metaspace word mark, so a literal one in the text came back as a space
    (``decode(encode("x▁y")) == "x y"``); it is now encoded as its UTF-8 byte tokens."""
    ids = tok.encode(text)
    assert tok.decode(ids) == tok.normalize(text) == text
    assert tok.unk_id not in ids
    assert tok.encode_batch([text, "le chat"]) == [ids, tok.encode("le chat")]
    assert tok.decode_batch([ids]) == [text]


def test_texts_without_the_mark_encode_as_before(tok):
    """The escape touches only texts holding ``▁``: every other text gets the ids of the plain
    ``tokenizers`` pipeline, and a word after a literal ``▁`` gets the pieces it has elsewhere."""
    texts = [fr for fr, _ in PAIRS[::23]] + ["Le chat 漢字 🙂", "  a  b ", ""]
    assert tok.encode_batch(texts) == [e.ids for e in tok._hf.encode_batch(texts, add_special_tokens=False)]
    mark = tok.encode("▁")
    assert tok.pieces(mark) == ["<0xE2>", "<0x96>", "<0x81>"]
    assert tok.pieces(tok.encode("le chat ▁ mange")) == [
        *tok.pieces(tok.encode("le chat")), "▁", "<0xE2>", "<0x96>", "<0x81>", *tok.pieces(tok.encode("mange"))]


def test_a_tokenizer_saved_before_the_fix_round_trips_the_mark_once_loaded(tok, tmp_path):
    data = json.loads(tok._hf.to_str())
    data["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}]}
    (tmp_path / "old.json").write_text(json.dumps(data), encoding="utf-8")
    old = BPETokenizer.load(tmp_path / "old.json")
    assert old.decode(old.encode("x▁y z")) == "x▁y z"
    assert old.encode_batch(["le chat mange", "x▁y"]) == tok.encode_batch(["le chat mange", "x▁y"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("ab é漢🙂<>s/\t\u00a0\u202f.'"))
                        | st.characters(exclude_categories=("Cs",)), max_size=8), min_size=1, max_size=6))
def test_round_trip_holds_for_text_with_the_mark(tok, parts):
    text = "▁".join(parts)
    assert tok.decode(tok.encode(text)) == tok.normalize(text)
    assert tok.decode_batch(tok.encode_batch([text])) == [tok.normalize(text)]
