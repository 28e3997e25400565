"""The server's bounds on work nobody waits for and on what clients may pile up: a model call
whose requests all gave up is stopped at its next decoder step, a request's glossary work is
bounded, uploads in flight share a budget, the download store and the suggestions file have caps.

In-process (TestClient) against the small random model of the tiny_run fixture (conftest.py).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from serve_helpers import assert_error

from transformer.decoding import beam
from transformer.errors import UserError
from transformer.serve.access import AccessPolicy, KeyLimits, KeyRing
from transformer.serve.app import create_app
from transformer.serve.libretranslate.files import FileStore
from transformer.serve.libretranslate import LibreTranslateOptions
from transformer.serve.limits import ServeLimits
from transformer.serve.libretranslate.suggestions import SuggestionStore, SuggestionStoreError
from transformer.translate.translator import Translator

TERMS = [{"source": "chat", "target": "cat"}, {"source": "étudiant", "target": "student"}]


@pytest.fixture(scope="module")
def translator(tiny_run) -> Translator:
    return Translator.from_run_dir(tiny_run())


# --------------------------------------------------------------------------------------------- cancellation
def test_a_glossary_search_nobody_waits_for_stops_and_frees_the_model(translator, monkeypatch):
    steps = []
    logits = beam._Rows.logits

    def slow(self):  # 100 ms a decoder step: the long search takes 60 steps, 6 s
        steps.append(time.monotonic())
        time.sleep(0.1)
        return logits(self)

    monkeypatch.setattr(beam._Rows, "logits", slow)
    # The 2 s timeout ends the long search well before its 6 s and leaves the short one (3 steps) ample
    # time on a slow machine, unless it has to wait out the long search's last 4 s.
    app = create_app(translator, ServeLimits(timeout_s=2, max_output_tokens=60), src_lang="fr", tgt_lang="en")
    with TestClient(app) as client:
        long = {"text": "le chat noir est étudiant", "beam_size": 4, "max_length": 60, "glossary": TERMS}
        assert_error(client.post("/v1/translate", json=long), 503, "timeout")
        gave_up = time.monotonic()
        short = client.post("/v1/translate", json={"text": "le chat", "beam_size": 2, "max_length": 3})
        assert short.status_code == 200, short.text  # the model was free for it within its 2 s
        stopped = [t for t in steps if t > gave_up]
        assert len(stopped) <= 3 + 2, f"{len(stopped)} decoder steps after the request gave up"
        assert app.state.batcher.health()["cancelled_calls"] == 1


def test_glossary_work_beyond_the_bound_is_refused_in_each_apis_shape(translator):
    limits = ServeLimits(max_glossary_work=8)
    with TestClient(create_app(translator, limits, src_lang="fr", tgt_lang="en")) as client:
        text = "Le chat dort. Le chat mange. Un étudiant lit."  # 3 terms found
        ok = client.post("/v1/translate", json={"text": text, "beam_size": 2, "max_length": 8, "glossary": TERMS})
        assert ok.status_code == 200, ok.text  # 3 x 2 = 6
        too_much = {"text": text, "beam_size": 4, "max_length": 8, "glossary": TERMS}  # 3 x 4 = 12
        assert_error(client.post("/v1/translate", json=too_much), 422, "invalid_request", "--max-glossary-work", "12")
        lt = client.post("/translate", json={"q": text, "source": "fr", "target": "en", "glossary": TERMS})  # its beam: 4
        assert lt.status_code == 400 and "--max-glossary-work" in lt.json()["error"], lt.text


# --------------------------------------------------------------------------------------------- uploads
def upload(client, name: str, data: bytes):
    return client.post("/translate_file", data={"source": "fr", "target": "en"}, files={"file": (name, data)})


def test_uploads_in_flight_share_a_budget_and_parse_on_their_own_threads(translator, monkeypatch):
    from transformer.serve import libretranslate

    entered, release, threads = threading.Event(), threading.Event(), []
    read_file = libretranslate.read_file

    def held(data, name):  # the first upload stays in its parse until released
        threads.append(threading.current_thread().name)
        if name == "held.txt":
            entered.set()
            release.wait(10)
        return read_file(data, name)

    monkeypatch.setattr(libretranslate, "read_file", held)
    limits = ServeLimits(max_uploads=2, max_upload_bytes=100_000, max_file_bytes=200_000)
    with TestClient(create_app(translator, limits, src_lang="fr", tgt_lang="en")) as client:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(upload, client, "held.txt", b"Le chat dort.")
            assert entered.wait(10)
            big = upload(client, "big.txt", b"Le chat dort." + b"\n" * 110_000)  # 110 kB beside one in flight
            assert big.status_code == 503 and "uploads" in big.json()["error"], big.text
            assert big.headers["Retry-After"] == "5"
            small = upload(client, "small.txt", b"Le chien mange.")
            assert small.status_code == 200, small.text  # two in flight: within both bounds
            release.set()
            assert first.result().status_code == 200
        assert client.app.state.uploads.health()["uploads_in_flight"] == 0
        alone = upload(client, "big.txt", b"Le chat dort." + b"\n" * 110_000)  # nothing in flight: any one upload fits
        assert alone.status_code == 200, alone.text
    assert threads and all(name.startswith("transformer-serve-files") for name in threads), threads


def test_an_upload_beyond_the_budget_is_refused_before_its_body_is_read(translator):
    import asyncio

    app = create_app(translator, ServeLimits(max_uploads=1), src_lang="fr", tgt_lang="en")
    reads, sent = [], []

    async def receive():
        reads.append(1)
        return {"type": "http.request", "body": b"--x--\r\n", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/translate_file", "raw_path": b"/translate_file", "root_path": "", "query_string": b"",
             "headers": [(b"host", b"t"), (b"content-length", b"7"),
                         (b"content-type", b"multipart/form-data; boundary=x")],
             "client": ("127.0.0.1", 4000), "server": ("127.0.0.1", 80)}
    with app.state.uploads.reserve(10):  # one upload in flight: the budget's count is full
        asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 503 and (b"retry-after", b"5") in sent[0]["headers"], sent
    assert "uploads" in json.loads(sent[1]["body"])["error"]
    assert reads == []  # refused unread: the budget bounds the bodies held, not only the files parsed


def test_uploads_beyond_the_count_are_refused(translator, monkeypatch):
    from transformer.serve import libretranslate

    entered, release = threading.Event(), threading.Event()
    read_file = libretranslate.read_file

    def held(data, name):
        entered.set()
        release.wait(10)
        return read_file(data, name)

    monkeypatch.setattr(libretranslate, "read_file", held)
    with TestClient(create_app(translator, ServeLimits(max_uploads=1), src_lang="fr", tgt_lang="en")) as client:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(upload, client, "a.txt", b"Le chat dort.")
            assert entered.wait(10)
            second = upload(client, "b.txt", b"Le chien mange.")
            release.set()
            assert second.status_code == 503 and second.headers["Retry-After"] == "5", second.text
            assert first.result().status_code == 200


# --------------------------------------------------------------------------------------------- the download store
def test_the_download_store_keeps_at_most_its_files_and_bytes_oldest_removed_first(tmp_path):
    now = [0.0]
    store = FileStore(100.0, max_files=3, max_bytes=1000, sweep_s=0, clock=lambda: now[0])
    try:
        names = [store.put(f"f{i}.txt", b"x" * 100) for i in range(3)]
        now[0] = 10.0
        fourth = store.put("f3.txt", b"x" * 100)  # a fourth file: the oldest goes
        assert store.get(names[0]) is None and store.get(names[1]) is not None and len(store) == 3
        big = store.put("big.txt", b"y" * 901)  # 901 more bytes: all the others go, oldest first
        assert [store.get(n) for n in (names[1], names[2], fourth)] == [None, None, None]
        assert store.get(big) is not None and store.bytes == 901 and store.evicted == 4
        huge = store.put("huge.txt", b"z" * 5000)  # larger than the store: it is kept alone
        assert store.get(huge) is not None and len(store) == 1
        assert len(list(store._path().iterdir())) == 1  # the files removed are gone from the disk
    finally:
        store.close()


def test_expired_downloads_are_removed_by_a_timer_without_another_request(tmp_path):
    store = FileStore(0.2, sweep_s=0.05)
    try:
        store.put("a.txt", b"abc")
        folder = store._path()
        deadline = time.monotonic() + 5
        while any(folder.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(folder.iterdir()) and len(store) == 0
    finally:
        store.close()


# --------------------------------------------------------------------------------------------- suggestions
def test_the_suggestions_file_stops_at_its_size(tmp_path, translator):
    path = tmp_path / "s.jsonl"
    with SuggestionStore(path, max_bytes=400) as store, \
            TestClient(create_app(translator, src_lang="fr", tgt_lang="en",
                                  libretranslate_options=LibreTranslateOptions(suggestions=store))) as client:
        answers = [client.post("/suggest", data={"q": "Le chat dort.", "s": "The cat sleeps.", "source": "fr",
                                                 "target": "en"}) for _ in range(6)]
    assert [a.status_code for a in answers[:3]] == [200, 200, 200]
    assert answers[-1].status_code == 507 and "--max-suggestions-bytes" in answers[-1].json()["error"]
    assert path.stat().st_size <= 400


def test_the_suggestions_file_is_not_a_symbolic_link(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "s.jsonl").symlink_to(target)
    with pytest.raises(SuggestionStoreError, match="symbolic link"):
        SuggestionStore(tmp_path / "s.jsonl")
    assert target.read_text() == ""


def test_suggestions_with_unicode_line_breaks_stay_one_record_a_line(tmp_path):
    path = tmp_path / "s.jsonl"
    with SuggestionStore(path) as store:
        for mark in ("\u2028", "\u2029", "\u0085"):
            store.add(f"Le chat{mark}dort.", f"The cat{mark}sleeps.", "fr", "en")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    assert [json.loads(line)["q"] for line in lines] == [f"Le chat{m}dort." for m in ("\u2028", "\u2029", "\u0085")]


# --------------------------------------------------------------------------------------------- keys on /v1
def test_keys_and_limits_guard_the_native_api_too(translator):
    keys = KeyRing({"good-key-123": KeyLimits(req_limit=50)}, AccessPolicy(req_limit=10, require_key=True))
    options = LibreTranslateOptions(keys=keys)
    with TestClient(create_app(translator, src_lang="fr", tgt_lang="en", libretranslate_options=options)) as client:
        ask = {"text": "Le chat dort.", "max_length": 5}
        assert_error(client.post("/v1/translate", json=ask), 400, "api_key_required", "API key")
        assert_error(client.post("/v1/attention", json=ask), 400, "api_key_required")
        assert_error(client.post("/v1/translate", json=ask, headers={"X-API-Key": "wrong-key-999"}), 403,
                     "invalid_api_key")
        for header in ({"X-API-Key": "good-key-123"}, {"Authorization": "Bearer good-key-123"}):
            assert client.post("/v1/translate", json=ask, headers=header).status_code == 200
            assert client.post("/v1/attention", json=ask, headers=header).status_code == 200
    open_keys = KeyRing({}, AccessPolicy(req_limit=3))  # no key needed, 3 requests a minute per address
    options = LibreTranslateOptions(keys=open_keys)
    with TestClient(create_app(translator, src_lang="fr", tgt_lang="en", libretranslate_options=options)) as client:
        ask = {"text": ["Le chat dort.", "Il pleut."], "max_length": 5}
        assert client.post("/v1/translate", json=ask).status_code == 200  # two texts: counts 2
        assert client.post("/v1/translate", json=ask).status_code == 200  # 2 < 3 passes, then counts 4
        limited = client.post("/v1/translate", json=ask)
        assert_error(limited, 429, "rate_limited", "Slowdown: 3 per 1 minute")
        assert int(limited.headers["retry-after"]) >= 1
        lt = client.post("/translate", json={"q": "Le chat.", "source": "fr", "target": "en"})
        assert lt.status_code == 429, lt.text  # the same address's counters on the other API: one policy


def test_the_native_apis_schema_lists_the_guards_answers_in_its_error_shape(translator):
    with TestClient(create_app(translator, src_lang="fr", tgt_lang="en")) as client:
        schema = client.get("/openapi.json").json()
    error = {"$ref": "#/components/schemas/ErrorResponse"}
    for path in ("/v1/translate", "/v1/attention"):
        responses = schema["paths"][path]["post"]["responses"]
        for code in ("400", "403", "413", "422", "429", "500", "503"):
            assert responses[code]["content"]["application/json"]["schema"] == error, (path, code)
        for code in ("403", "429", "503"):  # the answers that may say when to come back
            assert responses[code]["headers"]["Retry-After"]["schema"] == {"type": "integer"}, (path, code)
        for name in ("api_key_required", "text_too_long", "invalid_api_key", "banned", "rate_limited"):
            assert any(name in r["description"] for r in responses.values()), (path, name)
    for path in ("/health", "/v1/model", "/v1/models"):  # not guarded: no refusal of the guard listed
        assert not {"403", "429"} & set(schema["paths"][path]["get"]["responses"]), path


# --------------------------------------------------------------------------------------------- X-Forwarded-For
async def _detects(app, forwarded_allow_ips):
    import httpx

    from transformer.serve.protocol import ConnectionStats, uvicorn_config
    from transformer.serve.limits import ConnectionLimits

    config = uvicorn_config(app, ConnectionLimits(), ConnectionStats(), forwarded_allow_ips=forwarded_allow_ips)
    config.load()  # the app as uvicorn serves it (with or without its proxy-headers middleware)
    transport = httpx.ASGITransport(app=config.loaded_app, client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return [(await client.post("/detect", data={"q": "Le chat dort."},
                                   headers={"X-Forwarded-For": f"203.0.113.{i}"})).status_code for i in range(4)]


def test_a_client_cannot_choose_its_address_with_x_forwarded_for(translator, monkeypatch):
    import asyncio

    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)

    def app():
        keys = KeyRing({}, AccessPolicy(req_limit=2))
        return create_app(translator, src_lang="fr", tgt_lang="en",
                          libretranslate_options=LibreTranslateOptions(keys=keys))

    assert asyncio.run(_detects(app(), None)) == [200, 200, 429, 429]  # one client, whatever it claims
    assert asyncio.run(_detects(app(), "127.0.0.1")) == [200] * 4  # behind a named proxy: its clients apart


def test_serve_refuses_a_bad_forwarded_allow_ips(tmp_path):
    from transformer.serve.cli import _check_forwarded_allow_ips

    _check_forwarded_allow_ips("127.0.0.1, 10.0.0.0/8,*")
    with pytest.raises(UserError, match="--forwarded-allow-ips: 'proxy.local'"):
        _check_forwarded_allow_ips("127.0.0.1,proxy.local")


# --------------------------------------------------------------------------------------------- download URLs
@pytest.mark.parametrize("name", ["a#b.txt", "what?.txt", "100%.txt", "my notes.txt", "tab\there.txt", "é ü.txt"])
def test_the_download_url_of_any_name_fetches_the_file(translator, name):
    # The body written by hand: httpx would escape the name's tab itself, as curl does not.
    body = (b"--b\r\nContent-Disposition: form-data; name=\"source\"\r\n\r\nfr\r\n"
            b"--b\r\nContent-Disposition: form-data; name=\"target\"\r\n\r\nen\r\n"
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + name.encode() + b"\"\r\n\r\n"
            b"Le chat dort.\r\n--b--\r\n")
    with TestClient(create_app(translator, src_lang="fr", tgt_lang="en")) as client:
        answer = client.post("/translate_file", content=body, headers={"Content-Type": "multipart/form-data; boundary=b"})
        assert answer.status_code == 200, answer.text
        url = answer.json()["translatedFileUrl"]
        assert not any(c in url.split("/download_file/", 1)[1] for c in "#? \t")
        # TestClient decodes a path twice (httpx once, then itself): the path as uvicorn would decode it, once.
        path = url.removeprefix("http://testserver")
        download = client.get(path.replace("%", "%25"))
        assert download.status_code == 200, (url, download.text)
        assert download.content and download.content != b"Le chat dort."


# --------------------------------------------------------------------------------------------- upload names, parse errors
def test_a_long_or_unstorable_file_name_is_refused_before_the_translation(translator):
    with TestClient(create_app(translator, src_lang="fr", tgt_lang="en")) as client:
        long = upload(client, "a" * 230 + ".txt", b"Le chat dort.")
        assert long.status_code == 400 and "234 bytes long" in long.json()["error"], long.text
        fits = upload(client, "é" * 96 + ".txt", b"Le chat dort.")  # 196 bytes: kept
        assert fits.status_code == 200, fits.text
        assert client.get(fits.json()["translatedFileUrl"].replace("%", "%25")).status_code == 200


@pytest.mark.parametrize("charset", ["undefined", "idna", "zlib", "rot13", "base64"])
def test_a_file_declaring_an_odd_charset_is_a_400_in_libretranslates_shape(translator, charset):
    page = f'<html><head><meta charset="{charset}"></head><body><p>Le chat dort.</p></body></html>'.encode()
    po = (f'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset={charset}\\n"\n\n'
          'msgid "Le chat dort."\nmsgstr ""\n').encode()
    with TestClient(create_app(translator, src_lang="fr", tgt_lang="en")) as client:
        for name, data in (("a.html", page), ("a.po", po)):
            answer = upload(client, name, data)
            assert answer.status_code in (200, 400), (name, answer.text)
            assert set(answer.json()) == ({"translatedFileUrl"} if answer.status_code == 200 else {"error"})


# --------------------------------------------------------------------------------------------- the keys file
def test_the_keys_file_is_read_as_run_files_are(tmp_path):
    import os

    from transformer.serve.access import KeysFileError, read_keys

    bom = tmp_path / "keys.txt"
    bom.write_bytes("\ufeffgood-key-123 req_limit=5\nother-key-456\n".encode())
    assert sorted(read_keys(bom)) == ["good-key-123", "other-key-456"]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(KeysFileError, match="not a regular file"):
        read_keys(fifo)  # at once, without waiting for a writer
    with pytest.raises(KeysFileError, match="not a regular file"):
        read_keys("/dev/zero")
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(17 * 1024 * 1024)
    with pytest.raises(KeysFileError, match="more than"):
        read_keys(big)


# --------------------------------------------------------------------------------------------- a run's languages
def test_a_runs_language_codes_are_checked_and_lower_cased(translator):
    from transformer.serve.model_set import ModelSet
    from transformer.serve.service import TranslationService

    upper = create_app(translator, src_lang="FR", tgt_lang="En")
    assert (upper.state.service.src_lang, upper.state.service.tgt_lang) == ("fr", "en")
    for bad in ("auto", "AUTO", "../x", "f" * 10_000, "fr\u202e", "12"):
        with pytest.raises(UserError, match="language"):
            create_app(translator, src_lang=bad, tgt_lang="en")
    assert create_app(translator, src_lang="pt-BR", tgt_lang="zh-Hant").state.service.src_lang == "pt-br"
    with pytest.raises(UserError, match="two models translate fr -> en"):
        ModelSet([TranslationService(translator, src_lang="FR", tgt_lang="EN"),
                  TranslationService(translator, src_lang="fr", tgt_lang="en")])


# --------------------------------------------------------------------------------------------- shutdown
def test_closing_the_batcher_stops_the_model_call_running():
    import asyncio

    from transformer.decoding.cancel import check_cancelled
    from transformer.serve.batching import DynamicBatcher

    steps = []

    def run_batch(key, texts):  # 200 decoder steps of 10 ms
        for _ in range(200):
            check_cancelled()
            steps.append(time.monotonic())
            time.sleep(0.01)
        return texts

    async def main():
        batcher = DynamicBatcher(run_batch, timeout_s=30)
        task = asyncio.create_task(batcher.translate("k", ["a"]))
        await asyncio.sleep(0.2)
        await batcher.close()
        closed = time.monotonic()
        await asyncio.sleep(0.5)
        task.cancel()
        return closed

    closed = asyncio.run(main())
    assert len([t for t in steps if t > closed]) <= 2 and len(steps) < 100
