"""LibreTranslate's own web page, as the ``libretranslate`` package renders it, in front of
``transformer serve``: typed text, detection, another target, a file and a suggestion, in Chromium.

LibreTranslate's page calls the API on its own origin, so it is served here by LibreTranslate's
own Flask app (``libretranslate.app.create_app``, in its own virtual environment, see
``benchmarks/argos_check.py``) behind a small WSGI dispatcher that forwards LibreTranslate's API
routes (``/translate``, ``/detect``, ``/languages``, ``/translate_file``, ``/download_file/...``,
``/suggest``, ``/frontend/settings``, ``/spec``) to ``transformer serve`` unchanged (the ``Host``
header too, so ``translatedFileUrl`` names the page's origin) and renders everything else itself:
the index page, ``js/app.js``, the static files. LibreTranslate's app is built with no Argos
model: its model installation at start-up is skipped and the languages it reads at start-up are
the ones ``transformer serve`` lists (they only choose the page's defaults, which the page then
takes from ``/frontend/settings``). It runs offline: every host name lookup but the loopback's is
refused and recorded (the report lists them).

Then headless Chromium (Playwright, ``/usr/bin/chromium``) opens the page and, as a user would:
types a French sentence (source "Auto Detect", the page's default) and waits for the
translation and the detected language; picks German as the target (translated through English)
and back; suggests a correction; switches to Files, picks a subtitles file, presses Translate
and takes the download; picks French as the source and suggests again. Each answer is compared
with the Python API's translation along the same route (through the pivot: the two models in
turn). Exit status 0 when every check passes, 1 when one fails, 3 when LibreTranslate's virtual
environment cannot be made.

    python benchmarks/libretranslate_frontend.py RUN_FR_EN RUN_EN_DE [RUN_DE_EN] --json page.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from argos_check import GUARD, LIBRETRANSLATE, ensure_venv, fetches, free_port, offline_env  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
SENTENCE = "Le chat noir dort sur la table de la cuisine."
SUGGESTION = "The black cat sleeps on the kitchen table."
SRT = ("1\r\n00:00:01,000 --> 00:00:02,500\r\nLe chat noir dort.\r\n\r\n"
       "2\r\n00:00:03,000 --> 00:00:05,000\r\nNous mangeons du pain.\r\nIl pleut.\r\n\r\n")

# Run by LibreTranslate's Python: its app for the page, our server for the API (argv: API URL, port).
HOST = GUARD + r'''
import sys
import urllib.error
import urllib.request
from types import SimpleNamespace

import libretranslate.init
import libretranslate.language
from libretranslate.app import create_app
from libretranslate.main import get_parser
from werkzeug.serving import run_simple

api, port = sys.argv[1], int(sys.argv[2])
API = ("/translate", "/detect", "/languages", "/translate_file", "/suggest", "/frontend/settings", "/spec")

with urllib.request.urlopen(api + "/languages", timeout=30) as response:
    listed = json.load(response)
by_code = {item["code"]: SimpleNamespace(code=item["code"], name=item["name"]) for item in listed}
for item in listed:
    by_code[item["code"]].translations_from = [SimpleNamespace(to_lang=by_code[t]) for t in item["targets"]]
libretranslate.init.boot = lambda *args, **kwargs: None  # no Argos model to install: the server has the models
libretranslate.language.load_languages = lambda: list(by_code.values())
page = create_app(get_parser().parse_args(["--host", "127.0.0.1", "--port", str(port)]))


def forward(environ, start_response):
    """The request, as it came, to the server; its answer, as it came, back."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else None
    query = environ.get("QUERY_STRING")
    url = api + environ["PATH_INFO"] + ("?" + query if query else "")
    headers = {key[5:].replace("_", "-").title(): value for key, value in environ.items() if key.startswith("HTTP_")}
    if environ.get("CONTENT_TYPE"):
        headers["Content-Type"] = environ["CONTENT_TYPE"]
    request = urllib.request.Request(url, data=body, headers=headers, method=environ["REQUEST_METHOD"])
    try:
        response = urllib.request.urlopen(request, timeout=300)
    except urllib.error.HTTPError as err:
        response = err
    data = response.read()
    skipped = {"transfer-encoding", "connection", "content-length"}
    start_response(f"{response.status} {response.reason}",
                   [(k, v) for k, v in response.headers.items() if k.lower() not in skipped]
                   + [("Content-Length", str(len(data)))])
    return [data]


def dispatch(environ, start_response):
    path = environ["PATH_INFO"]
    if path in API or path.startswith("/download_file/"):
        return forward(environ, start_response)
    return page(environ, start_response)


print("ready", flush=True)
run_simple("127.0.0.1", port, dispatch, threaded=True)
'''


def wait_for(url: str, proc: subprocess.Popen, log: Path, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer: {log.read_text(encoding='utf-8')[-2000:]}") from None
            time.sleep(0.5)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the process's own group (start_new_session)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Reference:
    """What the server must answer, from the Python API: a pair's model, or two through the pivot."""

    def __init__(self, run_dirs: list[Path], pivot: str = "en") -> None:
        from transformer.translate.translator import Translator

        self.pivot = pivot
        self.translators = {}
        for run_dir in run_dirs:
            translator = Translator.from_run_dir(run_dir)
            self.translators[translator.src_lang, translator.tgt_lang] = translator

    def route(self, source: str, target: str) -> list:
        if (source, target) in self.translators:
            return [self.translators[source, target]]
        return [self.translators[source, self.pivot], self.translators[self.pivot, target]]

    def text(self, source: str, target: str, text: str) -> str:
        from transformer.translate.document import translate_document

        for translator in self.route(source, target):
            text = translate_document(translator, text).text
        return text

    def file(self, source: str, target: str, data: bytes, name: str) -> bytes:
        from transformer.translate.files import translate_file

        [translator] = self.route(source, target)  # a file is checked on a pair with a model of its own
        return translate_file(data, name, translator, target_lang=target)


def drive(page_url: str, reference: Reference, work: Path, suggestions: Path, checks: list[dict]) -> None:
    """The user's steps in Chromium; each outcome appended to ``checks``."""
    from playwright.sync_api import sync_playwright

    def check(what: str, ok: bool, **details) -> None:
        checks.append({"check": what, "ok": bool(ok), **details})
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {details}" if not ok else ""), flush=True)

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless=new", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(accept_downloads=True)
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(page_url)
        page.wait_for_function("window._vueApp && !window._vueApp.loading && window._vueApp.langs.length > 0",
                               timeout=60_000)
        app = "window._vueApp"
        check("the page loads its settings and languages",
              page.evaluate(f"{app}.sourceLang") == "auto" and not page.evaluate(f"{app}.error"),
              source=page.evaluate(f"{app}.sourceLang"), target=page.evaluate(f"{app}.targetLang"),
              error=page.evaluate(f"{app}.error"))
        target = page.evaluate(f"{app}.targetLang")

        def translation() -> str:
            page.wait_for_function(f"!{app}.loadingTranslation && {app}.translatedText !== ''", timeout=120_000)
            return page.input_value("#textarea2")

        page.fill("#textarea1", SENTENCE)  # an input event, as typing gives
        got = translation()
        want = reference.text("fr", target, SENTENCE)
        detected = page.evaluate(f"{app}.detectedLangText")
        check(f"typed French, Auto Detect -> {target}", got == want, got=got, want=want)
        check("the detected language is shown", detected.startswith(": French ("), shown=detected)

        if "de" in page.evaluate(f"{app}.targetLangs.map(l => l.code)") and target != "de":
            page.evaluate(f"{app}.translatedText = ''")
            page.select_option("select[aria-labelledby=targetLangLabel]", "de")
            got = translation()
            want = reference.text("fr", "de", SENTENCE)
            check("German picked as the target (through English)", got == want, got=got, want=want)
            page.select_option("select[aria-labelledby=targetLangLabel]", target)
            translation()

        def suggest(source: str) -> None:
            """Suggest a correction of the translation shown, the source language being ``source``."""
            page.click("button[aria-label='Suggest translation']")
            page.fill("#textarea2", SUGGESTION)
            page.click("button.btn-action:has-text('Send')")
            # a refused suggestion leaves LibreTranslate's page in its editing state, with the error shown
            page.wait_for_function(f"!{app}.isSuggesting || {app}.error !== ''", timeout=30_000)
            stored = [json.loads(line) for line in suggestions.read_text(encoding="utf-8").splitlines()]
            error = page.evaluate(f"{app}.error")
            check(f"a suggestion with source {source} is stored",
                  any((r["q"], r["s"], r["source"]) == (SENTENCE, SUGGESTION, source) for r in stored), error=error)
            page.evaluate(f"{app}.error = ''; {app}.isSuggesting = false")

        suggesting = page.evaluate(f"{app}.suggestions")
        if suggesting:
            suggest("auto")  # the page's default source, Auto Detect

        source_file = work / "subtitles.srt"
        source_file.write_text(SRT, encoding="utf-8", newline="")
        page.click("button.btn-switch-type:has-text('Translate Files')")
        page.set_input_files("input[type=file]", str(source_file))
        with page.expect_download(timeout=120_000) as download:
            page.click(".file-dropzone button.btn:has-text('Translate')")
        path = download.value.path()
        got = Path(path).read_bytes() if path else b""
        want = reference.file("fr", target, SRT.encode(), "subtitles.srt")
        name = download.value.suggested_filename
        check("a subtitles file (Auto Detect) translated and downloaded",
              got == want and name == f"subtitles_{target}.srt",
              name=name, got=got.decode(errors="replace"), want=want.decode())

        if suggesting:
            page.click("button.btn-switch-type:has-text('Translate Text')")
            page.select_option("select[aria-labelledby=sourceLangLabel]", "fr")
            page.wait_for_function(f"!{app}.loadingTranslation", timeout=120_000)
            suggest("fr")
        check("no script error on the page", not errors and not page.evaluate(f"{app}.error"), errors=errors)
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR",
                        help="runs of fr -> en and en -> de at least (the page's sentence is French)")
    parser.add_argument("--venvs", type=Path, default=Path(tempfile.gettempdir()),
                        help="where LibreTranslate's virtual environment is (libretranslate-venv), made if missing")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="libretranslate-frontend-"))
    report: dict = {"libretranslate": LIBRETRANSLATE, "checks": []}
    procs: list[subprocess.Popen] = []
    try:
        python = ensure_venv(args.venvs / "libretranslate-venv", LIBRETRANSLATE, "libretranslate", work)
        suggestions = work / "suggestions.jsonl"
        api_port = free_port()
        api = f"http://127.0.0.1:{api_port}"
        serve_log = work / "serve.log"
        with serve_log.open("w", encoding="utf-8") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "transformer.cli", "serve", *map(str, args.runs), "--port", str(api_port),
                 "--log-level", "warning", "--suggestions", str(suggestions)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        wait_for(api + "/health", procs[0], serve_log)

        home = work / "home"
        home.mkdir()
        fetch_log = home / "fetches.jsonl"
        host = work / "libretranslate_page.py"
        host.write_text(HOST, encoding="utf-8")
        page_port = free_port()
        host_log = work / "page.log"
        with host_log.open("w", encoding="utf-8") as out:
            procs.append(subprocess.Popen([str(python), str(host), api, str(page_port)], stdout=out,
                                          stderr=subprocess.STDOUT, cwd=home, start_new_session=True,
                                          env=offline_env(home, fetch_log, whole_lines=False)))
        page_url = f"http://127.0.0.1:{page_port}/"
        wait_for(page_url, procs[1], host_log)
        drive(page_url, Reference(args.runs), work, suggestions, report["checks"])
        report["fetches"] = fetches(fetch_log)
    except Exception as err:  # reported as a failed check, with the servers' logs
        report["checks"].append({"check": "the run", "ok": False, "error": f"{type(err).__name__}: {err}"})
        print(f"FAIL {type(err).__name__}: {err}", flush=True)
        for log in ("serve.log", "page.log"):
            if (work / log).exists():
                print(f"--- {log}\n{(work / log).read_text(encoding='utf-8')[-3000:]}", flush=True)
    finally:
        for proc in reversed(procs):
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)
    passed = sum(c["ok"] for c in report["checks"])
    print(f"{passed} of {len(report['checks'])} checks passed; host names looked up by LibreTranslate's app: "
          f"{report.get('fetches') or 'none'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0 if report["checks"] and passed == len(report["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
