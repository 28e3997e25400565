"""import-hf by model name: huggingface_hub fetches into the Hub cache; everything runs offline.

A tiny Marian model made in the test is published two ways, both on 127.0.0.1:

* a Hub cache laid out as huggingface_hub writes it (``models--org--name/blobs``,
  ``snapshots/<commit>/...``, ``refs/main``), read with ``HF_HUB_OFFLINE=1``;
* a small HTTP server speaking the Hub's API (repository info, file tree, ``resolve``), set as
  ``HF_ENDPOINT``; it records what is requested, so the test sees that only the files the
  importer needs are downloaded, and then, with the server gone, that the cache serves again.

huggingface_hub reads ``HF_HUB_CACHE``, ``HF_HOME``, ``HF_HUB_OFFLINE`` and ``HF_ENDPOINT``
when it is first imported, so these tests run the CLI in a fresh Python process with the
variables set, as a user's shell would (several commands per process, to pay the start once).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")
pytest.importorskip("huggingface_hub")

from interop_helpers import built_marian  # noqa: E402

from transformer.cli import main  # noqa: E402
from transformer.interop import InteropError, import_hf  # noqa: E402
from transformer.run.model import load_config, load_model  # noqa: E402

REPO = "test-org/tiny-marian"
BIN_REPO = "test-org/bin-only"
COMMIT_A, COMMIT_B, COMMIT_C = (hashlib.sha1(name.encode()).hexdigest() for name in "ABC")
# Files an opus-mt repository holds that the importer never reads: they must never be fetched.
UNUSED = {"tf_model.h5": b"\x89HDF" * 64, "rust_model.ot": b"\x00" * 256, "README.md": b"# tiny\n"}
NEEDED = {"config.json", "tokenizer_config.json", "source.spm", "target.spm", "vocab.json", "model.safetensors"}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two commits of one tiny Marian model (B: another output bias) and, for each, our import of it
    from a local directory: the reference a fetch by name must reproduce bit for bit."""
    from safetensors.torch import load_file, save_file

    root = tmp_path_factory.mktemp("hub-models")
    dir_a = built_marian(tmp_path_factory.mktemp("marian"))[0]
    dir_b = root / "commit-b"
    shutil.copytree(dir_a, dir_b)
    state = load_file(str(dir_a / "model.safetensors"))
    state["final_logits_bias"] = state["final_logits_bias"] + 0.5
    save_file(state, str(dir_b / "model.safetensors"), metadata={"format": "pt"})
    files_a, files_b = ({p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} for d in (dir_a, dir_b))
    bin_files = {k: v for k, v in files_a.items() if k != "model.safetensors"}
    torch.save(load_file(str(dir_a / "model.safetensors")), root / "pytorch_model.bin")
    bin_files["pytorch_model.bin"] = (root / "pytorch_model.bin").read_bytes()
    return {"files": {COMMIT_A: files_a, COMMIT_B: files_b, COMMIT_C: bin_files},
            "run": {COMMIT_A: import_hf(dir_a, root / "run-a"), COMMIT_B: import_hf(dir_b, root / "run-b")}}


def write_hub_cache(cache: Path, repo_id: str, commits: dict[str, dict[str, bytes]], refs: dict[str, str]) -> None:
    """The layout huggingface_hub's cache has: content-addressed blobs, one folder of links per commit,
    and refs naming commits (written without a newline, as the library writes them)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    for commit, files in commits.items():
        for name, data in files.items():
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
            link = repo / "snapshots" / commit / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    for ref, commit in refs.items():
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)


_CLI_LOOP = """
import contextlib, io, json, sys
from transformer.cli import main
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    print(json.dumps({"rc": rc, "out": out.getvalue(), "err": err.getvalue()}))
"""


def run_cli(env: dict[str, str], *commands: list[str]) -> list[dict]:
    """Run ``transformer`` commands in one new Python process with ``env`` added to a clean Hub
    environment (no token, no proxy, no progress bars); each gives ``{"rc", "out", "err"}``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and "proxy" not in k.lower()}
    base.update(NO_PROXY="127.0.0.1,localhost", HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1")
    done = subprocess.run([sys.executable, "-c", _CLI_LOOP, json.dumps(commands)], env={**base, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"rc"')]


def assert_same_run(run, reference, *, repo_id: str, commit: str) -> None:
    """The run fetched by name is our import of that commit's directory, bit for bit, plus the provenance note."""
    cfg, ref = load_config(run), load_config(reference)
    assert cfg.extra.pop("hf_hub") == {"repo_id": repo_id, "commit": commit}
    assert cfg == ref
    for (name, got), want in zip(load_model(run).state_dict().items(), load_model(reference).state_dict().values()):
        assert torch.equal(got, want), name
    for name in ("tokenizer.src.json", "tokenizer.tgt.json"):
        assert (Path(run) / name).read_bytes() == (Path(reference) / name).read_bytes()


def assert_refused(result: dict, *messages: str) -> None:
    assert result["rc"] == 2, result
    lines = result["err"].strip().splitlines()
    assert len(lines) == 1 and all(m in lines[0] for m in messages), lines


# ---------------------------------------------------------------------------------------------
# The Hub cache, offline.


def test_offline_by_name_and_by_revision_from_the_cache(models, tmp_path):
    """HF_HOME locates the cache (HF_HOME/hub); HF_HUB_OFFLINE=1: main, a tag, a commit hash, and the
    one-line refusals for a model or a revision the cache does not hold."""
    write_hub_cache(tmp_path / "home" / "hub", REPO, {c: models["files"][c] for c in (COMMIT_A, COMMIT_B)},
                    {"main": COMMIT_B, "v1": COMMIT_A})
    out = tmp_path / "runs"
    results = run_cli(
        {"HF_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"},
        ["import-hf", REPO, str(out / "main")],
        ["import-hf", REPO, str(out / "tag"), "--revision", "v1"],
        ["import-hf", REPO, str(out / "commit"), "--revision", COMMIT_A],
        ["import-hf", "test-org/not-cached", str(out / "missing")],
        ["import-hf", REPO, str(out / "no-such-tag"), "--revision", "v2"],
    )
    assert [r["rc"] for r in results] == [0, 0, 0, 2, 2], results
    assert f"imported {REPO} (commit {COMMIT_B}) into" in results[0]["out"]
    assert_same_run(out / "main", models["run"][COMMIT_B], repo_id=REPO, commit=COMMIT_B)
    assert_same_run(out / "tag", models["run"][COMMIT_A], repo_id=REPO, commit=COMMIT_A)
    assert_same_run(out / "commit", models["run"][COMMIT_A], repo_id=REPO, commit=COMMIT_A)
    cache = str(tmp_path / "home" / "hub")
    assert_refused(results[3], "cannot fetch test-org/not-cached:", "HF_HUB_OFFLINE=1 is set", cache,
                   "transformer import-hf path/to/model-dir")
    assert_refused(results[4], f"cannot fetch {REPO} at revision 'v2'", "HF_HUB_OFFLINE=1")
    assert sorted(p.name for p in out.iterdir()) == ["commit", "main", "tag"]  # nothing for the refusals


# ---------------------------------------------------------------------------------------------
# A Hub endpoint on 127.0.0.1.


class FakeHub(ThreadingHTTPServer):
    """The three Hub routes snapshot_download uses, for repositories held in memory.

    ``repos``: repo id -> ``(commits: {sha: {file: bytes}}, refs: {name: sha})``. Every request
    is recorded in ``requests`` as ``(method, path)``.
    """

    def __init__(self, repos):
        self.repos, self.requests = repos, []
        super().__init__(("127.0.0.1", 0), _HubHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def downloads(self, repo_id: str) -> set[str]:
        prefix = f"/{repo_id}/resolve/"
        return {p[len(prefix):].split("/", 1)[1] for m, p in self.requests if m == "GET" and p.startswith(prefix)}


class _HubHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        hub: FakeHub = self.server
        path = unquote(urlsplit(self.path).path)
        hub.requests.append((self.command, path))
        parts = path.strip("/").split("/")
        api = parts[:2] == ["api", "models"]
        repo_id = "/".join(parts[2:4] if api else parts[0:2])
        if repo_id not in hub.repos:
            return self._error(404, "RepoNotFound")
        commits, refs = hub.repos[repo_id]
        rest = parts[4:] if api else parts[2:]
        if len(rest) < 2 or rest[0] not in ("revision", "tree", "resolve"):
            return self._error(404, "")
        revision = rest[1]
        commit = refs.get(revision, revision if revision in commits else None)
        if commit is None:
            return self._error(404, "RevisionNotFound")
        files = commits[commit]
        if rest[0] == "revision":  # repository info: the commit a revision names, and its files
            return self._send(json.dumps({"id": repo_id, "sha": commit,
                                          "siblings": [{"rfilename": n} for n in files]}).encode(), commit, body)
        if rest[0] == "tree":
            tree = [{"type": "file", "path": n, "size": len(d), "oid": hashlib.sha1(d).hexdigest()}
                    for n, d in files.items()]
            return self._send(json.dumps(tree).encode(), commit, body)
        name = "/".join(rest[2:])
        if name not in files:
            return self._error(404, "EntryNotFound", commit)
        return self._send(files[name], commit, body, etag=hashlib.sha1(files[name]).hexdigest())

    def _send(self, data: bytes, commit: str, body: bool, etag: str | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Repo-Commit", commit)
        if etag:
            self.send_header("ETag", f'"{etag}"')
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _error(self, status: int, code: str, commit: str | None = None) -> None:
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def fake_hub(models):
    files = models["files"]
    pickle_too = {"pytorch_model.bin": files[COMMIT_C]["pytorch_model.bin"]}  # beside the safetensors: not fetched
    hub = FakeHub({
        REPO: ({COMMIT_A: {**files[COMMIT_A], **UNUSED}, COMMIT_B: {**files[COMMIT_B], **UNUSED, **pickle_too}},
               {"main": COMMIT_B, "v1": COMMIT_A}),
        BIN_REPO: ({COMMIT_C: {**files[COMMIT_C], **UNUSED}}, {"main": COMMIT_C}),
    })
    thread = threading.Thread(target=hub.serve_forever, daemon=True)
    thread.start()
    yield hub
    hub.shutdown()
    hub.server_close()


def test_fetch_from_a_hub_endpoint_then_again_without_it(models, fake_hub, tmp_path):
    """HF_ENDPOINT and HF_HUB_CACHE: fetched by name and revision, only the needed files; unknown
    names and revisions refused in one line; then, with the endpoint gone, served from the cache."""
    cache, out = tmp_path / "cache", tmp_path / "runs"
    env = {"HF_ENDPOINT": fake_hub.url, "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "home")}
    results = run_cli(
        env,
        ["import-hf", REPO, str(out / "main")],
        ["import-hf", REPO, str(out / "tag"), "--revision", "v1"],
        ["import-hf", BIN_REPO, str(out / "bin")],
        ["import-hf", "test-org/no-such-model", str(out / "unknown")],
        ["import-hf", REPO, str(out / "no-such-tag"), "--revision", "v9"],
    )
    assert [r["rc"] for r in results] == [0, 0, 0, 2, 2], results
    assert_same_run(out / "main", models["run"][COMMIT_B], repo_id=REPO, commit=COMMIT_B)
    assert_same_run(out / "tag", models["run"][COMMIT_A], repo_id=REPO, commit=COMMIT_A)
    assert_same_run(out / "bin", models["run"][COMMIT_A], repo_id=BIN_REPO, commit=COMMIT_C)
    # Safetensors where the repository has them (the .bin beside them is never fetched), the .bin
    # otherwise; never the TensorFlow or Rust weights, nor the README.
    assert fake_hub.downloads(REPO) <= NEEDED and "model.safetensors" in fake_hub.downloads(REPO)
    assert fake_hub.downloads(BIN_REPO) <= NEEDED - {"model.safetensors"} | {"pytorch_model.bin"}
    assert "pytorch_model.bin" in fake_hub.downloads(BIN_REPO)
    assert (cache / "models--test-org--tiny-marian" / "snapshots" / COMMIT_B / "config.json").is_file()
    assert_refused(results[3], "test-org/no-such-model is neither a directory nor a model on the Hugging Face Hub")
    assert_refused(results[4], f"the model {REPO} has no revision 'v9'")

    fake_hub.shutdown()
    fake_hub.server_close()  # no endpoint any more: connections are refused
    again = run_cli(env, ["import-hf", REPO, str(out / "again")], ["import-hf", BIN_REPO, str(out / "bin-again")],
                    ["import-hf", "test-org/never-fetched", str(out / "never")])
    assert [r["rc"] for r in again] == [0, 0, 2], again
    assert_same_run(out / "again", models["run"][COMMIT_B], repo_id=REPO, commit=COMMIT_B)
    assert_same_run(out / "bin-again", models["run"][COMMIT_A], repo_id=BIN_REPO, commit=COMMIT_C)
    assert_refused(again[2], "cannot fetch test-org/never-fetched:", f"the Hugging Face Hub ({fake_hub.url}) cannot be "
                   "reached", str(cache), "pass a local model directory")
    assert not (out / "never").exists()


# ---------------------------------------------------------------------------------------------
# Arguments that are not a model: refused before anything is fetched.


@pytest.mark.parametrize("argument, message", [
    ("no/such/dir", "no/such/dir is neither a directory nor a Hugging Face model name (org/name"),
    ("./missing-dir", "./missing-dir is neither a directory nor a Hugging Face model name"),
    ("org/bad--name", "org/bad--name is neither a directory nor a Hugging Face model name"),
    ("FILE", "is a file, not a model directory"),
])
def test_an_argument_that_is_neither_a_directory_nor_a_name(tmp_path, capsys, monkeypatch, argument, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("not a model")
    with pytest.raises(InteropError, match=None) as err:
        import_hf(argument, tmp_path / "out")
    assert message in str(err.value)
    assert main(["import-hf", argument, str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]


def test_revision_is_for_names_and_an_existing_output_is_refused_first(tmp_path):
    directory = built_marian(tmp_path)[0]
    with pytest.raises(InteropError, match="--revision applies to a model name on the Hugging Face Hub"):
        import_hf(directory, tmp_path / "out", revision="main")
    (tmp_path / "taken").mkdir()
    # Refused before any fetch: this name exists nowhere, and no Hub is reachable from the tests.
    with pytest.raises(InteropError, match="output .*taken already exists"):
        import_hf("test-org/never-fetched", tmp_path / "taken")
    assert not (tmp_path / "out").exists()
