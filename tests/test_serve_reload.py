"""Reloading a served model without a restart (transformer.serve.reload): POST /admin/reload and
SIGHUP swap in a newer run while a client keeps translating, without a failed request; answers
name the model's version; a damaged run or one of another pair leaves the old model serving."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from serve_helpers import assert_error, free_port, live_server, wait_until_up

from transformer.run.layout import WEIGHTS_FILE
from transformer.serve.app import create_app
from transformer.serve.model_set import ModelSet
from transformer.serve.reload import ReloadOptions, model_version, read_admin_key
from transformer.serve.service import TranslationService
from transformer.translate.translator import Translator

KEY = "reload-key-0123456789abcdef"


class Client(threading.Thread):
    """Sends /v1/translate requests one after another until stopped; keeps every status and version."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.answers, self.failures = url, [], []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=60) as http:
            while not self.stop.is_set():
                try:
                    r = http.post(self.url + "/v1/translate", json={"text": "le chat dort."})
                except httpx.HTTPError as err:  # a dropped connection is a failed request too
                    self.failures.append(repr(err))
                    continue
                if r.status_code != 200:
                    self.failures.append(f"{r.status_code} {r.text[:200]}")
                else:
                    self.answers.append(r.json()["model_version"])

    def wait_for(self, count: int, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while len(self.answers) < count:
            assert time.monotonic() < deadline and self.is_alive(), f"{len(self.answers)} answers: {self.failures}"
            time.sleep(0.02)

    def finish(self) -> None:
        self.stop.set()
        self.join(timeout=60)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_run):
    """Two runs of fr -> en with other weights (the same tokenizer), and one of en -> de."""
    root = tmp_path_factory.mktemp("reload")
    first = tiny_run(root / "first", pairs=200)
    second = root / "second"
    shutil.copytree(first, second)
    tiny_run(root / "weights", pairs=200, seed=1)
    shutil.copy(root / "weights" / WEIGHTS_FILE, second / WEIGHTS_FILE)
    other_pair = tiny_run(root / "en-de", pairs=200, languages=("en", "de"))
    return first, second, other_pair


def _app(run_dir: Path, admin_key: str | None = KEY):
    load = Translator.from_run_dir
    return create_app(load(run_dir), src_lang="fr", tgt_lang="en",
                      reload=ReloadOptions([run_dir], load, admin_key))


def _reload(url: str, key: str | None = KEY, **body) -> httpx.Response:
    headers = {"X-Admin-Key": key} if key is not None else {}
    return httpx.post(url + "/admin/reload", json=body or None, headers=headers, timeout=120)


def test_the_admin_route_swaps_a_run_in_without_a_failed_request(runs):
    first, second, _ = runs
    before, after = model_version(first).label, model_version(second).label
    assert before != after and before.startswith(model_version(first).checkpoint)
    app = _app(first)
    with live_server(app) as url:
        assert httpx.get(url + "/v1/model").json()["version"]["label"] == before
        assert httpx.get(url + "/health").json()["versions"] == {"fr-en": before}
        old = app.state.models.primary
        client = Client(url)
        client.start()
        try:
            client.wait_for(5)
            r = _reload(url, run=str(second))
            assert r.status_code == 200, r.text
            assert r.json()["reloaded"][0] | {"seconds": 0} == {"pair": "fr-en", "run": str(second), "version": after,
                                                                "previous_version": before, "seconds": 0}
            seen = len(client.answers)
            client.wait_for(seen + 5)
        finally:
            client.finish()
        assert client.failures == []
        assert client.answers[0] == before and client.answers[-1] == after
        # the versions switch once: no answer of the old model after one of the new
        assert client.answers == sorted(client.answers, key=lambda v: v == after)
        assert httpx.get(url + "/v1/model").json()["version"]["label"] == after
        assert httpx.get(url + "/health").json()["versions"] == {"fr-en": after}
        deadline = time.monotonic() + 10
        while old.batcher._worker is not None:  # the old model's batcher is closed once drained
            assert time.monotonic() < deadline, "the old batcher was not closed"
            time.sleep(0.05)
        assert app.state.models.primary is not old and not old.busy()


def test_a_damaged_run_or_another_pair_leaves_the_old_model_serving(runs, tmp_path):
    first, second, other_pair = runs
    damaged = tmp_path / "damaged"
    shutil.copytree(second, damaged)
    weights = damaged / WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:1000])
    before = model_version(first).label
    with live_server(_app(first)) as url:
        message = assert_error(_reload(url, run=str(damaged)), 422, "reload_failed", str(damaged), "kept")
        assert "\n" not in message
        assert_error(_reload(url, run=str(other_pair)), 422, "reload_failed", "en-de")
        assert_error(_reload(url, run=str(tmp_path / "nowhere")), 422, "reload_failed", "not found")
        assert_error(_reload(url, pair="de-en"), 422, "reload_failed", "serves no de-en")
        r = httpx.post(url + "/v1/translate", json={"text": "le chat dort."})
        assert r.status_code == 200 and r.json()["model_version"] == before
        # the same run again (no body: every pair from its run directory) is a reload too
        r = _reload(url)
        assert r.status_code == 200 and r.json()["reloaded"][0]["version"] == before


def test_the_admin_route_needs_its_key(runs):
    first = runs[0]
    with live_server(_app(first)) as url:
        assert_error(_reload(url, key=None), 403, "invalid_admin_key")
        assert_error(_reload(url, key=KEY + "x"), 403, "invalid_admin_key")
        assert_error(_reload(url, key="reload-key"), 403, "invalid_admin_key")
        assert_error(httpx.post(url + "/admin/reload", content=b'{"run": 3}', headers={"X-Admin-Key": KEY}), 422,
                     "invalid_request", "run")
        assert_error(httpx.get(url + "/admin/reload"), 405, "method_not_allowed")
        assert "/admin/reload" not in httpx.get(url + "/openapi.json").text
    with live_server(_app(first, admin_key=None)) as url:
        assert_error(_reload(url), 403, "admin_disabled", "--admin-key")


def test_the_admin_key_is_read_and_checked(tmp_path):
    assert read_admin_key(None, None) is None
    assert read_admin_key(KEY, None) == KEY
    (tmp_path / "key").write_text(f"\n  {KEY}  \n")
    assert read_admin_key(None, str(tmp_path / "key")) == KEY
    (tmp_path / "two").write_text(f"{KEY}\n{KEY}\n")
    for key, path, words in [(KEY, str(tmp_path / "key"), "not both"), ("short", None, "at least 16"),
                             (None, str(tmp_path / "two"), "one line"), (None, str(tmp_path / "none"), "cannot read")]:
        with pytest.raises(Exception, match=words) as err:
            read_admin_key(key, path)
        assert "\n" not in str(err.value)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_sighup_reloads_the_run_directory_of_a_running_server(runs, tmp_path):
    first, second, _ = runs
    served = tmp_path / "served"
    shutil.copytree(first, served)
    before, after = model_version(first).label, model_version(second).label
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "transformer.cli", "serve", str(served), "--port", str(port),
                             "--device", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(proc, url)
        client = Client(url)
        client.start()
        try:
            client.wait_for(3)
            tmp = served / (WEIGHTS_FILE + ".new")  # replaced as training writes it: a rename
            shutil.copy(second / WEIGHTS_FILE, tmp)
            os.replace(tmp, served / WEIGHTS_FILE)
            proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 60
            while not client.answers or client.answers[-1] != after:
                assert time.monotonic() < deadline and proc.poll() is None, client.failures
                time.sleep(0.05)
            client.wait_for(len(client.answers) + 3)
        finally:
            client.finish()
        assert client.failures == []
        assert client.answers[0] == before and client.answers[-1] == after
        assert_error(httpx.post(url + "/admin/reload", json={}), 403, "admin_disabled")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"reloaded fr-en from {served}: {after} (was {before})" in err


def test_a_route_through_the_pivot_holds_its_second_model_while_the_first_works(pair_translators):
    services = [TranslationService(t, src_lang=s, tgt_lang=g) for (s, g), t in pair_translators.items()]
    models = ModelSet(services)
    route = models.route("fr", "de")
    first, second = route.steps
    assert route.via == "en"

    async def run() -> bool:
        started, go = asyncio.Event(), asyncio.Event()
        real = first.translate_texts

        async def slow(*args, **kwargs):  # the first step, held until the check below
            started.set()
            await go.wait()
            return await real(*args, **kwargs)

        first.translate_texts = slow
        task = asyncio.create_task(route.translate(["le chat dort."]))
        await started.wait()
        held = second.busy()  # a reload now must not close the model of the second step
        go.set()
        await task
        await models.close()
        return held

    assert asyncio.run(run()) and not second.busy()
