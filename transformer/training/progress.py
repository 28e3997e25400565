"""Showing and recording training progress.

* On a terminal: a tqdm progress bar with tokens/s, loss, learning rate and ETA.
* Otherwise (logs, CI): one plain line every ``log_every`` steps.
* Always: metrics as JSON lines in ``metrics.jsonl`` and a PNG plot of the training curve.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from transformer.run_files import RunFileError, parse_json, read_text

METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "training_curve.png"


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
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept), encoding="utf-8")
        os.replace(tmp, self.path)


class Progress:
    """A progress bar on a terminal, plain periodic lines otherwise."""

    def __init__(
        self, *, total_steps: int | None, initial_step: int = 0, log_every: int = 50, stream: TextIO | None = None,
        enabled: bool = True, time_limit: float | None = None,
    ) -> None:
        self.stream = stream or sys.stderr
        self.log_every = log_every
        self.total = total_steps
        self.enabled = enabled
        self.start = time.perf_counter()
        self.start_step = initial_step
        self.time_limit = time_limit
        self.bar = None
        if enabled and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, initial=initial_step, file=self.stream, unit="step", dynamic_ncols=True)

    def update(self, step: int, *, loss: float, lr: float, tokens_per_s: float, epoch: int) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(epoch=epoch, loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")
        elif step % self.log_every == 0:
            print(
                f"step {step}{'/' + str(self.total) if self.total else ''} epoch {epoch} loss {loss:.4f} "
                f"lr {lr:.3e} {tokens_per_s:,.0f} tok/s elapsed {_duration(self.elapsed)}"
                f"{' eta ' + _duration(self.eta(step)) if self.total else ''}",
                file=self.stream,
                flush=True,
            )

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def eta(self, step: int) -> float:
        done = step - self.start_step
        if not self.total or done <= 0:
            return math.nan
        remaining = self.elapsed / done * (self.total - step)
        if self.time_limit is not None:  # a time-limited run ends at its limit
            remaining = min(remaining, max(self.time_limit - self.elapsed, 0.0))
        return remaining

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


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
    tmp = Path(path).with_name(f".{Path(path).name}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
