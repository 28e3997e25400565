"""``accelerate_training(model, compile=...)``: the CUDA engine's changes to a model for training.

``torch.compile`` traces the model's forward pass (and autograd its backward) into fused kernels:
the dropout, residual additions, LayerNorms, activations and softmax of a step become a few
generated kernels instead of dozens of launches each. It is applied with ``nn.Module.compile``'s
hook, so the model keeps its class, parameters and ``state_dict`` keys (checkpoints are
unchanged), and the encoder/decoder methods that decoding calls run uncompiled.

**One compilation.** Every batch has another number of sentences and other lengths. The batch
dimension and the length of every input tensor are marked dynamic before each call
(``torch._dynamo.maybe_mark_dynamic``), so the first batch compiles a graph with symbolic sizes
that every later batch reuses; without the marks PyTorch would compile a static graph first and
a symbolic one at the second shape. Only training calls use the graph: a call in evaluation mode
or without gradients (validation, the alignment snapshots) runs eagerly, so validating compiles
nothing and cannot push the graph out of the compiler's cache.

**A graph that cannot be used.** If compiling fails, in the forward pass or in the backward pass
(compiled lazily, at the first ``backward()``), or if the compiler would recompile more than
``torch._dynamo.config.recompile_limit`` times (where it would otherwise fall back to eager in
silence), the model runs eagerly from then on and ``say`` is told why, once: a run never stops
because of the compiler, and ``engine.compiled`` is true only while the compiled graph is used.
A batch whose backward pass failed to compile is run again eagerly (``engine.run``).

``engine.compiles`` counts the calls that compiled a graph (1 when the shapes never recompile),
``engine.compile_seconds`` the host time of the batches that compiled (``engine.run`` says each
one's): the trainer keeps it out of ``train.time_limit``.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch
from torch import nn

T = TypeVar("T")
# where the backward pass of a compiled graph is compiled (lazily, at its first run) and run
_COMPILED_BACKWARD_FILES = ("torch/_functorch/_aot_autograd/", "torch/_inductor/")


@dataclass
class CudaTraining:
    """What ``accelerate_training`` changed; ``undo()`` puts the model back as it was."""

    model: nn.Module = field(repr=False)
    compiled: bool = False  # whether training calls use the compiled graph (False after a fallback)
    backend: str | None = None
    failure: str | None = None  # why the compiled graph was given up, where it was
    compiles: int = 0  # calls of the model that compiled a graph (the first one, then each recompilation)
    compile_seconds: float = 0.0  # host time of the batches whose forward or backward pass compiled
    _say: Callable[[str], None] = field(default=print, repr=False)

    @property
    def recompiles(self) -> int:
        """Compilations after the first: 0 when every batch shape reused the first graph."""
        return max(self.compiles - 1, 0)

    def undo(self) -> None:
        """The model's forward pass eager again."""
        self.model._compiled_call_impl = None  # what nn.Module.compile sets (None: eager)
        self.compiled = False

    def run(self, batch_step: Callable[[], T]) -> T:
        """``batch_step()`` (one batch's forward and backward passes), timed when it compiled a graph.

        Where the backward pass fails to compile (``backward()`` compiles it lazily, outside the
        forward's fallback), the engine falls back to eager and runs ``batch_step`` again: the failed
        backward left no gradient behind, since every parameter is inside the compiled graph."""
        if not self.compiled:
            return batch_step()
        graphs, start = _graphs_compiled(), time.perf_counter()
        try:
            result = batch_step()
        except Exception as err:
            if not self.compiled or not (_compiler_failure(err) or _in_compiled_backward(err)):
                raise
            self._fall_back(err)
        else:
            if _graphs_compiled() != graphs:
                seconds = time.perf_counter() - start
                self.compile_seconds += seconds
                self._say(f"torch.compile: compiled the training step in {seconds:.1f} s" if self.recompiles == 0 else
                          f"torch.compile: recompiled for a new batch shape in {seconds:.1f} s ({self.recompiles} "
                          "recompilation(s) so far)")
            return result
        self.compile_seconds += time.perf_counter() - start  # the failed compilation's time too
        return batch_step()

    def _fall_back(self, err: BaseException) -> None:
        self.undo()
        if _is_recompile_limit(err):
            self.failure = (f"recompiled past torch._dynamo.config.recompile_limit ({_recompile_limit()}) after "
                            f"{self.compiles} compilation(s)")
        else:
            cause = getattr(err, "inner_exception", None) or err.__cause__ or err  # the backend's own error
            lines = str(cause).strip().splitlines()
            self.failure = f"{type(cause).__name__}: {lines[0] if lines else 'no message'}"
        self._say(f"warning: torch.compile failed ({self.failure}); training goes on without it")


def accelerate_training(model: nn.Module, *, compile: bool = False, backend: str | Callable = "inductor",
                        say: Callable[[str], None] = print) -> CudaTraining:
    """Apply the CUDA engine to ``model`` in place: with ``compile``, its training calls through
    ``torch.compile`` (``backend``: ``inductor``, PyTorch's compiler; ``aot_eager`` traces without
    generating code, for tests). Returns what was changed; ``.undo()`` reverts it."""
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", "custom")
    engine = CudaTraining(model, backend=name if compile else None, _say=say)
    if compile:
        compiled = torch.compile(model._call_impl, backend=backend)
        model._compiled_call_impl = _with_fallback(compiled, model, engine)
        engine.compiled = True
    return engine


def _with_fallback(compiled: Callable[..., Any], model: nn.Module, engine: CudaTraining) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if not (model.training and torch.is_grad_enabled()):  # validation and snapshots: eager, nothing compiled
            return model._call_impl(*args, **kwargs)
        for x in args:  # (batch, length) of src, tgt_in and src_mask: symbolic from the first compilation
            if isinstance(x, torch.Tensor) and x.dim() >= 2:
                torch._dynamo.maybe_mark_dynamic(x, 0)
                torch._dynamo.maybe_mark_dynamic(x, 1)
        graphs = _graphs_compiled()
        try:
            with _fail_on_recompile_limit():
                return compiled(*args, **kwargs)
        except Exception as err:  # the compiler's failure, not the model's errors (those are raised again)
            if not _compiler_failure(err):
                raise
            engine._fall_back(err)
            return model._call_impl(*args, **kwargs)
        finally:
            if _graphs_compiled() != graphs:
                engine.compiles += 1
    return call


def _graphs_compiled() -> int:
    """Graphs compiled by torch.compile in this process so far (Dynamo's own counter)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _recompile_limit() -> int:
    config = torch._dynamo.config
    return int(getattr(config, "recompile_limit", None) or getattr(config, "cache_size_limit"))


def _fail_on_recompile_limit():
    """Past the recompile limit Dynamo runs the frame eagerly without a word; this makes it raise instead,
    so the engine knows the graph is no longer used (a setting of PyTorch 2.5 and later)."""
    config = torch._dynamo.config
    if hasattr(config, "fail_on_recompile_limit_hit"):
        return config.patch(fail_on_recompile_limit_hit=True)
    return config.patch()  # older: nothing to set


def _is_recompile_limit(err: BaseException) -> bool:
    return type(err).__name__ in ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")


def _compiler_failure(err: BaseException) -> bool:
    """Whether ``err`` is the compiler's failure (tracing, lowering, code generation, the recompile
    limit) rather than the model's own error or the device running out of memory."""
    if isinstance(err, torch.OutOfMemoryError):
        return False
    return isinstance(err, torch._dynamo.exc.TorchDynamoException) or _is_recompile_limit(err)


def _in_compiled_backward(err: BaseException) -> bool:
    """Whether ``err`` came out of a compiled graph's backward pass (where its compiler's failures surface
    as they are, unwrapped), the device running out of memory aside."""
    if isinstance(err, torch.OutOfMemoryError):
        return False
    frames = traceback.extract_tb(err.__traceback__)
    return any(part in frame.filename.replace("\\", "/") for frame in frames for part in _COMPILED_BACKWARD_FILES)
