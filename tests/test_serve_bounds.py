"""The server's bounds on work nobody waits for and on what clients may pile up: a model call
whose requests all gave up is stopped at its next decoder step, a request's glossary work is
bounded, uploads in flight share a budget, the download store and the suggestions file have caps.

In-process (TestClient) against the small random model of test_serve.py.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from test_serve import assert_error, make_run_dir

from transformer.decoding import beam
from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.translate.translator import Translator

TERMS = [{"source": "chat", "target": "cat"}, {"source": "étudiant", "target": "student"}]


@pytest.fixture(scope="module")
def translator(tmp_path_factory) -> Translator:
    return Translator.from_run_dir(make_run_dir(tmp_path_factory.mktemp("serve-bounds-run")))


# --------------------------------------------------------------------------------------------- cancellation
def test_a_glossary_search_nobody_waits_for_stops_and_frees_the_model(translator, monkeypatch):
    steps = []
    logits = beam._Rows.logits

    def slow(self):  # 50 ms a decoder step: the long search takes 60 steps, 3 s
        steps.append(time.monotonic())
        time.sleep(0.05)
        return logits(self)

    monkeypatch.setattr(beam._Rows, "logits", slow)
    app = create_app(translator, ServeLimits(timeout_s=0.5, max_output_tokens=60), src_lang="fr", tgt_lang="en")
    with TestClient(app) as client:
        long = {"text": "le chat noir est étudiant", "beam_size": 4, "max_length": 60, "glossary": TERMS}
        assert_error(client.post("/v1/translate", json=long), 503, "timeout")
        gave_up = time.monotonic()
        short = client.post("/v1/translate", json={"text": "le chat", "beam_size": 2, "max_length": 3})
        assert short.status_code == 200, short.text  # the model was free for it within its 0.5 s
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
