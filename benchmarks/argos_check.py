"""The real Argos Translate and LibreTranslate on packages ``transformer export --format argos`` wrote.

For each run: export the package, translate the first ``--sentences`` lines of Multi30k's
``test_2016_flickr`` in the run's source language with

- ours: ``transformer translate --segment lines`` with Argos Translate's decoding (beam 4,
  CTranslate2's length penalty 0.2: ``--length-penalty exponent --alpha 0.2``, and its stopping
  rule ``--stopping k_finished``);
- Argos Translate (``argostranslate`` from PyPI, in its own virtual environment):
  ``package.install_from_path``, then ``translate`` on each line, twice: with its default
  ``ARGOS_COMPUTE_TYPE=auto`` (int8 on most CPUs: the float32 weights quantized when loaded) and with
  ``float32``;
- LibreTranslate (``libretranslate`` from PyPI, its own virtual environment, with its own fork of
  Argos Translate): the server started on 127.0.0.1 with only the exported packages installed,
  each line sent to ``POST /translate``;

and print the share of identical translations and each differing one with its reason: the
tokenizer (the package's SentencePiece pieces differ from ours), the sentence splitter (Argos cut
the line), the number format (CTranslate2 run here on the package's pieces with Argos's settings
and compute type gives Argos's text, and in float32 ours), the decoding (it gives Argos's text in
float32 too: the searches differ), LibreTranslate's post-editing (its punctuation and
capitalisation fixes), or unexplained.

Everything runs offline: every host name lookup and URL opened in the Argos processes is
refused and recorded (and proxies point at a closed port), in a home directory of their own, so
what Argos or LibreTranslate would fetch is listed in the report. Argos Translate and
LibreTranslate split text into sentences with MiniSBD, whose model of the source language they
fetch on first use; offline that fetch fails. ``--sentence-model LANG=FILE.onnx`` packages one;
without it each line is given to the model whole (the lines of Multi30k are one sentence each),
by replacing the splitter in the Argos processes, and the report says so.

The virtual environments (``--venvs``, default ``/tmp``: ``argos-venv``, ``libretranslate-venv``)
are made once with ``pip install`` (torch pinned to ``TORCH`` so that stanza does not pull a
CUDA build) and reused. Exit status 3: one could not be made (no network, no wheel).

    python benchmarks/argos_check.py /tmp/m30k-de-en /tmp/m30k-fr-en --data ../shared/data --json argos.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402

ARGOS = "argostranslate==1.11.0"
LIBRETRANSLATE = "libretranslate==1.9.6"
TORCH = "torch==2.13.0"  # the CPU wheel; stanza (an Argos dependency) would otherwise pull a CUDA build
BEAM, LENGTH_PENALTY = 4, 0.2  # what Argos Translate decodes with (ARGOS_BEAM_SIZE, its translate_batch call)
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, so a proxied request fails at once
EXIT_NO_VENV = 3

# Run inside the Argos processes (the library's and LibreTranslate's): refuse and record every
# host name lookup but the loopback's and every URL opened, and optionally give each text to the
# model whole instead of splitting it with MiniSBD (or stanza).
GUARD = r'''
import json, os, socket, urllib.request
_LOG = os.environ["ARGOS_CHECK_FETCH_LOG"]
def _record(what):
    with open(_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(what) + "\n")
_lookup = socket.getaddrinfo
def _guarded_lookup(host, *args, **kwargs):
    if host not in ("localhost", "127.0.0.1", "::1", None):
        _record({"host": str(host)})
        raise socket.gaierror(f"offline: {host} is not looked up")
    return _lookup(host, *args, **kwargs)
socket.getaddrinfo = _guarded_lookup
_open = urllib.request.OpenerDirector.open
def _recorded_open(self, url, *args, **kwargs):
    full = url if isinstance(url, str) else url.full_url
    if not full.startswith(("http://127.0.0.1", "http://localhost")):
        _record({"url": full})
    return _open(self, url, *args, **kwargs)
urllib.request.OpenerDirector.open = _recorded_open
if os.environ.get("ARGOS_CHECK_WHOLE_LINES") == "1":
    from argostranslate import sbd
    for _name in ("MiniSBDSentencizer", "StanzaSentencizer"):
        if hasattr(sbd, _name):
            getattr(sbd, _name).split_sentences = lambda self, text: [text]
'''

ARGOS_WORKER = GUARD + r'''
import sys
from argostranslate import package, translate
job = json.load(open(sys.argv[1], encoding="utf-8"))
for path in job["packages"]:
    package.install_from_path(path)
languages = {language.code: language for language in translate.get_installed_languages()}
result = {"translations": [], "splits": [], "error": None}
try:
    translation = languages[job["source"]].get_translation(languages[job["target"]])
    inner = translation.underlying if hasattr(translation, "underlying") else translation
    for text in job["texts"]:
        result["translations"].append(translation.translate(text))
        result["splits"].append(len(inner.sentencizer.split_sentences(text)))
    result["compute_type"] = inner.translator.compute_type
except Exception as err:
    result["error"] = f"{type(err).__name__}: {err}"
print(json.dumps(result))
'''

LIBRETRANSLATE_LAUNCHER = GUARD + r'''
import sys
from libretranslate.main import main
sys.argv = ["libretranslate", *sys.argv[1:]]
main()
'''


def read_lines(path: Path, n: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(n), f)]


def ensure_venv(path: Path, requirement: str, module: str, work: Path) -> Path:
    """The python of a virtual environment at ``path`` where ``module`` imports, made with
    ``pip install requirement`` where there is none yet; SystemExit(EXIT_NO_VENV) when that fails."""
    python = path / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0:
        return python
    constraints = work / "venv-constraints.txt"
    constraints.write_text(TORCH + "\n", encoding="utf-8")
    print(f"making {path}: pip install {requirement} ({TORCH})", file=sys.stderr)
    steps = [[sys.executable, "-m", "venv", "--clear", str(path)],
             [str(python), "-m", "pip", "install", "-q", "-c", str(constraints), requirement]]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
            print(f"cannot make {path}: {' '.join(step[:4])}... failed: {tail[0]}", file=sys.stderr)
            raise SystemExit(EXIT_NO_VENV)
    return python


def offline_env(home: Path, fetch_log: Path, *, whole_lines: bool, compute_type: str | None = None) -> dict[str, str]:
    """The environment of an Argos process: its own home and data directories, no network, one thread."""
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and not k.startswith(("ARGOS_", "LT_"))}
    env.update({"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache"),
                "XDG_CONFIG_HOME": str(home / "config"), "http_proxy": DEAD_PROXY, "https_proxy": DEAD_PROXY,
                "HTTP_PROXY": DEAD_PROXY, "HTTPS_PROXY": DEAD_PROXY, "no_proxy": "127.0.0.1,localhost",
                "HF_HUB_OFFLINE": "1", "ARGOS_DEVICE_TYPE": "cpu", "ARGOS_INTER_THREADS": "1",
                "ARGOS_INTRA_THREADS": "1", "ARGOS_CHECK_FETCH_LOG": str(fetch_log),
                "ARGOS_CHECK_WHOLE_LINES": "1" if whole_lines else "0", "OMP_NUM_THREADS": "1"})
    if compute_type:
        env["ARGOS_COMPUTE_TYPE"] = compute_type
    return env


def fetches(log: Path) -> list[str]:
    if not log.exists():
        return []
    seen = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    return list(dict.fromkeys(entry.get("url") or f"host {entry['host']}" for entry in seen))


def run_argos(python: Path, work: Path, packages: list[Path], source: str, target: str, texts: list[str], *,
              whole_lines: bool, compute_type: str | None) -> dict:
    """Argos Translate on ``texts`` in a fresh home: its translations, sentence counts, the compute
    type CTranslate2 chose, an error, and what it tried to fetch."""
    home = Path(tempfile.mkdtemp(prefix="argos-home-", dir=work))
    job, worker, log = home / "job.json", work / "argos_worker.py", home / "fetches.jsonl"
    worker.write_text(ARGOS_WORKER, encoding="utf-8")
    job.write_text(json.dumps({"packages": [str(p) for p in packages], "source": source, "target": target,
                               "texts": texts}), encoding="utf-8")
    proc = subprocess.run([str(python), str(worker), str(job)], capture_output=True, text=True,
                          env=offline_env(home, log, whole_lines=whole_lines, compute_type=compute_type))
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"translations": [], "splits": [], "error": f"exit {proc.returncode}: {proc.stderr.strip()[-2000:]}"}
    result["fetches"] = fetches(log)
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_libretranslate(python: Path, work: Path, packages: list[Path], pairs: list[tuple[str, str, list[str]]], *,
                       whole_lines: bool, timeout: float = 600) -> dict:
    """A LibreTranslate server with only ``packages`` installed: each pair's texts through its HTTP API."""
    home = Path(tempfile.mkdtemp(prefix="libretranslate-home-", dir=work))
    log = home / "fetches.jsonl"
    env = offline_env(home, log, whole_lines=whole_lines)
    install = "import sys\nfrom argostranslate import package\nfor p in sys.argv[1:]: package.install_from_path(p)\n"
    subprocess.run([str(python), "-c", install, *map(str, packages)], check=True, env=env, capture_output=True)
    launcher = work / "libretranslate_launcher.py"
    launcher.write_text(LIBRETRANSLATE_LAUNCHER, encoding="utf-8")
    port = free_port()
    codes = sorted({code for source, target, _ in pairs for code in (source, target)})
    server_log = home / "server.log"
    with server_log.open("w", encoding="utf-8") as out:
        server = subprocess.Popen([str(python), str(launcher), "--host", "127.0.0.1", "--port", str(port),
                                   "--load-only", ",".join(codes), "--threads", "1", "--disable-files-translation"],
                                  stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    result: dict = {"pairs": {}, "error": None}
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{base}/languages", timeout=5) as response:
                    result["languages"] = json.load(response)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start: {server_log.read_text(encoding='utf-8')[-2000:]}")
                time.sleep(1)
        for source, target, texts in pairs:
            out = []
            for text in texts:
                body = json.dumps({"q": text, "source": source, "target": target, "format": "text"}).encode()
                request = urllib.request.Request(f"{base}/translate", data=body,
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=120) as response:
                    out.append(json.load(response)["translatedText"])
            result["pairs"][f"{source}-{target}"] = out
    except Exception as err:
        result["error"] = f"{type(err).__name__}: {err}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server's own process group (start_new_session)
        server.wait(timeout=30)
    result["fetches"] = fetches(log)
    result["log_tail"] = server_log.read_text(encoding="utf-8")[-1500:]
    return result


def ours(run_dir: Path, texts: list[str], work: Path) -> list[str]:
    """``transformer translate`` with Argos Translate's decoding settings."""
    source = work / f"{run_dir.name}.src"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    command = [str(Path(sys.executable).with_name("transformer")), "translate", str(run_dir), "--input", str(source),
               "--segment", "lines", "--beam", str(BEAM), "--length-penalty", "exponent", "--alpha",
               str(LENGTH_PENALTY), "--stopping", "k_finished", "--no-progress", "--threads", "1"]
    proc = subprocess.run(command, capture_output=True, text=True, check=True)
    return proc.stdout.splitlines()


def ctranslate2_reference(package_dir: Path, texts: list[str], compute_type: str) -> list[str]:
    """CTranslate2 here, on the package's own pieces, with Argos's ``translate_batch`` settings and
    its detokenization: what Argos gives when only the model decides."""
    import ctranslate2
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(package_dir / "sentencepiece.model"))
    translator = ctranslate2.Translator(str(package_dir / "model"), device="cpu", compute_type=compute_type,
                                        inter_threads=1, intra_threads=1)
    results = translator.translate_batch([sp.encode(t, out_type=str) for t in texts], replace_unknowns=True,
                                         max_batch_size=32, batch_type="tokens", beam_size=BEAM, num_hypotheses=1,
                                         length_penalty=LENGTH_PENALTY)
    out = []
    for r in results:
        text = sp.decode_pieces(r.hypotheses[0]).replace("\u2581", " ").replace("_", " ")
        out.append(text[1:] if text.startswith(" ") else text)
    return out


def libretranslate_formatting(source: str, translation: str) -> str:
    """LibreTranslate's post-editing of a translation (``improve_translation_formatting``): the
    source's final punctuation and the case of its first letter (or of all of it) carried over."""
    source = source.strip()
    if not source:
        return ""
    if not translation:
        return source
    marks = "!?.,;。"
    if source[-1] in marks:
        if translation[-1] != source[-1]:
            translation = (translation[:-1] if translation[-1] in marks else translation) + source[-1]
    elif translation[-1] in marks:
        translation = translation[:-1]
    if source.islower():
        return translation.lower()
    if source.isupper():
        return translation.upper()
    if source[0].islower():
        return translation[0].lower() + translation[1:]
    if source[0].isupper():
        return translation[0].upper() + translation[1:]
    return translation


def compare(texts: list[str], mine: list[str], theirs: list[str], *, tokenizer_differs: list[bool],
            splits: list[int], reference: list[str], float_reference: list[str], formatting: bool = False) -> dict:
    """The share of identical translations and each differing one with its reason.

    ``reference``: CTranslate2's translations here with the compute type the Argos process used;
    ``float_reference``: the same in float32. ``formatting``: LibreTranslate's post-editing applies.
    """
    def edited(i: int, text: str) -> str:
        return libretranslate_formatting(texts[i], text) if formatting else text

    rows = []
    for i, (text, a, b) in enumerate(zip(texts, mine, theirs)):
        if a == b:
            continue
        if tokenizer_differs[i]:
            reason = "tokenizer"
        elif splits and splits[i] > 1:
            reason = f"sentence splitter ({splits[i]} sentences)"
        elif formatting and reference[i] == a and edited(i, a) == b:
            reason = "LibreTranslate's punctuation and case fixes"
        elif edited(i, reference[i]) == b and float_reference[i] == a:
            reason = "number format (the int8 weights CTranslate2 made of the float32 ones)"
        elif edited(i, reference[i]) == b:
            reason = "decoding (CTranslate2's beam search vs ours)"
        else:
            reason = "unexplained"
        rows.append({"index": i, "source": text, "ours": a, "theirs": b, "reason": reason})
    n = min(len(mine), len(theirs))
    return {"compared": n, "identical": n - len(rows), "identical_share": (n - len(rows)) / n if n else 0.0,
            "differences": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"),
                        help="the data directory holding multi30k/test_2016_flickr.LANG.gz")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--venvs", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--only", choices=("argos", "libretranslate"))
    parser.add_argument("--sentence-model", action="append", default=[], metavar="LANG=FILE.onnx",
                        help="a MiniSBD model to package for the runs translating from LANG")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()

    from transformer.interop import export_argos
    from transformer.run.directory import run_languages
    from transformer.text import Vocabularies

    sentence_models = dict(item.split("=", 1) for item in args.sentence_model)
    work = Path(tempfile.mkdtemp(prefix="argos-check-"))
    report: dict = {"argos": ARGOS, "libretranslate": LIBRETRANSLATE, "beam": BEAM, "length_penalty": LENGTH_PENALTY,
                    "pairs": []}
    try:
        pairs = []
        for run_dir in args.runs:
            source, target = run_languages(run_dir)
            if not source or not target:
                parser.error(f"{run_dir} does not record its languages")
            texts = read_lines(args.data / "multi30k" / f"test_2016_flickr.{source}.gz", args.sentences)
            package = export_argos(run_dir, work / f"{source}-{target}.argosmodel", sample=texts,
                                   sentence_model=sentence_models.get(source))
            unpacked = work / f"{source}-{target}"
            shutil.unpack_archive(package, unpacked, "zip")
            package_dir = next(unpacked.iterdir())
            vocab = Vocabularies.load(run_dir)
            import sentencepiece

            sp = sentencepiece.SentencePieceProcessor(model_file=str(package_dir / "sentencepiece.model"))
            pairs.append({"run": str(run_dir), "source": source, "target": target, "texts": texts, "package": package,
                          "package_dir": package_dir, "ours": ours(run_dir, texts, work),
                          "tokenizer_differs": [sp.encode(t, out_type=str) != vocab.src.pieces(vocab.src.encode(t))
                                                for t in texts]})
        packages = [p["package"] for p in pairs]
        whole_lines = any(p["source"] not in sentence_models for p in pairs)
        report["sentence_splitting"] = ("each line whole (MiniSBD's model is fetched on first use, offline it "
                                        "cannot be)" if whole_lines else "the packaged MiniSBD models")

        if args.only != "libretranslate":
            python = ensure_venv(args.venvs / "argos-venv", ARGOS, "argostranslate", work)
            probe = run_argos(python, work, packages, pairs[0]["source"], pairs[0]["target"], pairs[0]["texts"][:1],
                              whole_lines=False, compute_type=None)
            report["argos_offline_as_installed"] = {"error": probe["error"], "fetches": probe["fetches"]}
            for pair in pairs:
                pair["argos"] = {}
                for compute_type in ("auto", "float32"):
                    got = run_argos(python, work, packages, pair["source"], pair["target"], pair["texts"],
                                    whole_lines=whole_lines, compute_type=compute_type)
                    reference = ctranslate2_reference(pair["package_dir"], pair["texts"],
                                                      got.get("compute_type") or compute_type)
                    float_reference = ctranslate2_reference(pair["package_dir"], pair["texts"], "float32")
                    pair["argos"][compute_type] = {
                        "installed": not got["error"], "error": got["error"], "fetches": got["fetches"],
                        "compute_type": got.get("compute_type"),
                        **compare(pair["texts"], pair["ours"], got["translations"],
                                  tokenizer_differs=pair["tokenizer_differs"], splits=got["splits"],
                                  reference=reference, float_reference=float_reference)}
        if args.only != "argos":
            python = ensure_venv(args.venvs / "libretranslate-venv", LIBRETRANSLATE, "libretranslate", work)
            probe = run_libretranslate(python, work, packages[:1], [], whole_lines=False)
            report["libretranslate_offline_one_package"] = {"error": probe["error"], "fetches": probe["fetches"]}
            got = run_libretranslate(python, work, packages, [(p["source"], p["target"], p["texts"]) for p in pairs],
                                     whole_lines=whole_lines)
            report["libretranslate_server"] = {"error": got["error"], "fetches": got["fetches"],
                                               "languages": got.get("languages")}
            for pair in pairs:
                translations = got["pairs"].get(f"{pair['source']}-{pair['target']}", [])
                reference = ctranslate2_reference(pair["package_dir"], pair["texts"], "default")
                pair["libretranslate"] = compare(pair["texts"], pair["ours"], translations,
                                                 tokenizer_differs=pair["tokenizer_differs"], splits=[],
                                                 reference=reference, float_reference=reference, formatting=True)
                pair["libretranslate"]["error"] = got["error"]
        for pair in pairs:
            report["pairs"].append({k: (str(v) if isinstance(v, Path) else v) for k, v in pair.items()
                                    if k not in ("texts", "ours", "tokenizer_differs")}
                                   | {"tokenizer_differences": sum(pair["tokenizer_differs"])})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


def print_report(report: dict) -> None:
    print(f"{report['argos']}, {report['libretranslate']}; beam {report['beam']}, length penalty "
          f"{report['length_penalty']}; sentence splitting: {report.get('sentence_splitting')}")
    for key in ("argos_offline_as_installed", "libretranslate_offline_one_package", "libretranslate_server"):
        if key in report:
            entry = report[key]
            print(f"{key}: error {entry['error']!r}; tried to fetch {entry['fetches'] or 'nothing'}")
    for pair in report["pairs"]:
        name = f"{pair['source']}->{pair['target']}"
        print(f"\n{name} ({pair['run']}): source segmentations differing from ours: {pair['tokenizer_differences']}")
        results = [(f"Argos Translate, compute type {k} ({v.get('compute_type')})", v)
                   for k, v in pair.get("argos", {}).items()]
        if "libretranslate" in pair:
            results.append(("LibreTranslate server", pair["libretranslate"]))
        for label, result in results:
            if result.get("error"):
                print(f"  {label}: error {result['error']}")
            print(f"  {label}: {result['identical']}/{result['compared']} identical "
                  f"({100 * result['identical_share']:.0f}%)")
            for row in result["differences"]:
                print(f"    [{row['index']}] {row['reason']}\n      src:    {row['source']}\n"
                      f"      ours:   {row['ours']}\n      theirs: {row['theirs']}")


if __name__ == "__main__":
    raise SystemExit(main())
