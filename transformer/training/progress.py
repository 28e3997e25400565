"""Showing training progress.

* On a terminal: a tqdm progress bar with tokens/s, loss, learning rate and ETA.
* Otherwise (logs, CI): one plain line every ``log_every`` steps.

The records (``metrics.jsonl``) and the plot of the training curve are the run directory's
(:mod:`transformer.run.metrics`).
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO


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
