"""Multi-process data parallelism with ``torch.distributed`` (launched by ``torchrun``).

``torchrun --nproc_per_node 2 -m transformer.cli train ...`` starts one process per rank and
sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT. Each rank trains on its own
share of the batches (see ``TokenBudgetBatches``); gradients are averaged by
``DistributedDataParallel``; rank 0 alone writes checkpoints and logs. Backend: gloo on CPU,
NCCL on CUDA.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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
        dist.init_process_group(backend=backend)
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank)


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a few numbers over all ranks (identity with one process)."""
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def broadcast_flag(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """Rank 0's value of ``flag`` on every rank (so all ranks stop at the same step)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
