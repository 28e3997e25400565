"""Export to CTranslate2 through its model-spec API (``ctranslate2.specs.TransformerSpec``).

CTranslate2's Transformer spec holds the same parts as ours, even the same fusions: a
self-attention layer's ``linear[0]`` is our fused ``qkv_proj``, a cross-attention layer's
``linear[1]`` our fused ``kv_proj``. Our switches map onto it: ``norm_first`` -> ``pre_norm``,
the position table (either sinusoid layout, or a learned table) is written out explicitly,
``scale_embeddings``, the output bias, the activation, and the decoder start token (the
tokenizer's ``bos_id``). Source and target vocabularies are the tokenizers' pieces in id order,
so a token list we feed CTranslate2 names exactly the ids our model sees.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from transformer.interop._common import CTRANSLATE2_TYPES, InteropError, require, staged_output
from transformer.interop.hf import copy_tokenizer_files, load_run, piece_list
from transformer.model import Transformer
from transformer.model.embeddings import sinusoidal_table
from transformer.text import Vocabularies
from transformer.errors import UserError

MIN_POSITIONS = 1024  # rows of the sinusoid table written out (at least; max_positions if larger)


def _np(tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy()


def _linear(spec, linear) -> None:
    spec.weight = _np(linear.weight)
    if linear.bias is not None:
        spec.bias = _np(linear.bias)


def _norm(spec, norm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _positions(model: Transformer, stack) -> np.ndarray:
    cfg = model.config
    if cfg.positional == "learned":
        return _np(stack.embed.positions.weight)
    return sinusoidal_table(max(cfg.max_positions, MIN_POSITIONS), cfg.d_model, layout=cfg.sinusoid_layout).numpy()


def build_spec(model: Transformer, vocab: Vocabularies):
    """The ``ctranslate2.specs.TransformerSpec`` of ``model`` with its vocabularies and special tokens."""
    require("ctranslate2", "export --format ctranslate2")
    from ctranslate2.specs import common_spec, transformer_spec

    activations = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                   "silu": common_spec.Activation.SWISH}
    cfg = model.config
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads, pre_norm=cfg.norm_first,
        activation=activations[cfg.activation])
    for side, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        s = getattr(spec, side)
        (s.embeddings[0] if side == "encoder" else s.embeddings).weight = _np(stack.embed.tokens.weight)
        s.scale_embeddings = bool(cfg.scale_embeddings)
        s.position_encodings.encodings = _positions(model, stack)
        if cfg.norm_first:
            _norm(s.layer_norm, stack.final_norm)
    for s, layer in zip(spec.encoder.layer, model.encoder.layers):
        _linear(s.self_attention.linear[0], layer.self_attn.qkv_proj)
        _linear(s.self_attention.linear[1], layer.self_attn.out_proj)
        _norm(s.self_attention.layer_norm, layer.attn_block.norm)
        _ffn(s.ffn, layer)
    for s, layer in zip(spec.decoder.layer, model.decoder.layers):
        _linear(s.self_attention.linear[0], layer.self_attn.qkv_proj)
        _linear(s.self_attention.linear[1], layer.self_attn.out_proj)
        _norm(s.self_attention.layer_norm, layer.self_block.norm)
        _linear(s.attention.linear[0], layer.cross_attn.q_proj)
        _linear(s.attention.linear[1], layer.cross_attn.kv_proj)
        _linear(s.attention.linear[2], layer.cross_attn.out_proj)
        _norm(s.attention.layer_norm, layer.cross_block.norm)
        _ffn(s.ffn, layer)
    _linear(spec.decoder.projection, model.output)

    src_pieces, tgt_pieces = piece_list(vocab.src), piece_list(vocab.tgt)
    for side, pieces in (("source", src_pieces), ("target", tgt_pieces)):
        if len(set(pieces)) != len(pieces):
            raise InteropError(f"the {side} vocabulary holds a token string twice; CTranslate2 needs unique tokens")
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    spec.config.bos_token = spec.config.decoder_start_token = tgt_pieces[vocab.tgt.bos_id]
    spec.config.eos_token = tgt_pieces[vocab.tgt.eos_id]
    spec.config.unk_token = tgt_pieces[vocab.tgt.unk_id]
    spec.config.layer_norm_epsilon = float(cfg.layer_norm_eps)
    return spec


def _ffn(spec, layer) -> None:
    _linear(spec.linear_0, layer.ffn.linear1)
    _linear(spec.linear_1, layer.ffn.linear2)
    _norm(spec.layer_norm, layer.ffn_block.norm)


def weight_type(precision: str | None) -> str | None:
    """CTranslate2's weight type of ``precision`` (None: as trained)."""
    if precision is not None and precision not in CTRANSLATE2_TYPES:
        raise UserError(f"precision must be one of {tuple(CTRANSLATE2_TYPES)}, got {precision!r}")
    return CTRANSLATE2_TYPES.get(precision)


def optimized_spec(model: Transformer, vocab: Vocabularies, quantization: str | None):
    """The validated spec of ``model`` with its weights in ``quantization`` (CTranslate2's name of
    a weight type, None: as trained), ready to ``save``; InteropError if CTranslate2 refuses it."""
    spec = build_spec(model, vocab)
    try:
        spec.validate()
        spec.optimize(quantization=quantization)
    except (ValueError, TypeError) as err:
        raise InteropError(f"CTranslate2 refused the model: {err}") from None
    return spec


def export_ctranslate2(run_dir: str | os.PathLike[str], out: str | os.PathLike[str], *,
                       precision: str | None = None) -> Path:
    """Write ``out``, a CTranslate2 model directory (``ctranslate2.Translator(out)``), plus our tokenizer file(s).

    ``precision``: the weights' number format, ``fp32``, ``bf16``, ``int8`` or ``fp16``, or one
    of the types only CTranslate2 runs (``int8_float32``, ``int8_float16``, ``int8_bfloat16``,
    ``int16``; ``CTRANSLATE2_TYPES``); None keeps float32.
    Feed it our tokenizer's pieces (``vocab.src.pieces(vocab.src.encode(text))``) and read back
    target pieces; with float32 weights greedy and beam outputs equal ours token for token.
    """
    quantization = weight_type(precision)
    model, vocab = load_run(run_dir)
    spec = optimized_spec(model, vocab, quantization)
    with staged_output(out) as tmp:
        spec.save(str(tmp))
        copy_tokenizer_files(Path(run_dir), tmp)
    return Path(out)
