"""The CUDA engine's decoder steps: buffers allocated once per batch, shapes fixed, and the step
captured in a CUDA graph and replayed.

A step of the model's decoder (``Transformer.decode`` with its cache) is a few dozen small
kernels per layer, each queued by the host through Python; with a few thousand rows a GPU runs
them faster than the host queues them, so the host's time is the step's. ``StaticSteps`` does the
same arithmetic over buffers that never move:

* the self-attention's keys and values ``(rows, H, positions, D)`` per layer, allocated for the
  batch's longest output. A step writes its position there (the position is a tensor on the
  device) and attends over the first ``P`` positions under a bias that hides those not written
  yet; ``P`` is rounded up to 32, 64, 128, ... so that a few shapes serve every step;
* two such sets: a reorder (beams taking their parents' places, finished sentences leaving)
  copies the positions stored so far of the rows it keeps from one set into the other, never
  the unused capacity and never in place;
* the memory's keys and values, and its padding as an additive bias, made once per batch (the
  model's attention turns its bool mask into a bias in every layer at every step). The bias
  rows are stored padded to 16 elements, so the memory-efficient attention kernel reads them
  as they are instead of copying them at every call;
* the beams of a sentence read its memory in place: the queries of its G beams are a view
  ``(M, H, G, D)`` of the projection's output, and the output a view back, with no copy;
* the logits written into one buffer that every shape's step shares.

With every shape fixed, a step can be captured in a CUDA graph: the second time a shape runs it
is captured (the first runs eagerly on the capture stream, which warms the libraries up for it),
and from then on one replay stands for the hundreds of launches. A shape is (rows, memory rows,
positions attended, key set); rows are rounded up to the batch's first rows halved a number of
times (the rows past the last real one run, unread), so a batch captures a few graphs, not one
per step. Graphs are used on CUDA only, without autocast; where a capture fails, the steps go
on eagerly with one warning. ``tests/test_static_steps.py`` checks on the CPU (eagerly, and
with captures stood in for by the step functions they would replay) that the steps give the
model's tokens; ``tests/test_cuda_graphs.py`` checks the graphs on a GPU.

Letters: M memory rows (sentences), G rows per memory row (beams), N rows, S source length,
P positions attended, H heads, D head size, E model size, V vocabulary.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.cpu.swap import Swaps, swap
from transformer.model.layers import DecoderLayer
from transformer.model.transformer import Transformer

ALIGN = 16  # bias rows padded to a multiple of this many elements (the attention kernels' alignment)
FIRST_POSITIONS = 32  # the fewest positions a step attends over; then doubled up to the capacity

Key = tuple[int, int, int, int]  # (rows, memory rows, positions attended, key set)


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


class StaticSteps:
    """A batch's decoder steps over buffers allocated once (module doc); what ``DecoderSteps`` does
    through ``model.decode``, for a ``Transformer`` in evaluation mode.

    Args:
        model: the Transformer.
        memory: the encoder's output ``(M, S, E)``; src_mask: ``(M, S)`` bool, True = real token
            (every sentence with at least one).
        steps: the most steps the batch takes.
        rows: the most rows a step runs (M x beams).
        graphs: capture the steps in CUDA graphs (where the memory is on a device of
            ``GRAPH_DEVICES``).
    """

    GRAPH_DEVICES = ("cuda",)

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor, *, steps: int, rows: int,
                 graphs: bool = True) -> None:
        decoder = model.decoder
        H, D = decoder.layers[0].self_attn.n_heads, decoder.layers[0].self_attn.head_dim
        M, S, _ = memory.shape
        dtype, device = memory.dtype, memory.device
        self.model, self.steps = model, steps
        self.capacity = _round_up(steps, ALIGN)
        self.max_rows, self.first_memory_rows = max(rows, M), M
        self.m = M  # memory rows now
        self.length = 0  # positions written
        self.key_set = 0  # which of the two sets of keys and values holds the rows now
        self.tokens = torch.zeros(self.max_rows, 1, dtype=torch.long, device=device)  # the step's input
        # The step's output, one buffer for every shape: a graph's own output would stay allocated
        # with it, and a batch's graphs would hold (rows x vocabulary) logits each.
        self.logits_buffer = torch.zeros(self.max_rows, model.config.tgt_vocab_size, dtype=dtype, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # the step's position
        self.index = torch.arange(self.capacity, device=device)
        self.table = decoder.embed.positions(steps)  # (steps, E): every position's encoding
        self.keys, self.values = ([[torch.zeros(self.max_rows, H, self.capacity, D, dtype=dtype, device=device)
                                    for _ in decoder.layers] for _ in range(2)] for _ in range(2))
        projected = [layer.cross_attn.memory_kv(memory) for layer in decoder.layers]
        self.memory_keys = [kv.k.contiguous() for kv in projected]  # (M, H, S, D)
        self.memory_values = [kv.v.contiguous() for kv in projected]
        bias = torch.zeros(M, 1, 1, _round_up(S, ALIGN), dtype=dtype, device=device)
        bias[:, 0, 0, :S].masked_fill_(~src_mask, -math.inf)
        self.memory_bias = bias[..., :S]  # (M, 1, 1, S): 0 for a real token, -inf for padding
        self.graphs = graphs and device.type in self.GRAPH_DEVICES
        self._functions: dict[Key, Callable[[], Tensor]] = {}
        self._replays: dict[Key, Callable[[], Tensor]] = {}
        self._warm: set[Key] = set()
        self.captured = self.replayed = 0  # graphs captured and replays run (for tests and benchmarks)
        if self.graphs and device.type == "cuda":
            self._stream = torch.cuda.Stream(device)
            self._pool = torch.cuda.graph_pool_handle()

    # ------------------------------------------------------------------------------------------
    def logits(self, tokens: Tensor) -> Tensor:
        """One step: each row's next-token logits ``(N, V)`` after its token ``tokens (N,)``."""
        n = tokens.shape[0]
        if self.length >= self.steps:
            raise ValueError(f"the batch's steps hold {self.steps} positions, all written")
        if n > self.max_rows or n % self.m:
            raise ValueError(f"{n} rows cannot share {self.m} memory rows within {self.max_rows} rows")
        group = n // self.m
        m = self._memory_rows_run(self.m)
        if m * group > self.max_rows:
            m = self.m
        positions = FIRST_POSITIONS  # attended: this step's and those before it, rounded up
        while positions < self.length + 1:
            positions *= 2
        positions = min(positions, self.capacity)
        self.tokens[:n, 0].copy_(tokens)
        self.position.fill_(self.length)
        out = self._run((m * group, m, positions, self.key_set))
        self.length += 1
        return out[:n]

    def reorder(self, index: Tensor, memory_index: Tensor | None = None) -> None:
        """Keep rows ``index`` and, where given, memory rows ``memory_index``: the stored positions of
        the kept rows are copied into the other set of keys and values."""
        if memory_index is not None:  # sentences left: rarely, so in place through a copy
            m = memory_index.numel()
            for x in (*self.memory_keys, *self.memory_values, self.memory_bias):
                x[:m] = x.index_select(0, memory_index)
            self.m = m
        if index.numel() % self.m:
            raise ValueError(f"{index.numel()} rows cannot share {self.m} memory rows")
        if self.length:
            source, target = self.key_set, 1 - self.key_set
            n, stored = index.numel(), self.length
            for buffers in (self.keys, self.values):
                for before, after in zip(buffers[source], buffers[target]):
                    torch.index_select(before[:, :, :stored], 0, index, out=after[:n, :, :stored])
            self.key_set = target

    # ------------------------------------------------------------------------------------------
    def _memory_rows_run(self, m: int) -> int:
        """The memory rows a step runs for ``m`` real ones: the batch's first halved while that
        still holds them all."""
        run = self.first_memory_rows
        while (half := -(-run // 2)) >= m and half < run:
            run = half
        return run

    def _run(self, key: Key) -> Tensor:
        step = self._functions.get(key)
        if step is None:
            step = self._functions[key] = self._step_function(*key)
        if not self.graphs:
            return step()
        replay = self._replays.get(key)
        if replay is not None:
            self.replayed += 1
            return replay()
        if key not in self._warm:
            self._warm.add(key)
            return self._warm_up(step)
        try:
            replay = self._replays[key] = self._capture(step)
        except RuntimeError as err:
            self.graphs = False
            warnings.warn(f"capturing a decoding step in a CUDA graph failed ({err}); decoding goes on without graphs",
                          RuntimeWarning, stacklevel=2)
            return step()
        self.captured += 1
        self.replayed += 1
        return replay()

    def _warm_up(self, step: Callable[[], Tensor]) -> Tensor:
        """Run ``step`` on the capture stream (what PyTorch asks before a capture): a real step."""
        current = torch.cuda.current_stream(self.position.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            out = step()
        current.wait_stream(self._stream)
        out.record_stream(current)  # read on this stream: its memory is not reused before that
        return out

    def _capture(self, step: Callable[[], Tensor]) -> Callable[[], Tensor]:
        """``step`` captured in a CUDA graph on the capture stream: a function that replays it and
        returns its output. (``torch.cuda.graph`` would also wait for the device and empty the
        allocator's cache at every capture, several times a batch; the capture stream waits for
        this one instead, and other threads' CUDA calls are left alone.)"""
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream(self.position.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            graph.capture_begin(pool=self._pool, capture_error_mode="thread_local")
            try:
                out = step()
            finally:
                graph.capture_end()
        current.wait_stream(self._stream)

        def replay() -> Tensor:
            graph.replay()
            return out

        return replay

    def _step_function(self, rows: int, m: int, positions: int, key_set: int) -> Callable[[], Tensor]:
        """The step for ``rows`` rows reading ``m`` memory rows and ``positions`` positions of key set
        ``key_set``: a function of no arguments that reads only buffers fixed here (what a graph
        captures), so every call runs the same kernels on the same memory."""
        model, decoder = self.model, self.model.decoder
        group = rows // m
        tokens, position, table, index = self.tokens[:rows], self.position, self.table, self.index[:positions]
        memory_bias, logits = self.memory_bias[:m], self.logits_buffer[:rows]
        dtype = memory_bias.dtype
        layers = [(layer, keys[:rows], values[:rows], memory_keys[:m], memory_values[:m]) for layer, keys, values,
                  memory_keys, memory_values in zip(decoder.layers, self.keys[key_set], self.values[key_set],
                                                    self.memory_keys, self.memory_values)]

        def step() -> Tensor:
            # The positions after this step's are not written yet: one bias hides them in every layer.
            bias = torch.zeros(positions, dtype=dtype, device=index.device).masked_fill_(index > position, -math.inf)
            x = decoder.embed.tokens(tokens) + table.index_select(0, position).to(dtype)  # (rows, 1, E)
            x = decoder.embed.dropout(x)
            for layer, keys, values, memory_keys, memory_values in layers:
                x = _layer_step(layer, x, keys, values, position, bias.view(1, 1, 1, positions), memory_keys,
                                memory_values, memory_bias, group)
            if decoder.final_norm is not None:
                x = decoder.final_norm(x)
            return _project(model.output, x.view(rows, -1), logits)  # (rows, V)

        return step


def _project(output: nn.Module, x: Tensor, out: Tensor) -> Tensor:
    """The pre-softmax projection of ``x (N, E)``, written into ``out (N, V)`` where the layer is a
    plain ``nn.Linear`` (the product ``F.linear`` runs), else returned by the layer itself."""
    if type(output) is not nn.Linear:
        return output(x)
    if output.bias is None:
        return torch.mm(x, output.weight.t(), out=out)
    return torch.addmm(output.bias, x, output.weight.t(), out=out)


def _layer_step(layer: DecoderLayer, x: Tensor, keys: Tensor, values: Tensor, position: Tensor, bias: Tensor,
                memory_keys: Tensor, memory_values: Tensor, memory_bias: Tensor, group: int) -> Tensor:
    """``DecoderLayer.forward`` for one new position of every row ``x (N, 1, E)``, its key and value
    written at ``position`` of ``keys``/``values (N, H, capacity, D)``, attending over the first
    ``P`` positions (``bias (1, 1, 1, P)``) and over ``memory_keys``/``memory_values (M, H, S, D)``
    (``memory_bias (M, 1, 1, S)``), each memory row read by ``group`` consecutive rows."""
    attention, block = layer.self_attn, layer.self_block
    q, k, v = (attention.split_heads(t) for t in attention.qkv_proj(block.pre(x)).chunk(3, dim=-1))  # (N, H, 1, D)
    keys.index_copy_(2, position, k)
    values.index_copy_(2, position, v)
    P = bias.shape[-1]
    heads = F.scaled_dot_product_attention(q, keys[:, :, :P], values[:, :, :P], attn_mask=bias)
    x = block.post(x, attention.out_proj(attention.merge_heads(heads)))
    cross, block = layer.cross_attn, layer.cross_block
    M, H, _, D = memory_keys.shape
    q = cross.q_proj(block.pre(x)).view(M, group, H, D).transpose(1, 2)  # (M, H, G, D): a view, no copy
    heads = F.scaled_dot_product_attention(q, memory_keys, memory_values, attn_mask=memory_bias)  # (M, H, G, D)
    x = block.post(x, cross.out_proj(heads.transpose(1, 2).reshape(M * group, 1, H * D)))
    block = layer.ffn_block
    return block.post(x, layer.ffn(block.pre(x)))


class StaticStepsTransformer(Transformer):
    """A Transformer whose decoders run ``StaticSteps`` (``decoder_steps``, which
    ``transformer.decoding.steps`` asks for), with CUDA graphs where ``decoding_graphs`` is on."""

    model_class = Transformer
    engine_state = ("decoding_graphs",)
    decoding_graphs: bool = True

    def decoder_steps(self, memory: Tensor, src_mask: Tensor, *, steps: int, rows: int) -> StaticSteps | None:
        """The batch's ``StaticSteps``; None (the decoders' own steps) in training mode, with
        autograd, or under autocast."""
        if self.training or torch.is_grad_enabled() or torch.is_autocast_enabled(memory.device.type):
            return None
        return StaticSteps(self, memory, src_mask, steps=steps, rows=rows, graphs=self.decoding_graphs)


def accelerate_decoding(model: Transformer, *, graphs: bool = True) -> Swaps:
    """Give ``model`` (in place) the CUDA engine's decoder steps, captured in CUDA graphs where
    ``graphs`` (on CUDA only); ``.undo()`` of the returned swaps takes them back."""
    swaps = swap(model, {Transformer: StaticStepsTransformer})
    for module in model.modules():
        if isinstance(module, StaticStepsTransformer):
            module.decoding_graphs = graphs
    return swaps
