"""Export to ONNX: an encoder graph and a one-step decoder graph with a key/value cache.

``encoder.onnx``
    inputs ``src_ids (B, S)`` int64, ``src_mask (B, S)`` bool (True = real token);
    outputs ``cross_keys``, ``cross_values`` ``(L, B, H, S, D)``: every decoder layer's
    encoder-decoder keys and values, projected once (what our ``StaticKV`` holds).
``decoder_step.onnx``
    inputs ``input_ids (B, 1)`` int64 (the newest token), ``src_mask``, ``cross_keys``,
    ``cross_values``, ``past_keys``, ``past_values`` ``(L, B, H, P, D)`` (P = 0 at the first step);
    outputs ``logits (B, V)`` for the next token and ``present_keys``, ``present_values``
    ``(L, B, H, P + 1, D)``, the inputs of the next step. The step's position is P.

``onnx_config.json`` records the special ids and the cache shape; :func:`greedy_decode_onnx`
decodes with ONNX Runtime from these files alone. The graphs are traced from the model's own
modules (``torch.onnx.export``), with an explicit softmax attention in the step graph.

Letters: B batch, S source length, P cached target positions, L decoder layers, H heads,
D head size, E d_model, V target vocabulary.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor, nn

from transformer.interop._common import InteropError, require, staged_output
from transformer.interop.hf import copy_tokenizer_files, load_run
from transformer.model.masks import key_mask_for_attention
from transformer.model import Transformer

OPSET = 17
CONFIG_FILE = "onnx_config.json"


class EncoderGraph(nn.Module):
    """src ids + mask -> the decoder layers' cross-attention keys and values ``(L, B, H, S, D)``."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
        memory = self.model.encoder(src_ids, src_mask)[0]  # (B, S, E)
        kvs = [layer.cross_attn.memory_kv(memory) for layer in self.model.decoder.layers]
        return torch.stack([kv.k for kv in kvs]), torch.stack([kv.v for kv in kvs])


class DecoderStepGraph(nn.Module):
    """One decoder step: the newest token, the caches -> next-token logits and the grown self-attention cache."""

    def __init__(self, model: Transformer, positions: int) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("table", model.decoder.embed.positions(positions).detach().clone(), persistent=False)  # (N, E)

    def forward(self, input_ids: Tensor, src_mask: Tensor, cross_keys: Tensor, cross_values: Tensor,
                past_keys: Tensor, past_values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        dec = self.model.decoder
        step = torch.arange(past_keys.shape[3], past_keys.shape[3] + 1, device=input_ids.device)  # (1,) = P
        x = dec.embed.tokens(input_ids) + self.table.index_select(0, step).unsqueeze(0)  # (B, 1, E)
        memory_mask = key_mask_for_attention(src_mask)  # (B, 1, 1, S)
        keys, values = [], []
        for i, layer in enumerate(dec.layers):
            attn = layer.self_attn
            q, k, v = (attn.split_heads(t) for t in attn.qkv_proj(layer.self_block.pre(x)).chunk(3, dim=-1))  # (B, H, 1, D)
            k, v = torch.cat([past_keys[i], k], dim=2), torch.cat([past_values[i], v], dim=2)  # (B, H, P + 1, D)
            keys.append(k)
            values.append(v)
            x = layer.self_block.post(x, attn.out_proj(attn.merge_heads(_attend(q, k, v, None))))
            cross = layer.cross_attn
            q = cross.split_heads(cross.q_proj(layer.cross_block.pre(x)))
            x = layer.cross_block.post(x, cross.out_proj(cross.merge_heads(_attend(q, cross_keys[i], cross_values[i], memory_mask))))
            x = layer.ffn_block.post(x, layer.ffn(layer.ffn_block.pre(x)))
        if dec.final_norm is not None:
            x = dec.final_norm(x)
        return self.model.output(x)[:, -1], torch.stack(keys), torch.stack(values)


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(q k^T / sqrt(D)) v with a bool mask (True = may attend); q ``(B, H, 1, D)``."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, 1, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def export_onnx(run_dir: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write ``encoder.onnx``, ``decoder_step.onnx``, ``onnx_config.json`` and our tokenizer file(s) into ``out``."""
    require("onnx", "export --format onnx")
    model, vocab = load_run(run_dir)
    cfg = model.config
    positions = cfg.max_positions if cfg.positional == "learned" else max(cfg.max_positions, 1024)
    model.encoder.embed.positions(positions)  # grow a sinusoid table up front: no resizing inside the graph
    L, H, D = cfg.n_decoder_layers, cfg.n_heads, cfg.head_dim
    src = torch.full((2, 5), vocab.src.unk_id, dtype=torch.long)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    with torch.no_grad():
        cross_k, cross_v = EncoderGraph(model)(src, mask)
    past = torch.zeros(L, 2, H, 3, D)
    config = {"bos_id": vocab.tgt.bos_id, "eos_id": vocab.tgt.eos_id, "pad_id": vocab.src.pad_id,
              "n_layers": L, "n_heads": H, "head_dim": D, "max_positions": positions, "opset": OPSET}
    with staged_output(out) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer and deprecation chatter
        try:
            torch.onnx.export(
                EncoderGraph(model), (src, mask), str(tmp / "encoder.onnx"), dynamo=False, opset_version=OPSET,
                input_names=["src_ids", "src_mask"], output_names=["cross_keys", "cross_values"],
                dynamic_axes={"src_ids": {0: "B", 1: "S"}, "src_mask": {0: "B", 1: "S"},
                              "cross_keys": {1: "B", 3: "S"}, "cross_values": {1: "B", 3: "S"}})
            torch.onnx.export(
                DecoderStepGraph(model, positions), (src[:, :1], mask, cross_k, cross_v, past, past.clone()),
                str(tmp / "decoder_step.onnx"), dynamo=False, opset_version=OPSET,
                input_names=["input_ids", "src_mask", "cross_keys", "cross_values", "past_keys", "past_values"],
                output_names=["logits", "present_keys", "present_values"],
                dynamic_axes={"input_ids": {0: "B"}, "src_mask": {0: "B", 1: "S"},
                              "cross_keys": {1: "B", 3: "S"}, "cross_values": {1: "B", 3: "S"},
                              "past_keys": {1: "B", 3: "P"}, "past_values": {1: "B", 3: "P"},
                              "logits": {0: "B"}, "present_keys": {1: "B", 3: "P1"}, "present_values": {1: "B", 3: "P1"}})
        except Exception as err:  # the exporter raises many types; name the failure and keep nothing
            raise InteropError(f"ONNX export failed: {err}") from None
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        copy_tokenizer_files(Path(run_dir), tmp)
    return Path(out)


def greedy_decode_onnx(onnx_dir: str | os.PathLike[str], src_ids: Sequence[Sequence[int]], *,
                       max_len_a: float = 1.0, max_len_b: int = 50) -> list[list[int]]:
    """Greedy decoding with ONNX Runtime: per sentence the output ids without ``<s>``/``</s>``.

    Each sentence stops at ``</s>`` or after ``max_len_a * source_length + max_len_b`` tokens, as
    in :func:`transformer.decoding.greedy_search`.
    """
    ort = require("onnxruntime", "ONNX decoding")
    import numpy as np

    onnx_dir = Path(onnx_dir)
    config = json.loads((onnx_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    encoder = ort.InferenceSession(str(onnx_dir / "encoder.onnx"), options, providers=["CPUExecutionProvider"])
    step = ort.InferenceSession(str(onnx_dir / "decoder_step.onnx"), options, providers=["CPUExecutionProvider"])
    B, S = len(src_ids), max(len(s) for s in src_ids)
    src = np.full((B, S), config["pad_id"], dtype=np.int64)
    mask = np.zeros((B, S), dtype=bool)
    for row, ids in enumerate(src_ids):
        src[row, : len(ids)], mask[row, : len(ids)] = ids, True
    limits = np.maximum((mask.sum(1) * max_len_a + max_len_b).astype(np.int64), 1)
    cross_k, cross_v = encoder.run(None, {"src_ids": src, "src_mask": mask})
    past_shape = (config["n_layers"], B, config["n_heads"], 0, config["head_dim"])
    past_k, past_v = np.zeros(past_shape, np.float32), np.zeros(past_shape, np.float32)
    token = np.full((B, 1), config["bos_id"], dtype=np.int64)
    out: list[list[int]] = [[] for _ in range(B)]
    done = np.zeros(B, dtype=bool)
    for t in range(int(limits.max())):
        logits, past_k, past_v = step.run(None, {"input_ids": token, "src_mask": mask, "cross_keys": cross_k,
                                                 "cross_values": cross_v, "past_keys": past_k, "past_values": past_v})
        nxt = logits.argmax(-1)
        for row in np.flatnonzero(~done):
            if nxt[row] == config["eos_id"]:
                done[row] = True
            else:
                out[row].append(int(nxt[row]))
                done[row] = t + 1 >= limits[row]
        if done.all():
            break
        token = nxt.reshape(B, 1).astype(np.int64)
    return out
