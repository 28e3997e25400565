"""Tiny runs of several language pairs and a real ``transformer serve`` process over them, shared
by the tests of LibreTranslate's clients (``tests/test_clients_*.py``) and of a server of several
models (``tests/test_serve_models.py``, ``test_serve_browser_models.py``; their limits: ``LIMITS``).

Each run has random weights of its own (so each pair translates differently) and records its
languages; what a client gets from the server is compared with :func:`expected`, the Python API's
translation along the same route (through the pivot: the two models one after the other).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from serve_helpers import free_port, wait_until_up

from transformer.model import Transformer
from transformer.run.model import save_model
from transformer.serve.limits import ServeLimits
from transformer.translate.document import translate_document
from transformer.translate.translator import Translator

PIVOT = "en"
FRENCH = "Le chat noir dort sur la table de la cuisine."
GERMAN = "Die schwarze Katze schläft auf dem Küchentisch."
ENGLISH = "The black cat is sleeping on the kitchen table."
SAMPLES = {"fr": FRENCH, "de": GERMAN, "en": ENGLISH}
LIMITS = ServeLimits(max_chars=300, max_texts=4, max_input_tokens=64, max_output_tokens=20, max_body_bytes=8192)


def make_runs(base: Path, root: Path, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], Path]:
    """A run directory per language pair under ``root``: copies of the tiny run ``base`` (the
    ``tiny_run`` fixture's), each with its own random weights (seeded by its position) and its
    languages in run_config.json."""
    reference = Translator.from_run_dir(base).model
    runs = {}
    for seed, (src, tgt) in enumerate(pairs, start=1):
        directory = root / f"{src}-{tgt}"
        shutil.copytree(base, directory)
        torch.manual_seed(seed)
        save_model(Transformer(reference.config), directory)
        (directory / "run_config.json").write_text(json.dumps({"data": {"src_lang": src, "tgt_lang": tgt}}))
        runs[src, tgt] = directory
    return runs


def expected(translators: dict[tuple[str, str], Translator], source: str, target: str, text: str) -> str:
    """What the server must answer for ``text`` from ``source`` into ``target``: the pair's own
    model, or through the pivot the two models in turn (each as the server decodes: its defaults)."""
    if source == target:
        return text  # a text detected as already in the target language comes back as it is
    if (source, target) in translators:
        return translate_document(translators[source, target], text).text
    middle = translate_document(translators[source, PIVOT], text).text
    return translate_document(translators[PIVOT, target], middle).text


@contextmanager
def serve(run_dirs: list[Path], *options: str) -> Iterator[str]:
    """``transformer serve RUN_DIR...`` as a process on a free port of 127.0.0.1; yields its URL
    (no trailing slash) and stops it with SIGTERM afterwards."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer.cli", "serve", *map(str, run_dirs), "--port", str(port), "--log-level",
         "warning", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        wait_until_up(proc, url)
        yield url
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
