"""Decoding on CPU with the engine's kernels: ``prepare_for_decoding(model, precision=...)``.

A decoding step multiplies a few rows (sentences x beams) by every weight matrix of the decoder,
so its time goes into reading the weights, not into arithmetic; PyTorch's CPU products are
built for large matrices. ``prepare_for_decoding`` swaps, in place:

* every ``nn.Linear`` for ``PackedLinear``, which keeps a copy of its weight packed once, at
  preparation, in the kernels' panel layout (float32, or int8 with one scale per output
  feature: a quarter of the memory traffic, activations and sums staying float32);
* each ``FeedForward`` for one whose ReLU runs in the first product's last pass;
* each ``DecoderLayer`` for one that runs a whole layer for one new position per row in one
  kernel call (products, cache write, attention, Add & Norm);
* the attention modules for ones that attend for a few queries per row in one kernel call,
  the beams of a sentence reading its keys in place;
* the ``Transformer`` itself for one that picks the best tokens of each row (log-softmax and
  top-k) in one pass (``best_tokens``, which ``transformer.decoding`` calls when present).

Each swapped module falls back to the model's code where its kernel does not apply (autograd
on, CPU autocast, other dtypes, attention weights asked for). The packed copies are made when
the model is prepared: weights changed afterwards need ``prepare_for_decoding`` again (undo the
returned swaps first). In float32 the outputs equal the model's to rounding and the decoded
tokens are the same (``tests/test_cpu_decoding.py``); int8 changes the weights themselves.

The kernels, as PyTorch custom operators, and their limits: ``decoding_ops``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.cpu import build, decoding_ops
from transformer.cpu.swap import Swaps, swap
from transformer.model.attention import CrossAttention, SelfAttention, scaled_dot_product_attention
from transformer.model.cache import KVCache, StaticKV
from transformer.model.layers import DecoderLayer, FeedForward
from transformer.model.transformer import Transformer
from transformer.errors import UserError

# The precisions (transformer.inference_precision) whose weights the kernels pack: as they are, or int8 copies.
PACKED_PRECISIONS = ("fp32", "int8")
# The decoding kernels as this module calls them (see decoding_ops.eager).
_packed_linear = decoding_ops.eager(decoding_ops.packed_linear)
_decode_attention = decoding_ops.eager(decoding_ops.decode_attention)
_decoder_layer_step = decoding_ops.eager(decoding_ops.decoder_layer_step)
_best_tokens = decoding_ops.eager(decoding_ops.best_tokens)
# Queries per row up to which inference attention takes the decoding kernel (decoding steps; a
# beam search's cross-attention stacks a sentence's beams); more, e.g. a whole encoder, go to
# PyTorch's fused kernel, which works in blocks.
MAX_DECODE_QUERIES = 16


def _inference_time(x: Tensor) -> bool:
    """No autograd and no CPU autocast (which would pick another dtype), a float32 CPU tensor."""
    return (not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu") and x.dtype == torch.float32
            and x.device.type == "cpu")


class PackedLinear(nn.Linear):
    """``nn.Linear`` that multiplies by a packed copy of its weight (see ``pack``) at inference."""

    model_class = nn.Linear
    engine_state = ("packed",)
    packed: tuple[Tensor, Tensor] | None = None  # (panels, scales), made by pack()

    def pack(self, precision: str) -> None:
        """Pack the current weight as it is (``precision`` "fp32") or as int8 ("int8"); later products
        read the copy. A weight that is not float32 is left to PyTorch's product."""
        self.packed = (decoding_ops.pack(self.weight.detach(), precision == "int8")
                       if self.weight.dtype == torch.float32 else None)

    def applies(self, x: Tensor) -> bool:
        return (self.packed is not None and _inference_time(x) and x.dim() >= 1
                and x.shape[-1] == self.in_features > 0)

    def forward(self, x: Tensor, relu: bool = False) -> Tensor:
        if self.applies(x):
            return _packed_linear(x, *self.packed, self.bias, self.out_features, relu)
        y = super().forward(x)
        return F.relu(y) if relu else y


class DecodingFeedForward(FeedForward):
    """FFN whose ReLU runs inside the packed product of ``linear1``."""

    model_class = FeedForward

    def forward(self, x: Tensor) -> Tensor:
        if self.activation is F.relu and isinstance(self.linear1, PackedLinear) and self.linear1.applies(x):
            return self.linear2(self.dropout(self.linear1(x, relu=True)))
        return super().forward(x)


def _explicit_small(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
    """Attention for a few low-precision queries per row, explicitly (PyTorch's fused CPU kernel
    is slower there)."""
    return scaled_dot_product_attention(q, k, v, mask=mask, causal=causal, need_weights=True)[0]


class DecodingSelfAttention(SelfAttention):
    """Self-attention whose inference calls with a few queries per row take the decoding kernel."""

    model_class = SelfAttention

    def forward(self, x: Tensor, *, mask: Tensor | None = None, causal: bool = False, cache: KVCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if need_weights or self.training or torch.is_grad_enabled() or x.dim() != 3 or x.shape[1] > MAX_DECODE_QUERIES:
            return super().forward(x, mask=mask, causal=causal, cache=cache, need_weights=need_weights)
        self.check_input(x, "self-attention input")
        q, k, v = (self.split_heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
        if cache is not None:
            k, v = cache.append(k, v)
        if decoding_ops.fits_decode_attention(q, k, v, mask):
            return self.out_proj(_decode_attention(q, k, v, mask, causal)), None
        return self.out_proj(self.merge_heads(_explicit_small(q, k, v, mask, causal))), None


class DecodingCrossAttention(CrossAttention):
    """Encoder-decoder attention whose inference calls with a few queries per row take the
    decoding kernel, the beams of a sentence reading its keys in place."""

    model_class = CrossAttention

    def forward(self, x: Tensor, memory: Tensor | None = None, *, mask: Tensor | None = None,
                memory_kv: StaticKV | None = None, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if (need_weights or self.training or torch.is_grad_enabled() or x.dim() != 3
                or x.shape[1] > MAX_DECODE_QUERIES or (memory_kv is None and memory is None)):
            return super().forward(x, memory, mask=mask, memory_kv=memory_kv, need_weights=need_weights)
        self.check_input(x, "decoder input to cross-attention")
        kv = memory_kv if memory_kv is not None else self.memory_kv(memory)
        q = self.split_heads(self.q_proj(x))
        if decoding_ops.fits_decode_attention(q, kv.k, kv.v, mask):
            return self.out_proj(_decode_attention(q, kv.k, kv.v, mask, False)), None
        return super().forward(x, memory, mask=mask, memory_kv=kv, need_weights=False)


class DecodingDecoderLayer(DecoderLayer):
    """A decoder layer whose incremental steps (one new position per row, float32, ReLU FFN,
    packed weights) run in one kernel call."""

    model_class = DecoderLayer

    def forward(self, x: Tensor, memory: Tensor | None, *, memory_mask: Tensor | None = None,
                self_cache: KVCache | None = None, memory_kv: StaticKV | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None, Tensor | None]:
        if not need_weights and self._step_applies(x, self_cache, memory_kv, memory_mask):
            return self._step(x, self_cache, memory_kv, memory_mask), None, None
        return super().forward(x, memory, memory_mask=memory_mask, self_cache=self_cache, memory_kv=memory_kv,
                               need_weights=need_weights)

    engine_state = ("step_weights",)
    step_weights: list[Tensor | None] | None = None  # what the kernel reads, set by prepare()

    def prepare(self) -> None:
        """Collect the packed weights, biases and LayerNorm parameters the step kernel reads (after
        the linear layers were packed), or None where the layer does not fit the kernel."""
        linears = (self.self_attn.qkv_proj, self.self_attn.out_proj, self.cross_attn.q_proj,
                   self.cross_attn.out_proj, self.ffn.linear1, self.ffn.linear2)
        norms = (self.self_block.norm, self.cross_block.norm, self.ffn_block.norm)
        E = self.self_attn.d_model
        fits = (self.ffn.activation is F.relu
                and all(isinstance(lin, PackedLinear) and lin.packed is not None for lin in linears)
                and all(n.weight is not None and n.bias is not None and tuple(n.normalized_shape) == (E,)
                        and n.weight.dtype == torch.float32 for n in norms))
        self.step_weights = None
        if fits:
            weights: list[Tensor | None] = []
            for i, norm in enumerate(norms):
                for lin in linears[2 * i: 2 * i + 2]:
                    weights += [*lin.packed, lin.bias]
                weights += [norm.weight, norm.bias]
            self.step_weights = weights

    def _step_applies(self, x: Tensor, cache: KVCache | None, kv: StaticKV | None, mask: Tensor | None) -> bool:
        if self.step_weights is None or self.training or cache is None or kv is None or not _inference_time(x):
            return False
        keys = cache.key_buffer
        if keys is not None and not (keys.dtype == torch.float32 and keys.is_contiguous()):
            return False  # the kernel writes float32 rows into a contiguous buffer
        if not (x.dim() == 3 and x.shape[1] == 1 and x.is_contiguous()):
            return False
        B, _, E = x.shape
        H = self.cross_attn.n_heads
        return decoding_ops.keys_fit(B, H, E // H, kv.k, kv.v, mask)

    def _step(self, x: Tensor, cache: KVCache, kv: StaticKV, mask: Tensor | None) -> Tensor:
        B, _, E = x.shape
        H = self.self_attn.n_heads
        keys, values = cache.reserve(x.new_empty(B, H, 1, E // H), E // H)
        out = _decoder_layer_step(x, self.step_weights, keys, values, cache.length, kv.k, kv.v, mask, H,
                                  self.ffn.linear1.out_features, self.self_block.norm_first,
                                  self.self_block.norm.eps)
        cache.length += 1
        return out


class DecodingTransformer(Transformer):
    """A Transformer prepared for decoding: ``best_tokens`` picks each row's k best tokens."""

    model_class = Transformer

    @staticmethod
    def best_tokens(logits: Tensor, k: int) -> tuple[Tensor, Tensor] | None:
        """``(log-probabilities (N, k), ids (N, k))`` of the k best tokens per row of float32 CPU
        logits without autograd, best first (ties: smaller id first); None elsewhere."""
        if torch.is_grad_enabled() or not decoding_ops.fits_best_tokens(logits, k):
            return None
        return _best_tokens(logits, k)


DECODING_CLASSES: dict[type, type] = {
    nn.Linear: PackedLinear,
    FeedForward: DecodingFeedForward,
    SelfAttention: DecodingSelfAttention,
    CrossAttention: DecodingCrossAttention,
    DecoderLayer: DecodingDecoderLayer,
    Transformer: DecodingTransformer,
}


def prepare_for_decoding(model: nn.Module, *, precision: str = "fp32") -> Swaps:
    """Swap ``model``'s modules (in place) for the decoding kernels' subclasses and pack its linear
    weights (``precision`` "fp32", or "int8": int8 weights with float32 activations and sums).
    Returns the swaps (``.undo()`` restores the model's classes). Nothing is swapped where the
    kernels are unavailable; for "int8" that is an error (there is no int8 without them). A model
    prepared already is refused (its packed copies belong to whoever prepared it)."""
    if precision not in PACKED_PRECISIONS:
        raise UserError(f"precision must be one of {PACKED_PRECISIONS}, got {precision!r}")
    if any(isinstance(module, PackedLinear) for module in model.modules()):
        raise UserError("this model is already prepared for decoding (e.g. held by another Translator): "
                         "undo those swaps (Translator.close()) first, or prepare a copy")
    if not build.available():
        if precision == "int8":
            raise RuntimeError(f"int8 decoding needs the compiled CPU kernels (a C compiler, and "
                               f"{build.ENV_SWITCH} not 0)")
        return Swaps()
    swaps = swap(model, DECODING_CLASSES)
    for module in model.modules():
        if isinstance(module, PackedLinear):
            module.pack(precision)
    for module in model.modules():
        if isinstance(module, DecodingDecoderLayer):
            module.prepare()
    return swaps
