"""export --format argos: the .argosmodel package, its SentencePiece tokenizer and its CTranslate2 model.

The tiny run has a BPE tokenizer; the package's ``sentencepiece.model`` must segment and
detokenize as it does, and its CTranslate2 model, fed those pieces, must decode as our model does.
The runs of real Argos Translate and LibreTranslate on a trained model are the slow tests at the end
(``benchmarks/argos_check.py``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")
spm = pytest.importorskip("sentencepiece")

from interop_helpers import sentences, write_run_dir  # noqa: E402

from transformer.cli import main  # noqa: E402
from transformer.decoding import greedy_search  # noqa: E402
from transformer.interop import InteropError, export_argos  # noqa: E402
from transformer.interop import argos  # noqa: E402
from transformer.text import Vocabularies  # noqa: E402
from transformer.translate.translator import Translator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAX_LEN = 30


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny trained run with a joint BPE vocabulary, and its languages in run_config.json."""
    out = write_run_dir(tmp_path_factory.mktemp("argos") / "run")
    (out / "run_config.json").write_text(json.dumps({"data": {"src_lang": "fr", "tgt_lang": "en"}}), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def package(run_dir, tmp_path_factory):
    """The exported package, unpacked: ``(archive, package directory)``."""
    root = tmp_path_factory.mktemp("package")
    archive = export_argos(run_dir, root / "fr-en.argosmodel")
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(root / "unpacked")
    return archive, root / "unpacked" / "translate-fr_en-1_0"


def _sp(package_dir: Path):
    return spm.SentencePieceProcessor(model_file=str(package_dir / "sentencepiece.model"))


def test_package_layout_and_metadata(package):
    archive, package_dir = package
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
    assert {n.split("/")[0] for n in names} == {"translate-fr_en-1_0"}  # one directory, which Argos unpacks
    for name in ("metadata.json", "sentencepiece.model", "README.md", "model/model.bin", "model/config.json",
                 "model/shared_vocabulary.json"):
        assert f"translate-fr_en-1_0/{name}" in names
    metadata = json.loads((package_dir / "metadata.json").read_text(encoding="utf-8"))
    assert metadata == {"package_version": "1.0", "argos_version": argos.ARGOS_VERSION, "type": "translate",
                        "from_code": "fr", "from_name": "French", "to_code": "en", "to_name": "English"}
    assert not list(archive.parent.glob(".fr-en.argosmodel.*"))  # no staging directory left behind


def test_sentencepiece_segments_and_detokenizes_as_ours(run_dir, package):
    sp, tok = _sp(package[1]), Vocabularies.load(run_dir).src
    texts = [t for pair in sentences(40, seed=5) for t in pair] + list(argos.PROBES)
    for text in texts:
        ids = tok.encode(text)
        assert sp.encode(text, out_type=str) == tok.pieces(ids), text
        assert sp.decode_pieces(tok.pieces(ids)).strip() == tok.decode(ids), text
    assert any(p.startswith("<0x") for t in argos.PROBES for p in sp.encode(t, out_type=str))  # byte fallback ran


def test_ctranslate2_model_decodes_as_ours(run_dir, package):
    """Greedy: the package's model fed the SentencePiece pieces gives our tokens, and Argos's
    detokenization (decode_pieces, the word marks made spaces) our text."""
    translator = Translator.from_run_dir(run_dir)
    v = translator.vocab
    sp = _sp(package[1])
    texts = [f for f, _ in sentences(16, seed=21)]
    ids = v.src.encode_batch(texts)
    src = torch.full((len(ids), max(map(len, ids))), v.src.pad_id)
    for row, s in enumerate(ids):
        src[row, : len(s)] = torch.tensor(s)
    ours = greedy_search(translator.model, src, src != v.src.pad_id, bos_id=v.tgt.bos_id, eos_id=v.tgt.eos_id,
                         max_len_a=0, max_len_b=MAX_LEN)
    ct2 = ctranslate2.Translator(str(package[1] / "model"), device="cpu", inter_threads=1, intra_threads=1)
    results = ct2.translate_batch([sp.encode(t, out_type=str) for t in texts], beam_size=1,
                                  max_decoding_length=MAX_LEN)
    got = [r.hypotheses[0] for r in results]
    assert got == [v.tgt.pieces(h.tokens) for h in ours]
    assert [sp.decode_pieces(p).replace("\u2581", " ").strip() for p in got] == [v.tgt.decode(h.tokens) for h in ours]
    assert len({len(p) for p in got}) > 1  # outputs of different lengths, not one repeated pattern


def test_conversion_mismatch_is_refused(run_dir, tmp_path, monkeypatch):
    """A SentencePiece model that merges in another order is caught on the sample, named, and
    nothing is written."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    tok = Vocabularies.load(run_dir).src
    proto = pb.ModelProto()
    merges = json.loads((run_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["merges"]
    proto.ParseFromString(argos.sentencepiece_proto(tok, merges))
    for piece in proto.pieces:
        piece.score = -piece.score  # the last merges first
    reversed_proto = proto.SerializeToString()
    differ = r"segments '.*' as \[.*\], ours as \[.*\] \(\d+ of \d+ sample texts differ\)"
    with pytest.raises(InteropError, match=differ):
        argos.check_sentencepiece(tok, reversed_proto, argos.vocabulary_words(tok))
    monkeypatch.setattr(argos, "sentencepiece_proto", lambda tokenizer, merges: reversed_proto)
    with pytest.raises(InteropError, match="export is refused"):
        export_argos(run_dir, tmp_path / "x.argosmodel")
    assert list(tmp_path.iterdir()) == []


def test_languages_options_and_sentence_model(run_dir, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(run_dir, bare)
    (bare / "run_config.json").unlink()
    with pytest.raises(InteropError, match="does not record its languages.*--src-lang and --tgt-lang"):
        export_argos(bare, tmp_path / "a.argosmodel")
    onnx = tmp_path / "de.onnx"
    onnx.write_bytes(b"not really onnx, copied as it is")
    out = export_argos(bare, tmp_path / "b.argosmodel", src_lang="de", tgt_lang="en", package_version="2.1",
                       sentence_model=onnx)
    with zipfile.ZipFile(out) as zf:
        assert zf.read("translate-de_en-2_1/minisbd/de.onnx") == onnx.read_bytes()
        assert json.loads(zf.read("translate-de_en-2_1/metadata.json"))["package_version"] == "2.1"


@pytest.mark.parametrize("kwargs, message", [
    ({"src_lang": "../x"}, "not a language code"),
    ({"src_lang": "en"}, "both 'en'"),
    ({"package_version": "v1"}, "not a version number"),
    ({"sentence_model": "missing.onnx"}, "not a MiniSBD model file"),
])
def test_bad_options_are_refused(run_dir, tmp_path, kwargs, message):
    with pytest.raises(InteropError, match=message):
        export_argos(run_dir, tmp_path / "x.argosmodel", **kwargs)
    assert not (tmp_path / "x.argosmodel").exists()


def test_existing_output_and_suffix_are_refused(run_dir, tmp_path):
    existing = tmp_path / "x.argosmodel"
    existing.write_text("keep me")
    with pytest.raises(InteropError, match="already exists"):
        export_argos(run_dir, existing)
    assert existing.read_text() == "keep me"
    with pytest.raises(InteropError, match=r"must be a \.argosmodel file"):
        export_argos(run_dir, tmp_path / "x.zip")


def test_separate_vocabularies_are_refused(tmp_path):
    run = write_run_dir(tmp_path / "separate", joint=False, steps=1)
    with pytest.raises(InteropError, match="separate source and target vocabularies"):
        export_argos(run, tmp_path / "x.argosmodel", src_lang="fr", tgt_lang="en")


def test_sentencepiece_run_is_refused(tmp_path):
    """An imported Marian model: its source ends with </s> and each side has its own SentencePiece model."""
    pytest.importorskip("transformers")
    from interop_helpers import built_marian

    from transformer.interop import import_hf

    run = import_hf(built_marian(tmp_path)[0], tmp_path / "marian-run")
    with pytest.raises(InteropError, match="has a SentencePiece tokenizer .* takes runs with our BPE tokenizer"):
        export_argos(run, tmp_path / "x.argosmodel", src_lang="fr", tgt_lang="en")


def test_cli(run_dir, tmp_path, capsys):
    out = tmp_path / "cli.argosmodel"
    check = tmp_path / "check.txt"
    check.write_text("le chat dort .\nun homme lit un livre .\n", encoding="utf-8")
    assert main(["export", str(run_dir), "--format", "argos", str(out), "--precision", "int8",
                 "--check-text", str(check)]) == 0
    assert f"into {out}" in capsys.readouterr().out
    with zipfile.ZipFile(out) as zf:
        assert json.loads(zf.read("translate-fr_en-1_0/model/config.json")) is not None
    assert main(["export", str(run_dir), "--format", "ctranslate2", str(tmp_path / "ct2"), "--src-lang", "de"]) != 0
    assert "--src-lang applies to --format argos only" in capsys.readouterr().err
    assert main(["export", str(run_dir), "--format", "argos", str(out)]) != 0
    assert "already exists" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# The real Argos Translate and LibreTranslate (a virtual environment each, installed from PyPI).

M30K_RUN = Path("/tmp/m30k-de-en")


def _check(tmp_path: Path, *options: str) -> dict:
    if not (M30K_RUN / "model.safetensors").exists():
        pytest.skip(f"no trained run at {M30K_RUN} (train one on Multi30k de-en to run this check)")
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "argos_check.py"), str(M30K_RUN), "--sentences",
                           "20", "--json", str(report), *options], capture_output=True, text=True, timeout=3600)
    if proc.returncode == 3:  # the script's exit status when it could not make a virtual environment
        pytest.skip(f"cannot install the package: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(report.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_real_argos_translate_agrees(tmp_path):
    """In float32 Argos gives our translations; with its default compute type (int8 on most CPUs)
    every difference is the number format's, none the tokenizer's or unexplained."""
    report = _check(tmp_path, "--only", "argos")
    argos_results = report["pairs"][0]["argos"]
    assert not argos_results["float32"]["error"] and argos_results["float32"]["identical_share"] >= 0.95
    reasons = {d["reason"].split(" ")[0] for result in argos_results.values() for d in result["differences"]}
    assert reasons <= {"number", "decoding"}, reasons


@pytest.mark.slow
def test_real_libretranslate_agrees(tmp_path):
    """The server, with only the exported package installed, differs from us only where it edits
    the translation's final punctuation or case."""
    report = _check(tmp_path, "--only", "libretranslate")
    result = report["pairs"][0]["libretranslate"]
    assert not result["error"] and result["compared"] == 20
    assert {d["reason"] for d in result["differences"]} <= {"LibreTranslate's punctuation and case fixes"}
