"""Record what the package does on a tiny fixed model, and compare a later tree's behaviour with it.

A refactor must not change behaviour. Run ``--record`` on the code before the change and
``--compare`` on the code after it::

    python tools/check_behaviour.py --record /tmp/before.json
    # ... refactor ...
    python tools/check_behaviour.py --compare /tmp/before.json

What it records, on one thread with fixed seeds, in a temporary directory (nothing is kept):

* training: a tiny model trained 20 steps on the built-in corpus; each step's loss, learning
  rate and gradient norm (exact floats);
* translations with a random tiny model (seed 0) through the Python API: greedy, beam 4, n-best 3, int8 beam and
  greedy, a glossary, ``translate_document``, and ``translate_file`` of a text file, an HTML
  page and a .docx (the translated files' bytes); their texts, tokens and scores, and the
  warnings raised;
* the server in process (FastAPI's TestClient): ``/v1/translate``, LibreTranslate's
  ``/translate``, ``/translate_file`` (and the downloaded file), ``/detect``, ``/languages``,
  ``/frontend/settings``, ``/spec``, ``/v1/models``, a few error answers, and ``/openapi.json``
  whole; answers without what changes from run to run (timings, a stored file's random name).

``--compare`` exits 1 and prints the first differences (where, before, after) when anything
differs, 0 and one line when nothing does. It takes about 15 seconds of CPU time.
"""

from __future__ import annotations

import os

# One thread and nothing cached outside this run: set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import base64  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tree this script is in, whatever is installed

FORMAT = 1  # the record's layout; a record of another layout is refused, not compared
TRAIN_STEPS = 20
SHOWN = 8  # differences printed at most
SENTENCES = [
    "je suis étudiant",
    "le chat noir dort sur la table.",
    "nous mangeons du pain avec du fromage.",
    "Est-ce que tu as vu le petit chat ?",
    "Marie n'est jamais allée à la gare.",
]
GLOSSARY = {"chat": "cat", "pain": "bread"}
DOCUMENT = "Le chat dort. Il pleut beaucoup.\n\n  Nous mangeons du pain.\nMarie est allée à la gare.\n"
HTML = ('<!doctype html><html lang="fr"><body><h1>Le chat</h1><p>Le <b>chat</b> noir dort. '
        'Il <a href="/x">pleut</a>.</p><pre>x = 1</pre><p translate="no">Ne pas traduire.</p></body></html>')
DOCX_XML = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
            '<w:p><w:r><w:t>Le chat noir dort.</w:t></w:r></w:p>'
            '<w:p><w:r><w:rPr><w:b/></w:rPr><w:t>Nous mangeons</w:t></w:r><w:r><w:t xml:space="preserve"> du pain. '
            'Il pleut.</w:t></w:r></w:p>'
            '</w:body></w:document>')
DOCX_MEMBERS = [
    ("[Content_Types].xml",
     '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
     '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
     '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
     '<Default Extension="xml" ContentType="application/xml"/>'
     '<Override PartName="/word/document.xml" '
     'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'),
    ("_rels/.rels",
     '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
     '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
     '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
     'officeDocument" Target="word/document.xml"/></Relationships>'),
    ("word/document.xml", DOCX_XML),
]


def docx_bytes() -> bytes:
    """A two-paragraph .docx, written member by member with fixed timestamps (the same bytes each time)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, content in DOCX_MEMBERS:
            info = zipfile.ZipInfo(name, (2024, 5, 6, 7, 8, 10))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
    return out.getvalue()


def file_record(data: bytes, name: str) -> dict[str, Any]:
    """A translated file: its hash and size, and what a reader needs to see a difference (its text,
    or for a zip archive each member's text or hash)."""
    record: dict[str, Any] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            record["members"] = {info.filename: _text_or_hash(archive.read(info)) for info in archive.infolist()}
    else:
        record["text"] = _text_or_hash(data)
    return record


def _text_or_hash(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


# -- the run ---------------------------------------------------------------------------------
def train(run_dir: Path) -> list[dict[str, float]]:
    """Train the tiny model ``TRAIN_STEPS`` steps into ``run_dir``; each step's logged figures."""
    import torch

    from transformer.run.config import RunConfig
    from transformer.training.trainer import Trainer

    settings = [
        "data.builtin_train=600", "data.builtin_valid=20", "data.builtin_test=20", "data.vocab_size=300",
        "data.max_tokens=600", "model.preset=tiny", "model.dropout=0.1", "train.warmup=4", "train.lr_scale=2",
        "train.precision=fp32", "train.threads=1", "train.log_every=1", "train.eval_sentences=0",
        "train.eval_every=1000", "train.alignment_sentences=0", "train.tensorboard=false", "train.seed=0",
        f"train.max_steps={TRAIN_STEPS}",
    ]
    torch.manual_seed(0)
    Trainer(RunConfig().with_overrides(settings), run_dir, show_progress=False).train()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{key: r[key] for key in ("step", "loss", "lr", "grad_norm")} for r in records if r["kind"] == "train"]


def make_model(run_dir: Path) -> None:
    """A run directory of a random tiny model (seed 0) and a BPE of 400 pieces on the built-in corpus:
    its outputs are varied (a briefly trained model's are one token repeated), and end at 64 tokens
    (learned positions)."""
    import torch

    from transformer.config import preset
    from transformer.corpus.builtin import generate_pairs
    from transformer.model import Transformer
    from transformer.run.model import save_model
    from transformer.text import Vocabularies

    vocab = Vocabularies.train(generate_pairs(400, seed=1), vocab_size=400)
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size, positional="learned", max_positions=64))
    save_model(model, run_dir)
    vocab.save(run_dir)
    (run_dir / "run_config.json").write_text(json.dumps({"data": {"src_lang": "fr", "tgt_lang": "en"}}))


def _hypotheses(translator, texts, **kwargs) -> list[list[dict[str, Any]]]:
    return [[{"text": translator.detokenize(h), "tokens": h.tokens, "score": float(h.score),
              "log_prob": float(h.log_prob), "unmet": list(h.unmet)} for h in hyps]
            for hyps in translator.translate_n_best(texts, **kwargs)]


def _caught(fn: Callable[[], Any]) -> dict[str, Any]:
    """``fn()``'s result and the warnings it raised (their class and message), in order."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return {"result": result, "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}


def translations(run_dir: Path) -> dict[str, Any]:
    """Every way of translating through the Python API, with the trained model."""
    from transformer.translate.document import translate_document
    from transformer.translate.files import translate_file
    from transformer.translate.translator import Translator

    fp32 = Translator.from_run_dir(run_dir)
    int8 = Translator.from_run_dir(run_dir, precision="int8")
    greedy = fp32.with_decoding(strategy="greedy")

    def document(translator, text, **kwargs):
        out = translate_document(translator, text, **kwargs)
        return {"text": out.text, "sentences": [repr(s) for s in out.sentences]}

    def translated_file(data, name, **kwargs):
        return file_record(translate_file(data, name, fp32, target_lang="en", **kwargs), name)

    return {
        "greedy": _caught(lambda: _hypotheses(greedy, SENTENCES)),
        "beam4": _caught(lambda: _hypotheses(fp32, SENTENCES)),
        "beam4_texts": _caught(lambda: fp32.translate(SENTENCES)),
        "nbest3": _caught(lambda: _hypotheses(fp32.with_decoding(n_best=3), SENTENCES)),
        "int8_beam4": _caught(lambda: _hypotheses(int8, SENTENCES)),
        "int8_greedy": _caught(lambda: _hypotheses(int8.with_decoding(strategy="greedy"), SENTENCES)),
        "glossary": _caught(lambda: _hypotheses(fp32, SENTENCES, glossary=GLOSSARY)),
        "glossary_texts": _caught(lambda: fp32.translate(SENTENCES, glossary=GLOSSARY)),
        "glossary_nbest3": _caught(lambda: _hypotheses(fp32.with_decoding(n_best=3), SENTENCES, glossary=GLOSSARY)),
        "document": _caught(lambda: document(fp32, DOCUMENT)),
        "document_glossary": _caught(lambda: document(fp32, DOCUMENT, glossary=GLOSSARY)),
        "file_txt": _caught(lambda: translated_file(DOCUMENT.encode(), "notes.txt")),
        "file_html": _caught(lambda: translated_file(HTML.encode(), "page.html")),
        "file_html_glossary": _caught(lambda: translated_file(HTML.encode(), "page.html", glossary=GLOSSARY)),
        "file_docx": _caught(lambda: translated_file(docx_bytes(), "letter.docx")),
    }


# -- the server ------------------------------------------------------------------------------
VOLATILE = {"timing", "error_id"}  # fields of an answer that change from run to run


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def answer(response) -> dict[str, Any]:
    """A server answer as recorded: status, content type and body (JSON without volatile fields)."""
    kind = response.headers.get("content-type", "")
    if kind.startswith("application/json"):
        body: Any = _scrub(response.json())
    else:
        body = _text_or_hash(response.content)
    return {"status": response.status_code, "content-type": kind, "body": body}


def server(run_dir: Path) -> dict[str, Any]:
    """The server's answers to fixed requests, in process."""
    from fastapi.testclient import TestClient

    from transformer.serve.app import create_app
    from transformer.serve.limits import ServeLimits
    from transformer.translate.translator import Translator

    limits = ServeLimits(max_chars=300, max_texts=3, max_sentences=8, max_input_tokens=64, max_output_tokens=40,
                         max_body_bytes=8192, max_file_bytes=20_000, max_file_sentences=40, file_ttl_s=60)
    app = create_app(Translator.from_run_dir(run_dir), limits, src_lang="fr", tgt_lang="en")
    out: dict[str, Any] = {}
    with TestClient(app) as client:
        def post(name, path, body):
            out[name] = answer(client.post(path, json=body))

        def upload(name, file_name, data, **fields):
            response = client.post("/translate_file", data={"source": "fr", "target": "en", **fields},
                                   files={"file": (file_name, data)})
            recorded = answer(response)
            if response.status_code == 200:
                url = recorded["body"]["translatedFileUrl"]
                recorded["body"]["translatedFileUrl"] = re.sub(r"[0-9a-f]{32}", "<random>", url)
                download = client.get(url)
                recorded["download"] = {"status": download.status_code,
                                        "content-type": download.headers.get("content-type"),
                                        "content-disposition": download.headers.get("content-disposition"),
                                        "file": file_record(download.content, file_name)}
            out[name] = recorded

        post("v1_translate", "/v1/translate", {"text": DOCUMENT})
        post("v1_translate_list", "/v1/translate", {"text": SENTENCES[:3], "n_best": 3, "beam_size": 4})
        post("v1_translate_greedy", "/v1/translate", {"text": SENTENCES[1], "beam_size": 1, "max_length": 12})
        post("v1_translate_glossary", "/v1/translate", {"text": SENTENCES[1:3], "glossary": [
            {"source": s, "target": t} for s, t in GLOSSARY.items()]})
        post("v1_translate_html", "/v1/translate", {"text": HTML, "format": "html"})
        post("v1_translate_alternatives", "/v1/translate", {"text": SENTENCES[2], "alternatives": 2})
        post("lt_translate", "/translate", {"q": SENTENCES[1], "source": "fr", "target": "en"})
        post("lt_translate_list", "/translate", {"q": SENTENCES[:2], "source": "fr", "target": "en",
                                                 "alternatives": 2})
        post("lt_translate_html", "/translate", {"q": HTML, "source": "fr", "target": "en", "format": "html"})
        post("lt_translate_auto", "/translate", {"q": SENTENCES[4], "source": "auto", "target": "en"})
        post("lt_detect", "/detect", {"q": "Le chat noir dort sur la table de la cuisine."})
        upload("lt_translate_file_docx", "letter.docx", docx_bytes())
        upload("lt_translate_file_txt", "notes.txt", DOCUMENT.encode())
        for name, path in [("lt_languages", "/languages"), ("lt_frontend_settings", "/frontend/settings"),
                           ("lt_spec", "/spec"), ("v1_models", "/v1/models"), ("v1_model", "/v1/model"),
                           ("openapi", "/openapi.json")]:
            out[name] = answer(client.get(path))
        # Error answers: each API's shape.
        post("error_v1_empty_text", "/v1/translate", {"text": ""})
        post("error_v1_unknown_field", "/v1/translate", {"text": "chat", "beam": 4})
        post("error_v1_n_best", "/v1/translate", {"text": "chat", "n_best": 5, "beam_size": 2})
        out["error_v1_bad_json"] = answer(client.post("/v1/translate", content=b"{", headers={
            "content-type": "application/json"}))
        post("error_lt_missing_q", "/translate", {"source": "fr", "target": "en"})
        post("error_lt_pair", "/translate", {"q": "chat", "source": "de", "target": "en"})
        upload("error_lt_file_format", "report.exe", b"MZ...")
        out["error_lt_download"] = answer(client.get("/download_file/nothing.txt"))
        out["error_404"] = answer(client.get("/no/such/path"))
        out["error_v1_404"] = answer(client.get("/v1/no-such-route"))
        out["error_405"] = answer(client.get("/v1/translate"))
    return out


def record() -> dict[str, Any]:
    """Everything the check compares, computed in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="check-behaviour-") as tmp:
        os.environ["TRANSFORMER_DATA_CACHE"] = str(Path(tmp) / "data-cache")
        import torch

        torch.set_num_threads(1)
        training = train(Path(tmp) / "trained")
        run_dir = Path(tmp) / "model"
        make_model(run_dir)
        return {"format": FORMAT, "training": training, "translations": translations(run_dir),
                "server": server(run_dir), "environment": {"torch": torch.__version__,
                                                           "python": sys.version.split()[0]}}


# -- comparing -------------------------------------------------------------------------------
def flatten(value: Any, where: str = "") -> dict[str, Any]:
    """Each leaf of a record by its path (``server.lt_spec.body.paths...``); a list's length too."""
    if isinstance(value, dict) and value:  # an empty one is a leaf
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{where}.{key}" if where else str(key)))
        return out
    if isinstance(value, list):
        out = {f"{where}.length": len(value)}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{where}[{i}]"))
        return out
    return {where: value}


def _shown(value: Any, other: Any) -> str:
    """``value`` in a line: a long string from a little before where it first differs from ``other``."""
    text = repr(value)
    if isinstance(value, str) and isinstance(other, str) and len(text) > 120:
        at = next((i for i, (a, b) in enumerate(zip(value, other)) if a != b), min(len(value), len(other)))
        start = max(0, at - 40)
        text = f"(from character {start}) " + repr(value[start:start + 100])
    return text if len(text) <= 200 else text[:200] + "..."


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The paths where ``after`` differs from ``before`` (the environment aside), in record order,
    each with both values."""
    old = flatten({k: v for k, v in before.items() if k != "environment"})
    new = flatten({k: v for k, v in after.items() if k != "environment"})
    missing = object()
    lines = []
    for path in list(old) + [p for p in new if p not in old]:
        a, b = old.get(path, missing), new.get(path, missing)
        if a == b and type(a) is type(b):
            continue
        lines.append(f"{path}\n    before: {'(absent)' if a is missing else _shown(a, b)}\n"
                     f"    after:  {'(absent)' if b is missing else _shown(b, a)}")
    return lines


def compare(before: dict[str, Any], after: dict[str, Any], out=sys.stdout) -> int:
    """Print the first differences and return 1, or one line and 0 where there are none."""
    found = differences(before, after)
    if not found:
        print("behaviour unchanged: training, translations, server answers and the OpenAPI schema are identical",
              file=out)
        return 0
    print(f"behaviour changed: {len(found)} difference(s); the first {min(SHOWN, len(found))}:", file=out)
    for line in found[:SHOWN]:
        print(line, file=out)
    if before.get("environment") != after.get("environment"):
        print(f"note: recorded with {before.get('environment')}, now {after.get('environment')}", file=out)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Record the package's behaviour on a tiny fixed model (training losses, translations, server "
                    "answers, the OpenAPI schema), or compare the current tree's with a record.",
        epilog="Typical use: --record /tmp/before.json on the code before a change, --compare /tmp/before.json "
               "after it.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", metavar="FILE.json", type=Path, help="write the record to FILE.json")
    action.add_argument("--compare", metavar="FILE.json", type=Path,
                        help="compare with the record in FILE.json; exit 1 and show the first differences if any")
    args = parser.parse_args(argv)
    if args.compare is not None:
        try:
            before = json.loads(args.compare.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            parser.error(f"cannot read the record {args.compare}: {err}")
        if not isinstance(before, dict) or before.get("format") != FORMAT:
            parser.error(f"{args.compare} is not a record of this check (format {FORMAT}); record it again")
        return compare(before, record())
    current = record()
    args.record.write_text(json.dumps(current, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {len(flatten(current))} values in {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
