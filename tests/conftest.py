"""Fixtures shared by the test files: a tiny run directory (``tiny_run``), a ``transformer`` command
run in-process (``cli``), the headless browser (``browser``), the decoding engines (``engine``) and
the runs trained once a session. Test modules import none of each other; what they share besides
fixtures is in the ``*_helpers.py`` modules."""

import json
from pathlib import Path

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


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """Builds run directories of a random tiny model: ``tiny_run(directory=None, *, pairs=400,
    learned_positions=True, languages=("fr", "en"), seed=0)`` writes one into ``directory`` (a new
    folder of the session when none) and returns it. Its BPE is trained on ``pairs``: that many
    sentence pairs of the built-in corpus (seed 1), or these pairs; the model's weights are drawn with
    ``seed``; learned positions stop its outputs at 64 tokens (else the preset's sinusoids);
    ``languages`` go into run_config.json (none: no run_config.json). Each call builds a fresh run: a
    test may change its files."""
    import torch

    from transformer.config import preset
    from transformer.corpus.builtin import generate_pairs
    from transformer.model import Transformer
    from transformer.run.model import save_model
    from transformer.text import Vocabularies

    def make(directory: Path | None = None, *, pairs: int | list[tuple[str, str]] = 400, learned_positions: bool = True,
             languages: tuple[str, str] | None = ("fr", "en"), seed: int = 0) -> Path:
        directory = Path(directory) if directory is not None else tmp_path_factory.mktemp("tiny-run")
        if isinstance(pairs, int):
            pairs = generate_pairs(pairs, seed=1)
        vocab = Vocabularies.train(pairs, vocab_size=400)
        positions = {"positional": "learned", "max_positions": 64} if learned_positions else {}
        torch.manual_seed(seed)
        save_model(Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size, **positions)), directory)
        vocab.save(directory)
        if languages:
            src, tgt = languages
            (directory / "run_config.json").write_text(json.dumps({"data": {"src_lang": src, "tgt_lang": tgt}}))
        return directory

    return make


@pytest.fixture(scope="session")
def cli():
    """Runs ``transformer ARGS`` in this process: ``cli(*args, input=None)`` gives a
    ``CompletedProcess`` with its exit status, standard output and error (tests/cli_helpers.py)."""
    from cli_helpers import run_cli

    return run_cli


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (Playwright), one per test module; skipped where there is none."""
    import os

    from browser_helpers import ARGS, CHROMIUM, require

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "playwright is not installed (pip install playwright)")
    require(os.path.exists(CHROMIUM), f"{CHROMIUM} not found (apt-get install chromium)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


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
def pair_runs(tmp_path_factory, tiny_run):
    """Tiny runs of three language pairs, fr->en, en->de and de->en (random weights of their own,
    their languages recorded), for the tests of a server of several models and of its clients."""
    from clients_helpers import make_runs

    root = tmp_path_factory.mktemp("pair-runs")
    return make_runs(tiny_run(root / "base"), root, [("fr", "en"), ("en", "de"), ("de", "en")])


@pytest.fixture(scope="session")
def pair_translators(pair_runs):
    """A ``Translator`` of each of ``pair_runs``, by pair."""
    from transformer.translate.translator import Translator

    return {pair: Translator.from_run_dir(path) for pair, path in pair_runs.items()}


@pytest.fixture
def model_calls(monkeypatch):
    """The texts every ``Translator`` gives its model, call by call (a test of what reaches the model)."""
    from transformer.translate.translator import Translator

    calls: list[list[str]] = []
    original = Translator.translate_n_best

    def spy(self, texts, **options):
        texts = list(texts)
        calls.append(texts)
        return original(self, texts, **options)

    monkeypatch.setattr(Translator, "translate_n_best", spy)
    return calls


@pytest.fixture
def word_for_word(monkeypatch):
    """The translation memory's alignment (transformer/translate/tm_terms.py) as a good model gives
    it for sentences translated word for word: each target word translates the source word at its
    place. Gives the ``(source, target)`` pairs it was asked to align."""
    import numpy as np

    from transformer.translate import tm_terms

    asked = []

    def aligned(translator, pairs):
        asked.extend(pairs)
        return [np.eye(len(target.split()), len(source.split())) + 0.01 for source, target in pairs]

    monkeypatch.setattr(tm_terms, "word_matrices", aligned)
    return asked
