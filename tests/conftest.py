"""Fixtures shared by the test files."""

import pytest

from transformer.cpu import ENV_SWITCH, build, prepare_for_decoding


@pytest.fixture(autouse=True, scope="session")
def _data_cache(tmp_path_factory):
    """The runs trained by the tests keep their tokenized-data cache (data.binarize) in a directory
    of this session, not in the user's ~/.cache; tests that read the cache set their own."""
    patch = pytest.MonkeyPatch()
    patch.setenv("TRANSFORMER_DATA_CACHE", str(tmp_path_factory.mktemp("data-cache")))
    yield
    patch.undo()


@pytest.fixture(params=["kernels", "no-kernels"])
def engine(request, monkeypatch):
    """Runs a decoding test twice: with the CPU engine's kernels, and with ``TRANSFORMER_FUSED_CPU=0``
    (PyTorch's operators only; the switch is read at each call). Gives a function that prepares a
    model for decoding as ``Translator`` does (``prepare_for_decoding``: nothing is swapped with the
    kernels off) and returns it; the swaps are undone after the test. ``engine.on`` says which run
    this is. Where the kernels cannot be built, the "kernels" run is skipped."""
    on = request.param == "kernels"
    if not on:
        monkeypatch.setenv(ENV_SWITCH, "0")
    elif not build.available():
        pytest.skip("the CPU kernels are unavailable (no C compiler, or TRANSFORMER_FUSED_CPU=0)")
    undo = []

    def prepare(model, precision: str = "fp32"):
        undo.append(prepare_for_decoding(model, precision=precision))
        return model

    prepare.on = on
    yield prepare
    for swaps in reversed(undo):
        swaps.undo()


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """The run ``transformer demo`` makes, trained once per test session with the demo's own settings
    (900 steps; a few minutes on 2 cores): the model whose figures, translations and printed outputs
    README.md and docs/ quote. Only the checks marked ``slow`` use it (``pytest -m slow``)."""
    import torch

    from transformer.demo import run_demo
    from transformer.threads import default_threads

    run_dir = tmp_path_factory.mktemp("demo") / "demo"
    before = torch.get_num_threads()
    torch.set_num_threads(min(before, default_threads()))  # as `transformer demo` does
    try:
        summary = run_demo(run_dir, show_progress=False)
    finally:
        torch.set_num_threads(before)
    return run_dir, summary


@pytest.fixture(scope="session")
def short_demo_run(tmp_path_factory):
    """``transformer demo --steps 40 --json`` run once per test session through the command line: a
    run directory of the demo's shape (its corpus, tokenizer, model size, summary and attention page)
    in seconds, for the checks that need the demo's run but not its trained model's outputs. Returns
    ``(run_dir, completed_process)``."""
    import subprocess
    import sys

    run_dir = tmp_path_factory.mktemp("short-demo") / "demo"
    result = subprocess.run([sys.executable, "-m", "transformer.cli", "demo", "--run-dir", str(run_dir), "--steps", "40",
                             "--json"], capture_output=True, text=True, timeout=900)
    return run_dir, result


@pytest.fixture(scope="session")
def pair_runs(tmp_path_factory):
    """Tiny runs of three language pairs, fr->en, en->de and de->en (random weights of their own,
    their languages recorded), for the tests of a server of several models and of its clients."""
    from clients_helpers import make_runs

    return make_runs(tmp_path_factory.mktemp("pair-runs"), [("fr", "en"), ("en", "de"), ("de", "en")])


@pytest.fixture(scope="session")
def pair_translators(pair_runs):
    """A ``Translator`` of each of ``pair_runs``, by pair."""
    from transformer.translate.translator import Translator

    return {pair: Translator.from_run_dir(path) for pair, path in pair_runs.items()}
