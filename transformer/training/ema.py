"""An exponential moving average of the weights (``train.ema``): Polyak averaging over the steps.

After each optimizer step every floating-point tensor of the model moves the average toward
itself: ``average = decay * average + (1 - decay) * weight``. Early on the decay is
``min(decay, (1 + n) / (10 + n))`` after ``n`` updates, so the random initial weights are
forgotten within the first steps rather than over ``1 / (1 - decay)`` of them. The average is
kept in float32 beside the model, saved in each checkpoint (``ema.safetensors``) with its
update count, and restored on resume, so a resumed run's average is the uninterrupted one's.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import Tensor, nn

from transformer.run.model import unique_state_dict
from transformer.errors import UserError


class WeightAverage:
    """The moving average of ``model``'s floating-point weights (names as in ``model.safetensors``)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise UserError(f"the moving average's decay must lie in (0, 1), got {decay}")
        self.decay = decay
        self.updates = 0
        self.tensors = {name: t.detach().float().clone() for name, t in unique_state_dict(model).items()
                        if t.is_floating_point()}

    def rate(self) -> float:
        """The decay of the next update."""
        return min(self.decay, (1 + self.updates) / (10 + self.updates))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        current = unique_state_dict(model)
        names = list(self.tensors)
        torch._foreach_lerp_([self.tensors[n] for n in names], [current[n].detach().float() for n in names],
                             1.0 - self.rate())
        self.updates += 1

    def copy_to(self, model: nn.Module) -> None:
        """Put the average into ``model``'s weights (in their dtypes)."""
        _copy_into(model, self.tensors)

    def load(self, tensors: dict[str, Tensor], updates: int) -> None:
        """Restore a saved average (its tensors and update count); the names must be this model's."""
        if tensors.keys() != self.tensors.keys():
            missing, unexpected = self.tensors.keys() - tensors.keys(), tensors.keys() - self.tensors.keys()
            raise UserError(f"the saved moving average does not fit the model: missing {sorted(missing)[:3]}, "
                             f"unexpected {sorted(unexpected)[:3]}")
        for name, value in tensors.items():
            self.tensors[name].copy_(value)
        self.updates = updates

    @contextmanager
    def swapped_into(self, model: nn.Module) -> Iterator[nn.Module]:
        """``model`` holding the average for the ``with`` block (to save or score it), then its own
        weights again."""
        own = {name: t.detach().clone() for name, t in unique_state_dict(model).items() if name in self.tensors}
        self.copy_to(model)
        try:
            yield model
        finally:
            _copy_into(model, own)


@torch.no_grad()
def _copy_into(model: nn.Module, tensors: dict[str, Tensor]) -> None:
    current = unique_state_dict(model)
    for name, value in tensors.items():
        current[name].copy_(value)
