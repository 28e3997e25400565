"""Swapping a model's modules for the engine's subclasses, and back.

The engine changes how a module computes, never what it holds: each engine class subclasses a
model class, adds no parameters, and falls back to the model's own ``forward`` wherever its
kernel does not apply. So a swap is a change of ``module.__class__``: parameters, buffers,
``state_dict`` keys and hooks stay as they were, and ``undo`` puts the old classes back.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from torch import nn


@dataclass
class Swaps:
    """What one ``swap`` changed: (module, class before) pairs, in model order."""

    changed: list[tuple[nn.Module, type]] = field(default_factory=list)

    def undo(self) -> None:
        """Put every swapped module's previous class back (latest first)."""
        for module, before in reversed(self.changed):
            for name in getattr(type(module), "engine_state", ()):  # what the engine class added
                module.__dict__.pop(name, None)
            module.__class__ = before
        self.changed.clear()


def swap(model: nn.Module, classes: dict[type, type]) -> Swaps:
    """Give each module of ``model`` whose class is a key of ``classes`` (exactly, or a subclass
    swapped earlier by the engine) the engine class it maps to."""
    swaps = Swaps()
    for module in model.modules():
        target = _target(type(module), classes)
        if target is not None and type(module) is not target:
            swaps.changed.append((module, type(module)))
            module.__class__ = target
    return swaps


def _target(cls: type, classes: dict[type, type]) -> type | None:
    if cls in classes:
        return classes[cls]
    engine_base = getattr(cls, "model_class", None)  # an engine class: map by the model class it extends
    return classes.get(engine_base) if engine_base is not None else None


def plain_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with the model's own classes everywhere (no engine swaps)."""
    copied = copy.deepcopy(model)
    for module in copied.modules():
        while (base := getattr(type(module), "model_class", None)) is not None:
            for name in getattr(type(module), "engine_state", ()):
                module.__dict__.pop(name, None)
            module.__class__ = base
    return copied
