"""Optimizer and learning-rate schedule of the paper (section 5.3).

Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 and

    lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

which rises linearly for ``warmup`` steps and then decays with the inverse square root of the
step number. ``scale`` (1.0 in the paper) lets small models on small data train faster.
"""

from __future__ import annotations

from typing import Iterable

import torch


def noam_lr(step: int, *, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The learning rate at optimizer step ``step`` (1-based; step 0 is treated as step 1)."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def build_optimizer(
    params: Iterable[torch.nn.Parameter],
    *,
    d_model: int,
    warmup: int = 4000,
    scale: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    weight_decay: float = 0.0,
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam with the paper's settings and its warmup / inverse-square-root schedule."""
    if warmup < 1:
        raise ValueError(f"warmup must be >= 1 step, got {warmup}")
    if scale <= 0:
        raise ValueError(f"learning-rate scale must be > 0, got {scale}")
    params = list(params)
    # The fused kernel updates every parameter in one pass (about 2x faster than the per-tensor
    # loop on CPU); it needs floating-point parameters on CPU or CUDA.
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    optimizer = torch.optim.Adam(params, lr=1.0, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused or None)
    # LambdaLR multiplies the base lr (1.0) by the factor; its step counter starts at 0.
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: noam_lr(step + 1, d_model=d_model, warmup=warmup, scale=scale)
    )
    return optimizer, scheduler
