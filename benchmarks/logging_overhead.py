"""Logging overhead: training steps with TensorBoard logs and alignment snapshots on against off.

"on" is a run's default (``train.tensorboard=true``, ``train.alignment_sentences=4``), "off" is
``train.tensorboard=false train.alignment_sentences=0``. Both train the same steps with the real
``Trainer`` on the demo's data, for two models: the demo's (d_model 128, 3 + 3 layers, 4 heads)
and the paper's ``base``. Every step writes its log record (``train.log_every=1``, the most
logging a run can do), so the step times below bound the cost from above; the runs alternate
(off, on, on, off, ...) and the table gives the mean interval between steps after the first few.

The same runs also time the logging calls themselves (scalars to TensorBoard, the gradient norm,
the alignment snapshot, the images), which is steadier than a difference of two step times on a
busy machine, and give their share of a step at a run's own cadence: scalars and the gradient
norm every ``log_every`` steps, a snapshot and its images every ``eval_every`` steps (the demo's
25 and 300; for ``base`` the paper's checkpoint interval of 10 minutes is far longer, 1,000 steps
here).

    python benchmarks/logging_overhead.py                               # demo and base
    python benchmarks/logging_overhead.py --sizes demo --steps 20 --rounds 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch

from transformer.cpu.allocator import retain_freed_memory
from transformer.demo import demo_config
from transformer.training.alignment_log import AlignmentLog
from transformer.run.config import RunConfig
from transformer.training.tensorboard_log import TensorBoardLog
from transformer.training.trainer import Trainer

CADENCE = {"demo": (25, 300), "base": (50, 1000)}  # (log_every, eval_every) of a real run of each size
SKIP = 3  # first steps left out (allocation, warm-up)


def config(size: str, steps: int, logging: bool) -> RunConfig:
    """The demo's recipe (or its data with the base model), ``steps`` steps, logging on or off."""
    cfg = demo_config(max_steps=steps, time_limit=None).with_overrides([
        "train.log_every=1", "train.eval_every=0", "train.eval_sentences=10", "train.keep_last=1",
        f"train.tensorboard={'true' if logging else 'false'}", f"train.alignment_sentences={4 if logging else 0}"])
    if size == "base":
        raw = cfg.to_dict()
        raw["model"] = {"preset": "base"}
        cfg = RunConfig.from_dict(raw)
    return cfg


class Timers:
    """Wall time spent inside chosen methods, per method."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(list)

    @contextmanager
    def wrap(self, owner: type, name: str):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[name].append(time.perf_counter() - start)

        setattr(owner, name, timed)
        try:
            yield
        finally:
            setattr(owner, name, original)


def run(size: str, steps: int, logging: bool, root: Path, timers: Timers) -> tuple[list[float], Trainer]:
    """Train ``steps`` steps; the intervals between the starts of consecutive steps (seconds)."""
    trainer = Trainer(config(size, steps, logging), root / f"{size}-{'on' if logging else 'off'}-{time.monotonic_ns()}",
                      show_progress=False)
    starts: list[float] = []
    step = trainer._step

    def stamped(*args, **kwargs):
        starts.append(time.perf_counter())
        return step(*args, **kwargs)

    trainer._step = stamped  # type: ignore[method-assign]
    with timers.wrap(TensorBoardLog, "scalars"), timers.wrap(TensorBoardLog, "alignments"), \
            timers.wrap(AlignmentLog, "snapshot"), timers.wrap(AlignmentLog, "write"):
        trainer.train()
    return [b - a for a, b in zip(starts[SKIP:], starts[SKIP + 1:])], trainer


def grad_norm_seconds(model: torch.nn.Module, repeats: int = 5) -> float:
    """Time of the gradient norm the trainer measures on logged steps (on gradients of the model's shapes)."""
    grads = [torch.randn_like(p) for p in model.parameters()]
    torch.nn.utils.get_total_norm(grads)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.nn.utils.get_total_norm(grads)
    return (time.perf_counter() - start) / repeats


def image_seconds(trainer: Trainer, root: Path) -> tuple[float, float]:
    """TensorBoard images of one evaluation: the first (drawing each sentence's frame) and a later one."""
    board = TensorBoardLog.open(root / f"images-{time.monotonic_ns()}", enabled=True)
    snapshot = trainer.alignments.snapshot(trainer.model) if trainer.alignments.enabled else []
    times = []
    for step in (1, 2):
        start = time.perf_counter()
        board.alignments(step, snapshot)
        times.append(time.perf_counter() - start)
    board.close()
    return times[0], times[1]


def measure(size: str, steps: int, rounds: int, root: Path) -> dict:
    intervals: dict[bool, list[float]] = {False: [], True: []}
    timers = Timers()
    on_trainer = None
    for r in range(rounds):
        for logging in ((False, True) if r % 2 == 0 else (True, False)):
            gaps, trainer = run(size, steps, logging, root, timers if logging else Timers())
            print(f"{size}, logging {'on' if logging else 'off'}: {statistics.mean(gaps) * 1e3:.1f} ms per step "
                  f"({len(gaps)} steps)", flush=True)
            intervals[logging] += gaps
            if logging:
                on_trainer = trainer
    assert on_trainer is not None
    log_every, eval_every = CADENCE[size]
    off, on = statistics.mean(intervals[False]), statistics.mean(intervals[True])
    scalars = statistics.mean(timers.seconds["scalars"])  # one train record (4 scalars); valid records are rarer
    norm = grad_norm_seconds(on_trainer.model)
    snapshot = statistics.mean(timers.seconds["snapshot"])
    write = statistics.mean(timers.seconds["write"])
    first_images, images = image_seconds(on_trainer, root)
    per_step = (scalars + norm) / log_every + (snapshot + write + images) / eval_every
    return dict(size=size, parameters=on_trainer.model.num_parameters(), steps=len(intervals[True]), step_off_s=off,
                step_on_s=on, ratio=on / off, scalars_s=scalars, grad_norm_s=norm, snapshot_s=snapshot + write,
                images_first_s=first_images, images_s=images, log_every=log_every, eval_every=eval_every,
                logging_per_step_s=per_step, share=per_step / off)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["demo", "base"], choices=["demo", "base"])
    parser.add_argument("--steps", type=int, default=40, help="steps per demo run (default: 40)")
    parser.add_argument("--base-steps", type=int, default=8, help="steps per base run (default: 8)")
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs per size, alternating (default: 2)")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args()
    retain_freed_memory()  # as transformer train does
    rows = []
    with tempfile.TemporaryDirectory(prefix="logging-overhead-") as tmp:
        for size in args.sizes:
            steps = args.steps if size == "demo" else args.base_steps
            if steps <= SKIP + 1:
                parser.error(f"{size} needs more than {SKIP + 1} steps per run")
            rows.append(measure(size, steps, args.rounds, Path(tmp)))
    print(f"\nstep time, logging at every step (train.log_every=1), mean of {', '.join(str(r['steps']) for r in rows)} "
          "steps; torch threads: " + str(torch.get_num_threads()))
    print(f"{'model':<6} {'params':>12} {'off (ms)':>10} {'on (ms)':>10} {'on / off':>9}")
    for r in rows:
        print(f"{r['size']:<6} {r['parameters']:>12,} {r['step_off_s'] * 1e3:>10.1f} {r['step_on_s'] * 1e3:>10.1f} "
              f"{r['ratio']:>9.3f}")
    print("\nthe logging calls, timed inside the 'on' runs (ms), and their share of a step at a run's cadence")
    print(f"{'model':<6} {'scalars':>8} {'grad norm':>10} {'snapshot':>9} {'images':>8} {'(first)':>8} "
          f"{'log/eval every':>15} {'per step':>9} {'share':>7}")
    for r in rows:
        print(f"{r['size']:<6} {r['scalars_s'] * 1e3:>8.2f} {r['grad_norm_s'] * 1e3:>10.2f} {r['snapshot_s'] * 1e3:>9.1f} "
              f"{r['images_s'] * 1e3:>8.1f} {r['images_first_s'] * 1e3:>8.0f} "
              f"{str(r['log_every']) + ' / ' + str(r['eval_every']):>15} {r['logging_per_step_s'] * 1e3:>9.3f} "
              f"{r['share']:>7.2%}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
