"""``transformer demo``: watch a Transformer learn French -> English on a laptop in minutes.

Builds the built-in corpus, trains a small model with the paper's recipe (scaled for a CPU and
a few minutes), reports held-out sacreBLEU and exact match on test sentences never seen in
training, translates a few sentences, the slides' "je suis étudiant" among them, and writes the
interactive attention page for them.
Everything lands in a run directory that ``translate`` / ``attend`` can use afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from pathlib import Path
from typing import Any, TextIO

import torch

from transformer.errors import UserError
from transformer.run.layout import RUN_CONFIG_FILE
from transformer.translate.evaluation import score
from transformer.run.config import DataConfig, RunConfig, TrainConfig
from transformer.training.trainer import Trainer
from transformer.translate.translator import Translator
from transformer.visualize.cli import write_demo_pages

DEMO_SENTENCES = [
    "je suis étudiant",
    "l'animal n'a pas traversé la rue parce qu'il était trop fatigué",
    "Est-ce que tu as vu le petit chat noir ?",
    "Marie n'est jamais allée à la gare.",
    "nous allons manger du fromage délicieux",
]
SUMMARY_FILE = "demo_summary.json"


DEMO_STEPS = 900  # about 60 s on a 2-core CPU with bf16 matrix units, 170 s in fp32 on one without


def demo_config(*, max_steps: int = DEMO_STEPS, time_limit: float | None = None, seed: int = 0) -> RunConfig:
    """The demo recipe: a narrow (d_model 128) post-LN Transformer, shared BPE vocabulary, bf16 where
    the CPU has bf16 matrix units (fp32 elsewhere: ``train.precision=auto``).

    The paper's schedule with warmup 200 and lr scale 0.3 (peak learning rate about 1.9e-3) and
    batches of about 2,500 tokens: many small steps suit a few minutes on a CPU. A checkpoint every
    100 steps, so an interrupted demo continues (``--resume``) from close to where it stopped. It trains for
    ``max_steps`` steps, whatever the machine's speed; ``time_limit`` (seconds) may stop it earlier.
    """
    return RunConfig(
        data=DataConfig(corpus="builtin", builtin_train=40000, builtin_valid=300, builtin_test=500,
                        vocab_size=2000, max_tokens=2500, seed=seed),
        model={"preset": "small", "d_model": 128, "n_heads": 4, "d_ff": 512, "n_encoder_layers": 3,
               "n_decoder_layers": 3, "dropout": 0.1, "attention_dropout": 0.0},
        train=TrainConfig(epochs=30, max_steps=max_steps, time_limit=time_limit, lr_scale=0.3, warmup=200, precision="auto",
                          seed=seed, log_every=25, eval_every=300, save_every=100, eval_sentences=150, keep_last=2),
    )


def free_run_dir(base: str | Path) -> Path:
    """``base`` if it does not exist yet, else ``base-2``, ``base-3``, ... (never overwrite a run)."""
    base = Path(base)
    if not base.exists():
        return base
    n = 2
    while Path(f"{base}-{n}").exists():
        n += 1
    return Path(f"{base}-{n}")


class DemoError(UserError):
    """A demo run directory that cannot be continued."""


def resumable_config(run_dir: str | Path, *, time_limit: float | None = None) -> RunConfig:
    """The settings of the demo run in ``run_dir``, to continue it (``transformer demo --resume``).

    Its steps and seed stay; ``time_limit`` replaces the one it had (a time limit counts the
    seconds of every part of a run). Raises :class:`DemoError` where ``run_dir`` holds no demo run.
    """
    path = Path(run_dir) / RUN_CONFIG_FILE
    if not path.is_file():
        raise DemoError(f"{run_dir} holds no demo run to continue (no {RUN_CONFIG_FILE}); run `transformer demo` "
                        "without --resume to start one")
    saved = RunConfig.read(path)
    expected = demo_config(max_steps=saved.train.max_steps or DEMO_STEPS, seed=saved.train.seed)
    if saved.recipe_settings() != expected.recipe_settings():
        raise DemoError(f"{run_dir} holds a run of other settings than the demo's; continue it with "
                        f"`transformer train --run-dir {run_dir}` and its settings instead")
    return dataclasses.replace(expected, train=dataclasses.replace(expected.train, time_limit=time_limit))


def continue_command(run_dir: str | Path) -> str:
    """The command that continues the demo run in ``run_dir`` where it stopped."""
    return f"transformer demo --resume --run-dir {shlex.quote(str(run_dir))}"


def run_demo(run_dir: str | Path, *, max_steps: int = DEMO_STEPS, time_limit: float | None = None, seed: int = 0,
             resume: bool = False, stream: TextIO | None = None, show_progress: bool = True) -> dict[str, Any]:
    """Train ``max_steps`` steps (or continue the demo run in ``run_dir`` with ``resume``), then
    evaluate and translate.

    ``time_limit`` (seconds of training in all) may stop the training before its steps are done:
    the summary then says so (``complete`` false, ``steps_planned``, ``stopped_by`` and
    ``continue_with``, the command that trains the rest). Returns the summary (also written to
    ``demo_summary.json``).
    """
    start = time.perf_counter()
    if resume:
        cfg = resumable_config(run_dir, time_limit=time_limit)
    else:
        cfg = demo_config(max_steps=max_steps, time_limit=time_limit, seed=seed)
    trainer = Trainer(cfg, run_dir, show_progress=show_progress, stream=stream, tensorboard_hint=False)
    result = trainer.train()
    translator = Translator.from_run_dir(run_dir, precision="bf16" if trainer.precision == "bf16" else "fp32")
    test = trainer.data.test_text
    hypotheses = translator.translate([s for s, _ in test])
    scores = score(hypotheses, [t for _, t in test])
    examples = dict(zip(DEMO_SENTENCES, translator.translate(DEMO_SENTENCES)))
    page = write_demo_pages(translator, DEMO_SENTENCES, Path(run_dir) / "attention")
    planned = cfg.train.max_steps
    complete = result.steps >= planned
    summary = {
        "run_dir": str(run_dir),
        "bleu": round(scores.bleu, 2),
        "chrf": round(scores.chrf, 2),
        "exact_match": round(scores.exact_match, 4),
        "test_sentences": scores.n,
        "bleu_signature": scores.bleu_signature,
        "train_steps": result.steps,
        "steps_planned": planned,
        "complete": complete,
        "stopped_by": None if complete else (
            f"the time limit ({cfg.train.time_limit:g} s)" if cfg.train.time_limit is not None else "its epochs"),
        "continue_with": None if complete else continue_command(run_dir),
        "train_seconds": round(result.seconds, 1),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "threads": torch.get_num_threads(),
        "translations": examples,
        "attention_page": str(page),
    }
    (Path(run_dir) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary
