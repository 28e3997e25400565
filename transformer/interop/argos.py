"""Export to Argos Translate and LibreTranslate: an ``.argosmodel`` package.

An Argos package is a zip archive of one directory, ``translate-<from>_<to>-<version>/``, which
Argos Translate unpacks into its package directory. It holds

* ``metadata.json``: the languages (``from_code``, ``from_name``, ``to_code``, ``to_name``),
  ``package_version``, ``argos_version`` and ``type: "translate"``;
* ``model/``: the CTranslate2 model (:mod:`transformer.interop.ctranslate2`);
* ``sentencepiece.model``: the tokenizer Argos runs on both sides: it feeds CTranslate2 the pieces
  of the source text and turns the target pieces back into text;
* ``README.md``, and optionally ``minisbd/<name>.onnx``, the sentence splitter Argos cuts a text
  with (without one, Argos fetches MiniSBD's model of the source language on first use).

Argos runs no Hugging Face tokenizer, so our BPE tokenizer is converted into a SentencePiece BPE
model (:func:`sentencepiece_proto`): the pieces in our id order (specials as control pieces, the
256 byte tokens as byte pieces, SentencePiece's byte fallback), each merged piece scored minus
the rank of the merge that made it (SentencePiece merges the best-scored adjacent pair first,
leftmost first among equals: the order of the merge list), and normalization rules that give
NFKC with every Unicode White_Space character a space (SentencePiece then collapses runs of
spaces, strips the text and marks the first word, as our normalizer and Metaspace do).

The two algorithms are not the same in general: SentencePiece merges any adjacent pair whose
concatenation is a piece, ``tokenizers`` only the pairs of its merge list. So the export
segments a sample with both, every word of the vocabulary, a set of probe sentences
(normalization, byte fallback) and any texts the caller gives, and refuses the export, naming a
text, where a single piece differs. One difference is known and not checked: a literal ``▁`` in
a text is three byte tokens for us and a word boundary for SentencePiece.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import shutil
import tempfile
import unicodedata
import zipfile
from collections.abc import Iterable
from pathlib import Path

from transformer.interop._common import InteropError, refuse_existing, require
from transformer.interop.ctranslate2 import optimized_spec, weight_type
from transformer.interop.hf import load_run
from transformer.run.directory import run_languages
from transformer.text import BYTE_TOKENS, JOINT_FILE, WORD_BOUNDARY, BPETokenizer, Tokenizer, Vocabularies
from transformer.text.tokenizer import read_tokenizer_json
from transformer.text.languages import language_name

SUFFIX = ".argosmodel"
ARGOS_VERSION = "1.9"  # the Argos Translate package format the package follows (1.9 and later read it)
TOKENIZER_FILE = "sentencepiece.model"
SENTENCE_MODEL_DIR = "minisbd"  # where Argos looks for a packaged MiniSBD sentence splitter
# Unicode's White_Space characters: what the \s of our normalizer's regular expression matches
WHITE_SPACE = frozenset(chr(c) for c in (*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                                         0x2028, 0x2029, 0x202F, 0x205F, 0x3000))
CODE = re.compile(r"[A-Za-z]{2,3}(?:-[A-Za-z0-9]{2,8})*")  # an ISO 639 code, a region or script after it
# Texts that exercise what the vocabulary's words do not: whitespace of every kind, NFKC's folds
# (ligatures, full-width forms, fractions, composed and decomposed accents), digits and
# punctuation, other scripts and characters outside the alphabet (byte fallback).
PROBES = (
    "A man in a blue shirt is standing on a ladder.", "Ein Mann mit einem orangefarbenen Hut.",
    "Un homme en t-shirt bleu, à côté d'une « fontaine » ?", "  leading,\ttabs\nand   runs of spaces  ",
    "no\u00a0break\u202fspaces\u2009and\u3000ideographic", "ﬁne ﬂowers, Ｆｕｌｌ ｗｉｄｔｈ, ½ and ² and …",
    "cafe\u0301 e\u0301te\u0301 Cafe\u0301", "Zahlen: 12 345, 3,14 % und 2024-11-28 (€ 5,-)!",
    "Ελληνικά, русский, 中文, 日本語, עברית, العربية", "emoji 🙂👍🏽 and symbols ™ © ° ± ∞",
    "quotes \u201clike\u201d \u2018these\u2019 and \u00abthose\u00bb", "zero\u200bwidth and soft\u00adhyphen", "x", "",
)


def _rules() -> dict[str, str]:
    """Normalization rules, text -> replacement: NFKC of every character and of the decomposed form
    of every composed one, with White_Space characters made spaces."""
    rules: dict[str, str] = {}
    for cp in range(1, 0x110000):
        if 0xD800 <= cp <= 0xDFFF:  # surrogates are no text
            continue
        char = chr(cp)
        folded = "".join(" " if c in WHITE_SPACE else c for c in unicodedata.normalize("NFKC", char))
        if folded != char:
            rules[char] = folded
        decomposed = unicodedata.normalize("NFD", char)
        if len(decomposed) > 1 and decomposed != folded:
            rules.setdefault(decomposed, folded)
    return rules


def _model_format():
    """SentencePiece's model protobuf module (it needs ``protobuf``, also of the interop extra)."""
    return require("sentencepiece.sentencepiece_model_pb2", "export --format argos")


@functools.lru_cache(maxsize=1)
def normalizer_spec() -> bytes:
    """The serialized ``NormalizerSpec`` of our normalizer; SentencePiece's trainer compiles the rules
    (it alone can), so a throwaway model is trained on a few characters and its spec kept."""
    spm = require("sentencepiece", "export --format argos")
    pb = _model_format()

    with tempfile.TemporaryDirectory() as tmp:
        tsv = Path(tmp) / "rules.tsv"
        tsv.write_text("".join(" ".join(f"{ord(c):X}" for c in src) + "\t" + " ".join(f"{ord(c):X}" for c in dst) + "\n"
                               for src, dst in _rules().items()), encoding="utf-8")
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(["a b c"] * 4), model_writer=model, model_type="char",
                                       vocab_size=8, hard_vocab_limit=False, normalization_rule_tsv=str(tsv),
                                       minloglevel=2, num_threads=1)
    proto = pb.ModelProto()
    proto.ParseFromString(model.getvalue())
    spec = proto.normalizer_spec
    spec.name = "nfkc_whitespace"
    spec.add_dummy_prefix = spec.remove_extra_whitespaces = spec.escape_whitespaces = True
    return spec.SerializeToString()


def sentencepiece_proto(tokenizer: BPETokenizer, merges: list) -> bytes:
    """The serialized SentencePiece BPE model that segments text as ``tokenizer`` does (checked by
    :func:`check_sentencepiece`, not guaranteed), its pieces named and numbered as ours.

    ``merges``: the tokenizer file's merge list (``model.merges``: ``["a", "b"]`` or ``"a b"`` items).
    """
    pb = _model_format()

    rank: dict[str, int] = {}
    for r, merge in enumerate(merges):
        left, right = merge if isinstance(merge, list) else merge.split(" ")
        rank.setdefault(left + right, r)
    proto = pb.ModelProto()
    proto.normalizer_spec.ParseFromString(normalizer_spec())
    trainer = proto.trainer_spec
    trainer.model_type = pb.TrainerSpec.BPE
    trainer.vocab_size = tokenizer.vocab_size
    trainer.byte_fallback = True
    specials = tokenizer.special_ids
    trainer.pad_id, trainer.bos_id = specials["<pad>"], specials["<s>"]
    trainer.eos_id, trainer.unk_id = specials["</s>"], specials["<unk>"]
    piece_type = pb.ModelProto.SentencePiece
    bytes_ = set(BYTE_TOKENS)
    for i, piece in enumerate(tokenizer.pieces(range(tokenizer.vocab_size))):
        entry = proto.pieces.add()
        entry.piece = piece
        if i == tokenizer.unk_id:
            entry.type = piece_type.UNKNOWN
        elif i in specials.values():
            entry.type = piece_type.CONTROL
        elif piece in bytes_:
            entry.type = piece_type.BYTE
        else:
            entry.score = -float(rank.get(piece, 0))  # the alphabet: 0, above every merge
    return proto.SerializeToString()


def check_sentencepiece(tokenizer: Tokenizer, proto: bytes, texts: Iterable[str]) -> int:
    """Segment ``texts`` with ``tokenizer`` and with the SentencePiece model ``proto``, and detokenize
    our pieces with it; returns how many texts were checked.

    Raises:
        InteropError: a text is segmented or detokenized differently, the message names the first
            one, both segmentations and how many texts differ.
    """
    spm = require("sentencepiece", "export --format argos")
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    texts = [t for t in dict.fromkeys(texts) if WORD_BOUNDARY not in t]  # a literal "▁": the known difference
    differ: list[tuple[str, list[str], list[str], str, str]] = []
    for text in texts:
        ids = tokenizer.encode(text)
        ours, theirs = tokenizer.pieces(ids), sp.encode(text, out_type=str)
        ours_text, their_text = tokenizer.decode(ids), sp.decode_pieces(ours).replace(WORD_BOUNDARY, " ").strip()
        if ours != theirs or ours_text != their_text:
            differ.append((text, ours, theirs, ours_text, their_text))
    if differ:
        text, ours, theirs, ours_text, their_text = differ[0]
        what = (f"segments {text!r} as {theirs}, ours as {ours}" if ours != theirs
                else f"detokenizes the pieces of {text!r} as {their_text!r}, ours as {ours_text!r}")
        raise InteropError(f"the SentencePiece model converted from the tokenizer {what} ({len(differ)} of "
                           f"{len(texts)} sample texts differ): Argos Translate would not translate as we do, so the "
                           "export is refused")
    return len(texts)


def vocabulary_words(tokenizer: Tokenizer) -> list[str]:
    """Every piece that starts a word, as the text it stands for (``▁chat`` -> ``chat``)."""
    return [p[len(WORD_BOUNDARY):] for p in tokenizer.pieces(range(tokenizer.vocab_size))
            if p.startswith(WORD_BOUNDARY) and len(p) > len(WORD_BOUNDARY)]


def package_name(from_code: str, to_code: str, package_version: str) -> str:
    """The directory inside the archive, as Argos names its own (``translate-de_en-1_0``)."""
    return f"translate-{from_code}_{to_code}-{package_version.replace('.', '_')}"


def _languages(run_dir: Path, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
    src, tgt = run_languages(run_dir)
    src, tgt = src_lang or src, tgt_lang or tgt
    if not src or not tgt:
        raise InteropError(f"{run_dir} does not record its languages (no run_config.json with data.src_lang and "
                           "data.tgt_lang); give them with --src-lang and --tgt-lang")
    for code in (src, tgt):
        if not CODE.fullmatch(code):
            raise InteropError(f"{code!r} is not a language code (ISO 639: 'de', 'en', 'zh-Hant')")
    if src == tgt:
        raise InteropError(f"the source and target languages are both {src!r}")
    return src, tgt


def _check_tokenizer(run_dir: Path, vocab: Vocabularies) -> BPETokenizer:
    if not isinstance(vocab.src, BPETokenizer) or not isinstance(vocab.tgt, BPETokenizer):
        raise InteropError(f"{run_dir} has a SentencePiece tokenizer (an imported Marian model): its source ends "
                           "with </s>, which Argos Translate does not add, and its two sides have their own "
                           "SentencePiece models where Argos runs one; export --format argos takes runs with our BPE "
                           "tokenizer")
    if not vocab.joint:
        raise InteropError(f"{run_dir} has separate source and target vocabularies; Argos Translate runs one "
                           "sentencepiece.model on both sides, so export --format argos needs a joint vocabulary "
                           "(data.joint_vocab=true)")
    return vocab.src


def _metadata(from_code: str, to_code: str, package_version: str) -> dict[str, str]:
    return {"package_version": package_version, "argos_version": ARGOS_VERSION, "type": "translate",
            "from_code": from_code, "from_name": language_name(from_code),
            "to_code": to_code, "to_name": language_name(to_code)}


def _readme(run_dir: Path, metadata: dict[str, str], checked: int, sentence_model: Path | None) -> str:
    splitter = (f"`{SENTENCE_MODEL_DIR}/{sentence_model.name}`, packaged" if sentence_model else
                "MiniSBD's model of the source language, which Argos Translate fetches on first use")
    return (f"# {metadata['from_name']} -> {metadata['to_name']}\n\n"
            f"A Transformer trained with the `transformer` package (run `{run_dir.name}`), exported with "
            "`transformer export --format argos`.\n\n"
            "- `model/`: the CTranslate2 model.\n"
            f"- `{TOKENIZER_FILE}`: the run's BPE tokenizer as a SentencePiece model, checked to segment "
            f"{checked} sample texts exactly as the run's own tokenizer does.\n"
            f"- Sentence splitting: {splitter}.\n")


def export_argos(run_dir: str | os.PathLike[str], out: str | os.PathLike[str], *, src_lang: str | None = None,
                 tgt_lang: str | None = None, package_version: str = "1.0", precision: str | None = None,
                 sentence_model: str | os.PathLike[str] | None = None,
                 sample: Iterable[str] = ()) -> Path:
    """Write ``out``, an ``.argosmodel`` package that Argos Translate and LibreTranslate install.

    Args:
        run_dir: a run directory with our BPE tokenizer and one joint vocabulary.
        out: the package file to create (``*.argosmodel``; it must not exist).
        src_lang, tgt_lang: the languages (ISO 639 codes); default: the run's ``data.src_lang``
            and ``data.tgt_lang``, required where the run does not record them.
        package_version: ``metadata.json``'s ``package_version`` (also in the directory's name).
        precision: the CTranslate2 model's weight type, as
            :func:`~transformer.interop.ctranslate2.export_ctranslate2` takes it (default: float32).
        sentence_model: a MiniSBD sentence-splitter model (``.onnx``) to package, so that Argos
            splits sentences without fetching one.
        sample: texts to check the converted tokenizer on, besides the vocabulary's words and
            the probe sentences.

    Returns:
        ``out`` as a Path.

    Raises:
        InteropError: no languages, a tokenizer Argos cannot run as ours (a SentencePiece run,
            separate vocabularies, a conversion that segments a sample text differently), an
            existing ``out`` or one without the ``.argosmodel`` suffix, a missing sentence model.
        MissingExtraError: ``ctranslate2`` or ``sentencepiece`` is not installed.
    """
    run_dir, target = Path(run_dir), refuse_existing(out)
    if target.suffix != SUFFIX:
        raise InteropError(f"the package must be a {SUFFIX} file, got {target.name!r}")
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", package_version):
        raise InteropError(f"package version {package_version!r} is not a version number like 1.0")
    if sentence_model is not None:
        sentence_model = Path(sentence_model)
        if sentence_model.suffix != ".onnx" or not sentence_model.is_file():
            raise InteropError(f"sentence model {sentence_model} is not a MiniSBD model file (.onnx)")
    quantization = weight_type(precision)
    src, tgt = _languages(run_dir, src_lang, tgt_lang)
    model, vocab = load_run(run_dir)
    tokenizer = _check_tokenizer(run_dir, vocab)
    proto = sentencepiece_proto(tokenizer, read_tokenizer_json(run_dir / JOINT_FILE)["model"].get("merges", []))
    checked = check_sentencepiece(tokenizer, proto, [*vocabulary_words(tokenizer), *PROBES, *sample])
    spec = optimized_spec(model, vocab, quantization)
    metadata = _metadata(src, tgt, package_version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as tmp:
        package = Path(tmp) / package_name(src, tgt, package_version)
        (package / "model").mkdir(parents=True)
        spec.save(str(package / "model"))
        (package / TOKENIZER_FILE).write_bytes(proto)
        (package / "metadata.json").write_text(json.dumps(metadata, indent=2, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
        (package / "README.md").write_text(_readme(run_dir, metadata, checked, sentence_model), encoding="utf-8")
        if sentence_model is not None:
            (package / SENTENCE_MODEL_DIR).mkdir()
            shutil.copyfile(sentence_model, package / SENTENCE_MODEL_DIR / sentence_model.name)
        archive = Path(tmp) / "package.zip"
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(package.rglob("*")):
                zf.write(path, path.relative_to(tmp).as_posix())
        refuse_existing(target)  # again: something may have appeared while the package was written
        os.replace(archive, target)
    return target
