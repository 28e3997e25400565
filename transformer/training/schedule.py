"""Optimizer and learning-rate schedules: the paper's (section 5.3) and two for fine-tuning.

Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (or AdamW, the same with decoupled weight decay)
and one of

* ``noam`` (the paper's): ``scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``, which
  rises linearly for ``warmup`` steps and then decays with the inverse square root of the step
  number. ``scale`` (1.0 in the paper) lets small models on small data train faster.
* ``inverse_sqrt`` (fairseq's name): a linear warmup to the peak rate ``lr``, then
  ``lr * sqrt(warmup / step)``: the same shape as ``noam``, with the peak given directly, which is
  what fine-tuning a trained model wants (a rate well below the one it was trained at).
* ``constant``: a linear warmup to ``lr``, then ``lr``.

and, on top of any of them, an optional cooldown (:func:`cooldown_factor`): the last fraction of
the run decays the rate linearly to zero, so a run with a fixed budget of time or steps ends on
an annealed model (the trapezoidal / warmup-stable-decay shape with ``constant``).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

import torch

from transformer.errors import UserError

SCHEDULES = ("noam", "inverse_sqrt", "constant")


def noam_lr(step: int, *, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The learning rate at optimizer step ``step`` (1-based; step 0 is treated as step 1)."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt_lr(step: int, *, lr: float, warmup: int) -> float:
    """``lr * step / warmup`` during the warmup, ``lr * sqrt(warmup / step)`` after (1-based steps)."""
    step = max(step, 1)
    return lr * min(step / warmup, math.sqrt(warmup / step))


def constant_lr(step: int, *, lr: float, warmup: int) -> float:
    """``lr * step / warmup`` during the warmup, ``lr`` after (1-based steps)."""
    return lr * min(max(step, 1) / warmup, 1.0)


def run_progress(*, steps: int, seconds: float, total_steps: int | None, time_limit: float | None) -> float:
    """How far a run is through its length, in [0, 1]: the larger of its share of ``total_steps`` and
    of ``time_limit`` seconds (a run ends at whichever it reaches first)."""
    shares = [0.0]
    if total_steps:
        shares.append(steps / total_steps)
    if time_limit:
        shares.append(seconds / time_limit)
    return min(max(shares), 1.0)


def cooldown_factor(progress: float, cooldown: float) -> float:
    """The factor on the learning rate at ``progress`` (0 at the run's start, 1 at its end) when the
    last ``cooldown`` fraction of the run decays linearly to zero: 1 before, ``(1 - progress) / cooldown`` within."""
    if cooldown <= 0:
        return 1.0
    return min(1.0, max(0.0, (1.0 - progress) / cooldown))


def scale_rates(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
                factor: float) -> float:
    """Set each parameter group's rate to the scheduler's times ``factor``; return the first. The
    scheduler keeps the plain schedule, so a resumed run recomputes the factor from where it stands."""
    for group, base in zip(optimizer.param_groups, scheduler.get_last_lr()):
        group["lr"] = base * factor
    return optimizer.param_groups[0]["lr"]


def lr_function(schedule: str, *, d_model: int, warmup: int, scale: float = 1.0,
                lr: float | None = None) -> Callable[[int], float]:
    """The learning rate as a function of the 1-based optimizer step for ``schedule``."""
    if warmup < 1:
        raise UserError(f"warmup must be >= 1 step, got {warmup}")
    if schedule == "noam":
        if scale <= 0:
            raise UserError(f"learning-rate scale must be > 0, got {scale}")
        return lambda step: noam_lr(step, d_model=d_model, warmup=warmup, scale=scale)
    if schedule not in SCHEDULES:
        raise UserError(f"unknown schedule {schedule!r}; known: {list(SCHEDULES)}")
    if lr is None or not lr > 0:
        raise UserError(f"the {schedule} schedule needs a learning rate > 0, got {lr}")
    shape = inverse_sqrt_lr if schedule == "inverse_sqrt" else constant_lr
    return lambda step: shape(step, lr=lr, warmup=warmup)


def build_optimizer(
    params: Iterable[torch.nn.Parameter],
    *,
    d_model: int,
    warmup: int = 4000,
    scale: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    weight_decay: float = 0.0,
    decoupled: bool = False,
    schedule: str = "noam",
    lr: float | None = None,
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """Adam with the paper's settings and a schedule: the paper's warmup / inverse-square-root one
    (``noam``, scaled by ``scale``), or ``inverse_sqrt`` / ``constant`` at the peak rate ``lr``.
    Only the parameters given are updated (frozen ones are left out by the caller).

    ``weight_decay`` is Adam's L2 term (added to every gradient, so Adam's normalisation scales it),
    or with ``decoupled`` AdamW's: each matrix shrinks by ``rate * weight_decay`` per step, apart from
    the gradient step, while vectors (biases, LayerNorm gains and shifts) are left undecayed."""
    rate = lr_function(schedule, d_model=d_model, warmup=warmup, scale=scale, lr=lr)
    params = list(params)
    if not params:
        raise UserError("no parameters to optimize (every part of the model is frozen)")
    # The fused kernel updates every parameter in one pass (about 2x faster than the per-tensor
    # loop on CPU); it needs floating-point parameters on CPU or CUDA.
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    if decoupled:
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=1.0, betas=betas, eps=eps, fused=fused or None)
    else:
        optimizer = torch.optim.Adam(params, lr=1.0, betas=betas, eps=eps, weight_decay=weight_decay,
                                     fused=fused or None)
    # LambdaLR multiplies the base lr (1.0) by the factor; its step counter starts at 0.
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: rate(step + 1))
    return optimizer, scheduler
