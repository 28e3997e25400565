"""``transformer demo``: watch a Transformer learn French -> English on a laptop in minutes.

Builds the built-in corpus, trains a small model with the paper's recipe (scaled for a CPU and
a few minutes), reports held-out sacreBLEU and exact match on test sentences never seen in
training, translates a few sentences, the slides' "je suis étudiant" among them, and writes the
interactive attention page for them.
Everything lands in a run directory that ``translate`` / ``attend`` can use afterwards.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from transformer.translate.evaluation import score
from transformer.run.config import DataConfig, RunConfig, TrainConfig
from transformer.training.trainer import Trainer
from transformer.translate.translator import Translator
from transformer.visualize.cli import write_demo_pages

DEMO_SENTENCES = [
    "je suis étudiant",
    "l'animal n'a pas traversé la rue parce qu'il était trop fatigué",
    "est-ce que tu as vu le petit chat noir ?",
    "nous allons manger du fromage délicieux",
    "elle n'est jamais allée à la gare",
]
SUMMARY_FILE = "demo_summary.json"


DEMO_STEPS = 900  # about 60 s on a 2-core CPU with bf16 matrix units, 170 s in fp32 on one without


def demo_config(*, max_steps: int = DEMO_STEPS, time_limit: float | None = 240.0, seed: int = 0) -> RunConfig:
    """The demo recipe: a narrow (d_model 128) post-LN Transformer, shared BPE vocabulary, bf16 where
    the CPU has bf16 matrix units (fp32 elsewhere: ``train.precision=auto``).

    The paper's schedule with warmup 200 and lr scale 0.3 (peak learning rate about 1.9e-3) and
    batches of about 2,500 tokens: many small steps suit a few minutes on a CPU.
    """
    return RunConfig(
        data=DataConfig(corpus="builtin", builtin_train=40000, builtin_valid=300, builtin_test=500,
                        vocab_size=2000, max_tokens=2500, seed=seed),
        model={"preset": "small", "d_model": 128, "n_heads": 4, "d_ff": 512, "n_encoder_layers": 3,
               "n_decoder_layers": 3, "dropout": 0.1, "attention_dropout": 0.0},
        train=TrainConfig(epochs=30, max_steps=max_steps, time_limit=time_limit, lr_scale=0.3, warmup=200, precision="auto",
                          seed=seed, log_every=25, eval_every=300, eval_sentences=150, keep_last=2),
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


def run_demo(run_dir: str | Path, *, max_steps: int = DEMO_STEPS, time_limit: float | None = 240.0, seed: int = 0,
             stream: TextIO | None = None, show_progress: bool = True) -> dict[str, Any]:
    """Train ``max_steps`` steps (stopping early at ``time_limit`` seconds), evaluate and translate.

    Returns the summary (also written to ``demo_summary.json``).
    """
    start = time.perf_counter()
    cfg = demo_config(max_steps=max_steps, time_limit=time_limit, seed=seed)
    trainer = Trainer(cfg, run_dir, show_progress=show_progress, stream=stream, tensorboard_hint=False)
    result = trainer.train()
    translator = Translator.from_run_dir(run_dir, bf16=trainer.precision == "bf16")
    test = trainer.data.test_text
    hypotheses = translator.translate([s for s, _ in test])
    scores = score(hypotheses, [t for _, t in test])
    examples = dict(zip(DEMO_SENTENCES, translator.translate(DEMO_SENTENCES)))
    page = write_demo_pages(translator, DEMO_SENTENCES, Path(run_dir) / "attention")
    summary = {
        "run_dir": str(run_dir),
        "bleu": round(scores.bleu, 2),
        "chrf": round(scores.chrf, 2),
        "exact_match": round(scores.exact_match, 4),
        "test_sentences": scores.n,
        "bleu_signature": scores.bleu_signature,
        "train_steps": result.steps,
        "train_seconds": round(result.seconds, 1),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "translations": examples,
        "attention_page": str(page),
    }
    (Path(run_dir) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary
