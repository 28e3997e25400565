"""A run's records: ``metrics.jsonl``, one JSON line per log record and evaluation, and its plot.

The trainer appends a ``train`` record every ``train.log_every`` steps (loss, lr, tokens_per_s,
grad_norm) and a ``valid`` record at each evaluation (loss, nll, ppl, bleu, chrf, exact_match);
``transformer report`` and the training curve read them back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from transformer.run_files import RunFileError, parse_json, read_text, replacing, write_atomic


class MetricsLog:
    """Append-only JSON-lines log of training and validation records."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()

    def read(self) -> list[dict[str, Any]]:
        """The records (JSON objects) of the log, in order; a line cut short by a crash, or one that
        is no record, is skipped. ``RunFileError`` for a file that is not a regular one under the cap."""
        if not (self.path.exists() or self.path.is_symlink()):
            return []
        records = []
        for line in read_text(self.path, errors="replace").splitlines():
            try:
                record = parse_json(line, where=str(self.path))
            except RunFileError:
                continue  # a line cut short by a crash
            if isinstance(record, dict):
                records.append(record)
        return records

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step`` (work redone after resuming from a checkpoint at ``step``)."""
        kept = [r for r in self.read() if not _is_number(r.get("step", 0)) or r.get("step", 0) <= step]
        write_atomic(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


def plot_training_curve(records: list[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    """Training loss and validation loss / BLEU against steps, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in records if r.get("kind") == "train"]
    valid = [r for r in records if r.get("kind") == "valid"]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="training loss (smoothed CE)")
    if valid:
        ax.plot([r["step"] for r in valid], [r["loss"] for r in valid], "o-", label="validation loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss per target token")
    ax.grid(alpha=0.3)
    bleu = [r for r in valid if r.get("bleu") is not None]
    if bleu:
        ax2 = ax.twinx()
        ax2.plot([r["step"] for r in bleu], [r["bleu"] for r in bleu], "s--", color="tab:green", label="validation BLEU")
        ax2.set_ylabel("sacreBLEU")
        lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
        ax.legend(lines, [line.get_label() for line in lines], loc="center right")
    else:
        ax.legend(loc="upper right")
    ax.set_title("training curve")
    fig.tight_layout()
    try:
        with replacing(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100)
    finally:
        plt.close(fig)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
