"""The CPU engine: compiled kernels that make training and decoding fast, applied explicitly.

The model (``transformer.model``) is the paper in plain PyTorch. This package swaps some of a
model's modules for subclasses that run compiled kernels where they apply, the way
``torch.ao.quantization.quantize_dynamic`` swaps layers, and is tested equal to the model:

    from transformer.cpu import accelerate_training, prepare_for_decoding
    accelerate_training(model, criterion)             # before training on CPU
    prepare_for_decoding(model, precision="int8")     # a frozen model, before translating

* ``build``: compiles ``fused.c`` and ``packed_linear.c`` once into a cached library;
  ``TRANSFORMER_FUSED_CPU=0`` turns every kernel off (the one switch).
* ``ops``: the training kernels as PyTorch custom operators (``torch.ops.transformer_cpu``).
* ``decoding_ops``: the decoding kernels as custom operators, in the same namespace.
* ``training``: fast dropout, fused dropout + residual + LayerNorm, attention over short rows.
* ``loss``: the label-smoothed cross-entropy with its gradient in one pass over the logits.
* ``decoding``: packed float32/int8 linear layers, a decoder layer's step in one call,
  attention for decoding steps, the best tokens of each row.
* ``precision``: which number formats this machine runs fast (bf16 units, int8 dot products).
* ``allocator``: keep freed memory in the process (glibc), for steadier training steps.
"""

from transformer.cpu.build import ENV_SWITCH, available
from transformer.cpu.decoding import prepare_for_decoding
from transformer.cpu.swap import Swaps
from transformer.cpu.training import accelerate_training

__all__ = ["ENV_SWITCH", "Swaps", "accelerate_training", "available", "prepare_for_decoding"]
