"""Multi-process data parallelism with ``torch.distributed`` (launched by ``torchrun``).

``torchrun --nproc_per_node 2 -m transformer.cli train ...`` starts one process per rank and
sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT; ``--nnodes N`` with a c10d
rendezvous spreads the ranks over machines. Each rank trains on its own share of the batches
(see ``TokenBudgetBatches``); gradients are averaged by ``DistributedDataParallel``; rank 0
alone writes checkpoints and logs. Backend: gloo on CPU, NCCL on CUDA.

**No collective of its own in a step.** A step's loss is normalised by the target tokens of every
process's batches; each process knows them from the batch plan they share
(:func:`step_target_tokens`), so only DDP's gradient all-reduce joins the processes in a step. The
clock (``train.time_limit``, the cooldown) is rank 0's, agreed when the processes meet anyway: at each
log record (``train.log_every``), validation and checkpoint; in between a process neither reads
a value back from the GPU nor waits for another.

**Changing the number of processes.** A step takes ``accumulate x world_size`` batches: the
next ones of the epoch's order, process ``r`` taking positions ``r, r + W, ...`` of them, so the
batches of a step depend only on that product (an epoch is cut into whole steps; the few
batches left over at its end wait for the next epoch's shuffle). Each checkpoint records the
layout it was written with (:data:`LAYOUT_KEY`); a run resumed on another number of processes
accumulates ``batches per step / world_size`` batches per process, keeping its batches per step
and its data order, or is refused (:class:`LayoutError`) when the processes cannot share them.

**A process that dies.** Collectives time out after ``$TRANSFORMER_DIST_TIMEOUT`` seconds (30
minutes by default); a collective that fails because another process died or stopped answering
ends the run with :class:`PeerLostError`, one line naming the last intact checkpoint.
"""

from __future__ import annotations

import math
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist

from transformer.errors import UserError
from transformer.run_files import read_json
from transformer.run.checkpoints import latest_checkpoint
from transformer.run.layout import TRAINER_STATE_FILE
from transformer.training.state import TrainerState

TIMEOUT_ENV = "TRANSFORMER_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 1800.0  # torch's own default: long enough for rank 0's validation while the others wait
LAYOUT_KEY = "layout"  # TrainerState.extra entry: {"world_size": W, "accumulate": A} of the run that saved it


class LayoutError(UserError):
    """A run cannot resume on this number of processes with its batches per step."""


class PeerLostError(ConnectionError):
    """Another process of the run died or stopped answering; the message names the checkpoint to resume from."""


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device_type: str) -> DistInfo:
    """Join the process group when launched by torchrun with more than one process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, timeout=collective_timeout())
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank)


def collective_timeout() -> timedelta:
    """How long a collective waits for the other processes: ``$TRANSFORMER_DIST_TIMEOUT`` seconds."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UserError(f"${TIMEOUT_ENV} must be a number of seconds > 0, got {raw!r}")
    return timedelta(seconds=seconds)


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a few numbers over all ranks (identity with one process)."""
    return _all_reduce(values, info, device, dist.ReduceOp.SUM)


def all_reduce_min(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """The smallest of each of a few numbers over all ranks (identity with one process)."""
    return _all_reduce(values, info, device, dist.ReduceOp.MIN)


def _all_reduce(values: list[float], info: DistInfo, device: torch.device, op) -> list[float]:
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=op)
    return t.tolist()


def step_target_tokens(batches, state: TrainerState, count: int, info: DistInfo, *, local: int) -> int:
    """The target tokens of the step that starts at ``state``'s position, over all processes, from the batch
    plan every process shares (``batches.target_tokens_by_rank``): the loss's normalizer, known without a
    collective, so a step never waits for the others or for the GPU. ``local`` is this process's own count,
    checked against the plan."""
    by_rank = batches.target_tokens_by_rank(state.epoch, state.batch_in_epoch, count)
    if by_rank[info.rank] != local:
        raise RuntimeError(f"process {info.rank}: its batches hold {local} target tokens, the batch plan says "
                           f"{by_rank[info.rank]}: the processes do not share one data order")
    return sum(by_rank)


def broadcast_number(value: float, info: DistInfo, device: torch.device) -> float:
    """Rank 0's ``value`` on every rank (a clock reading that must be the same everywhere)."""
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return float(t.item())


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


# ------------------------------------------------------------------------- number of processes
def resume_accumulation(run_dir: str | os.PathLike[str], accumulate: int, info: DistInfo) -> int:
    """Batches each process accumulates per step: ``accumulate`` for a new run; for a resumed one,
    the batches per step its latest checkpoint was written with, shared among ``info.world_size``.

    Raises :class:`LayoutError` when this many processes cannot share them evenly. Reads only.
    """
    saved = _saved_layout(latest_checkpoint(run_dir))
    if saved is None:
        return accumulate
    world, acc = saved
    per_step = world * acc
    if per_step % info.world_size:
        fits = " or ".join(str(n) for n in range(1, per_step + 1) if per_step % n == 0)
        raise LayoutError(
            f"{run_dir} takes {per_step} batch(es) per step ({world} process(es) x {acc} accumulated), which "
            f"{info.world_size} processes cannot share: resume it on {fits} process(es), or start a new --run-dir "
            f"with train.accumulate set for {info.world_size} processes")
    return per_step // info.world_size


def steps_per_epoch(batches_per_process: int, accumulate: int) -> int:
    """Whole steps in an epoch; raises ``UserError`` naming the keys when there is not even one."""
    if batches_per_process < accumulate:
        raise UserError(
            f"an epoch has {batches_per_process} batch(es) per process, fewer than the {accumulate} a step "
            "accumulates: lower train.accumulate or data.max_tokens, use fewer processes, or add training data")
    return batches_per_process // accumulate


def adopt_layout(state: TrainerState, info: DistInfo, accumulate: int) -> None:
    """Restate a checkpoint's position in its epoch for this number of processes (the batches of
    the epoch's order used so far stay the same), then record the layout the next saves are made with."""
    saved = state.extra.get(LAYOUT_KEY)
    world = saved.get("world_size") if isinstance(saved, dict) else None
    # a layout that is not a number of processes is taken to match, as resume_accumulation takes it
    if type(world) is int and world >= 1 and world != info.world_size:
        used = state.batch_in_epoch * world  # whole steps, so a multiple of every sharing
        state.batch_in_epoch = used // info.world_size
    state.extra[LAYOUT_KEY] = {"world_size": info.world_size, "accumulate": accumulate}


def describe_layout(info: DistInfo, accumulate: int, configured: int) -> str:
    """'2 process(es)', and the accumulation when it was changed to keep a resumed run's batches per step."""
    text = f"{info.world_size} process(es)"
    if accumulate != configured:
        text += f" accumulating {accumulate} batches each (the run's {accumulate * info.world_size} per step)"
    return text


def _saved_layout(checkpoint: Path | None) -> tuple[int, int] | None:
    """(world_size, accumulate) a checkpoint was written with; None when it records none (written
    before layouts were recorded: it is taken to match) or cannot be read (loading it reports that)."""
    if checkpoint is None:
        return None
    try:
        layout = read_json(checkpoint / TRAINER_STATE_FILE)["trainer"]["extra"][LAYOUT_KEY]  # capped, nesting bounded
        world, acc = int(layout["world_size"]), int(layout["accumulate"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (world, acc) if world >= 1 and acc >= 1 else None


# ------------------------------------------------------------------------- a process that dies
@contextmanager
def peer_failures(info: DistInfo, run_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Turn a collective that failed because another process died or timed out into :class:`PeerLostError`."""
    try:
        yield
    except RuntimeError as err:
        if not (info.enabled and is_collective_failure(err)):
            raise
        checkpoint = latest_checkpoint(run_dir)
        kept = f"the last checkpoint, {checkpoint.name}, is intact" if checkpoint else "no checkpoint was written yet"
        raise PeerLostError(
            f"process {info.rank} of {info.world_size}: another process of this run died or stopped answering "
            f"({failure_cause(err)}); {kept}: run the same command again to resume (torchrun --max-restarts N "
            "does it by itself)") from err


def is_collective_failure(err: BaseException) -> bool:
    """A torch.distributed error (NCCL, store, network) or one raised by gloo's transport."""
    return isinstance(err, dist.DistError) or "gloo" in str(err)


def failure_cause(err: BaseException) -> str:
    """The backend's message without its source location and advice: 'Connection reset by peer'."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", str(err).strip().splitlines()[0] if str(err).strip() else "")
    text = text.split(". This is typically")[0].rstrip(".")
    return (text[:200] + "...") if len(text) > 200 else (text or type(err).__name__)
