"""``accelerate_training(model, compile=...)``: the CUDA engine's changes to a model for training.

``torch.compile`` traces the model's forward pass (and autograd its backward) into fused kernels:
the dropout, residual additions, LayerNorms, activations and softmax of a step become a few
generated kernels instead of dozens of launches each. It is applied with ``nn.Module.compile``,
so the model keeps its class, parameters and ``state_dict`` keys (checkpoints are unchanged),
and the encoder/decoder methods that decoding calls run uncompiled. Batches padded to few
shapes (``DeviceBatches``) keep recompilation rare: after the second shape PyTorch compiles a
graph with symbolic lengths.

If compiling fails (no Triton or C compiler for the backend, an operator the compiler does not
support), the model runs eagerly from then on and ``say`` is told why, once: a run never
stops because of the compiler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn


@dataclass
class CudaTraining:
    """What ``accelerate_training`` changed; ``undo()`` puts the model back as it was."""

    model: nn.Module
    compiled: bool = False  # whether the forward pass is compiled (False after a fallback)
    backend: str | None = None
    failure: str | None = None  # why compiling failed, where it did
    _say: Callable[[str], None] = field(default=print, repr=False)

    def undo(self) -> None:
        """The model's forward pass eager again."""
        self.model._compiled_call_impl = None  # what nn.Module.compile sets (None: eager)
        self.compiled = False

    def _fall_back(self, err: BaseException) -> None:
        self.undo()
        cause = getattr(err, "inner_exception", None) or err.__cause__ or err  # the backend's own error
        lines = str(cause).strip().splitlines()
        self.failure = f"{type(cause).__name__}: {lines[0] if lines else 'no message'}"
        self._say(f"warning: torch.compile failed ({self.failure}); training goes on without it")


def accelerate_training(model: nn.Module, *, compile: bool = False, backend: str = "inductor",
                        say: Callable[[str], None] = print) -> CudaTraining:
    """Apply the CUDA engine to ``model`` in place: with ``compile``, its forward pass through
    ``torch.compile`` (``backend``: ``inductor``, PyTorch's compiler; ``aot_eager`` traces without
    generating code, for tests). Returns what was changed; ``.undo()`` reverts it."""
    engine = CudaTraining(model, backend=backend if compile else None, _say=say)
    if compile:
        compiled = torch.compile(model._call_impl, backend=backend)
        model._compiled_call_impl = _with_fallback(compiled, model, engine)
        engine.compiled = True
    return engine


def _with_fallback(compiled: Callable[..., Any], model: nn.Module, engine: CudaTraining) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return compiled(*args, **kwargs)
        except torch._dynamo.exc.TorchDynamoException as err:  # the compiler's failure, not the model's errors
            engine._fall_back(err)
            return model._call_impl(*args, **kwargs)
    return call
