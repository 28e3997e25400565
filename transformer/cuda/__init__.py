"""The CUDA engine: what makes training and translating fast on a GPU, applied explicitly by the
trainer and the ``Translator`` when they run on CUDA.

The counterpart of ``transformer.cpu``, with the same habits: the model and the loss stay the
paper's plain PyTorch; the engine is chosen once, for the device the run trains on, and can be
undone; ``tests/test_cuda_engine.py`` checks that a step with it equals a step without.

    from transformer.cuda import accelerate_training, DeviceBatches
    engine = accelerate_training(model, compile=True)     # torch.compile, with a fallback to eager
    for batch in DeviceBatches(batches, device):          # pinned, copied ahead on a side stream
        ...
    engine.undo()

What a GPU step needs is different from a CPU's: a GPU runs kernels queued by the host, so a
step is fast when the host never waits for the GPU (no ``.item()``, ``nonzero()`` or shapes that
depend on the data), when few kernels are launched (the loss as a handful of whole-tensor
operations, ``torch.compile`` fusing the element-wise work), and when the next batch is already
on the device. The trainer's part of that (logits at every position with padding ignored by the
loss, the loss summed on the device and read on the logging cadence) is in
``transformer.training.trainer``.

* ``training``: ``accelerate_training``, compiling the model's forward pass.
* ``batches``: ``DeviceBatches``, batches padded to few shapes and copied ahead of use.
* ``decoding``: the ``Translator``'s batch size and checks for finished sentences on a GPU.

Names are imported when first used (PEP 562), so that ``decoding``'s numbers (which ``transformer
serve --help`` shows) load without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer.lazy import lazy_exports

if TYPE_CHECKING:  # what the names are, for type checkers and readers; imported on first use below
    from transformer.cuda.batches import DeviceBatches, pad_batch
    from transformer.cuda.training import CudaTraining, accelerate_training

_EXPORTS = {"CudaTraining": ".training", "DeviceBatches": ".batches", "accelerate_training": ".training",
            "pad_batch": ".batches"}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
