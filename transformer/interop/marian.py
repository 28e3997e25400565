"""Hugging Face Marian (opus-mt) <-> our Transformer: the config and weight-name mapping.

A Marian model is the paper's post-LN encoder-decoder with a handful of choices that are all
switches of :class:`~transformer.config.ModelConfig`, so the mapping is a renaming:

=============================================  ===========================================
Marian (``MarianConfig`` / state dict)          ours
=============================================  ===========================================
sines then cosines in the position table        ``sinusoid_layout="concat"``
``scale_embedding``                             ``scale_embeddings``
``share_encoder_decoder_embeddings``            ``share_embeddings``
``tie_word_embeddings``                         ``tie_output``
``final_logits_bias``                           ``output_bias=True`` (``output.bias``)
``activation_function`` swish / gelu / relu     ``activation`` silu / gelu / relu
``vocab_size`` / ``decoder_vocab_size``         ``src_vocab_size`` / ``tgt_vocab_size``
``q_proj``, ``k_proj``, ``v_proj``              one fused ``qkv_proj`` (rows stacked q, k, v)
encoder-attention ``k_proj``, ``v_proj``        one fused ``cross_attn.kv_proj``
``decoder_start_token_id`` (``<pad>``)          the tokenizer's ``start_token`` (``bos_id``)
source ``... </s>``                             the source tokenizer's ``append_eos``
=============================================  ===========================================

A model trained here with the paper's interleaved positions is exported exactly by permuting
the d_model axis of every tensor on the residual stream (:func:`to_concat_layout`): LayerNorm,
attention and the feed-forward network commute with a permutation of that axis, so the
permuted model with sines-then-cosines computes the same function. The export also records our
config in ``config.json`` (``OUR_CONFIG_KEY``), and the import permutes back
(:func:`as_original`), so a run exported and imported again has its own config and weights, bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from transformer.config import ModelConfig
from transformer.interop._common import InteropError
from transformer.model import Transformer

SUPPORTED_ARCHITECTURE = "MarianMTModel"
HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}  # Marian name -> ours
OUR_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "swish"}
LAYER_NORM_EPS = 1e-5  # Marian's nn.LayerNorm default
# The config.json key under which export --format hf records our ModelConfig, so import-hf gives
# back the run exactly (transformers keeps unknown config keys when it loads and saves a model).
OUR_CONFIG_KEY = "transformer_model_config"
# The run's own settings (run_config.json: its languages, its data and training recipe), which the
# import writes back beside the model so that the run translates, serves and fine-tunes as before.
OUR_RUN_KEY = "transformer_run_config"


# ------------------------------------------------------------------------------------------------
# Configs.


def config_from_marian(hf: Any) -> ModelConfig:
    """Our ``ModelConfig`` for a ``transformers`` ``MarianConfig``; InteropError for what we cannot run."""
    architectures = list(getattr(hf, "architectures", None) or [SUPPORTED_ARCHITECTURE])
    if getattr(hf, "model_type", None) != "marian":
        raise InteropError(f"not a Marian model: model_type is {getattr(hf, 'model_type', None)!r} "
                           f"(architectures {architectures}); import-hf supports {SUPPORTED_ARCHITECTURE}")
    if SUPPORTED_ARCHITECTURE not in architectures:
        raise InteropError(f"unsupported architecture {architectures[0]!r}: import-hf supports {SUPPORTED_ARCHITECTURE} "
                           "(an encoder-decoder with a language-model head)")
    if hf.encoder_attention_heads != hf.decoder_attention_heads or hf.encoder_ffn_dim != hf.decoder_ffn_dim:
        raise InteropError("encoder and decoder differ in heads or feed-forward size "
                           f"({hf.encoder_attention_heads}/{hf.decoder_attention_heads} heads, "
                           f"{hf.encoder_ffn_dim}/{hf.decoder_ffn_dim} d_ff); our layers share one size")
    if hf.activation_function not in HF_ACTIVATIONS:
        raise InteropError(f"unsupported activation {hf.activation_function!r}; supported: {sorted(HF_ACTIVATIONS)}")
    for flag in ("normalize_before", "normalize_embedding", "add_final_layer_norm"):
        if getattr(hf, flag, False):
            raise InteropError(f"unsupported Marian variant: {flag}=True (Marian models are post-LN without "
                               "an embedding LayerNorm)")
    shared = bool(hf.share_encoder_decoder_embeddings)
    try:
        return ModelConfig(
            src_vocab_size=hf.vocab_size, tgt_vocab_size=hf.vocab_size if shared else hf.decoder_vocab_size,
            d_model=hf.d_model, n_heads=hf.encoder_attention_heads, d_ff=hf.encoder_ffn_dim,
            n_encoder_layers=hf.encoder_layers, n_decoder_layers=hf.decoder_layers,
            dropout=float(hf.dropout), attention_dropout=float(hf.attention_dropout),
            activation_dropout=float(hf.activation_dropout), activation=HF_ACTIVATIONS[hf.activation_function],
            norm_first=False, layer_norm_eps=LAYER_NORM_EPS, positional="sinusoidal", sinusoid_layout="concat",
            max_positions=hf.max_position_embeddings, scale_embeddings=bool(hf.scale_embedding),
            share_embeddings=shared, tie_output=bool(hf.tie_word_embeddings), output_bias=True,
            extra={"imported_from": "huggingface-marian", "decoder_start_token_id": hf.decoder_start_token_id},
        )
    except ValueError as err:
        raise InteropError(f"the Marian config does not describe a model we can build: {err}") from None


def marian_config_kwargs(cfg: ModelConfig, *, pad_id: int, eos_id: int, start_id: int) -> dict[str, Any]:
    """``MarianConfig`` keyword arguments for ``cfg`` (a post-LN model with sinusoidal positions)."""
    check_exportable(cfg)
    return dict(
        vocab_size=cfg.src_vocab_size, decoder_vocab_size=cfg.tgt_vocab_size, d_model=cfg.d_model,
        encoder_layers=cfg.n_encoder_layers, decoder_layers=cfg.n_decoder_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function=OUR_ACTIVATIONS[cfg.activation],
        dropout=cfg.dropout, attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout,
        max_position_embeddings=cfg.max_positions, scale_embedding=cfg.scale_embeddings,
        share_encoder_decoder_embeddings=cfg.share_embeddings, tie_word_embeddings=cfg.tie_output,
        pad_token_id=pad_id, eos_token_id=eos_id, decoder_start_token_id=start_id, bos_token_id=None,
        forced_eos_token_id=None, architectures=[SUPPORTED_ARCHITECTURE],
    )


def check_exportable(cfg: ModelConfig) -> None:
    """InteropError naming the setting if ``MarianMTModel`` cannot compute what ``cfg`` describes."""
    if cfg.norm_first:
        raise InteropError("a pre-LN model (norm_first=True) cannot be a MarianMTModel, which is post-LN; "
                           "export it with --format ctranslate2 or onnx instead")
    if cfg.positional != "sinusoidal":
        raise InteropError("a model with learned positions cannot be a MarianMTModel (its position table is "
                           "always sinusoidal); export it with --format ctranslate2 or onnx instead")
    if cfg.layer_norm_eps != LAYER_NORM_EPS:
        raise InteropError(f"MarianMTModel uses LayerNorm eps {LAYER_NORM_EPS}, the model has {cfg.layer_norm_eps}")
    if cfg.share_embeddings and not cfg.tie_output:
        raise InteropError("MarianMTModel ties the output projection whenever the embeddings are shared; "
                           "the model has share_embeddings=True with tie_output=False")


# ------------------------------------------------------------------------------------------------
# Weights. Each entry: our module prefix -> the Marian module prefixes whose rows it stacks.


def module_pairs(cfg: ModelConfig) -> Iterator[tuple[str, tuple[str, ...]]]:
    """``(our module, Marian modules)`` for every Linear and LayerNorm of the layers."""
    for i in range(cfg.n_encoder_layers):
        ours, hf = f"encoder.layers.{i}.", f"model.encoder.layers.{i}."
        yield ours + "self_attn.qkv_proj", tuple(f"{hf}self_attn.{p}_proj" for p in "qkv")
        yield ours + "self_attn.out_proj", (hf + "self_attn.out_proj",)
        yield ours + "attn_block.norm", (hf + "self_attn_layer_norm",)
        yield from _ffn_pairs(ours, hf)
    for i in range(cfg.n_decoder_layers):
        ours, hf = f"decoder.layers.{i}.", f"model.decoder.layers.{i}."
        yield ours + "self_attn.qkv_proj", tuple(f"{hf}self_attn.{p}_proj" for p in "qkv")
        yield ours + "self_attn.out_proj", (hf + "self_attn.out_proj",)
        yield ours + "self_block.norm", (hf + "self_attn_layer_norm",)
        yield ours + "cross_attn.q_proj", (hf + "encoder_attn.q_proj",)
        yield ours + "cross_attn.kv_proj", (hf + "encoder_attn.k_proj", hf + "encoder_attn.v_proj")
        yield ours + "cross_attn.out_proj", (hf + "encoder_attn.out_proj",)
        yield ours + "cross_block.norm", (hf + "encoder_attn_layer_norm",)
        yield from _ffn_pairs(ours, hf)


def _ffn_pairs(ours: str, hf: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    yield ours + "ffn.linear1", (hf + "fc1",)
    yield ours + "ffn.linear2", (hf + "fc2",)
    yield ours + "ffn_block.norm", (hf + "final_layer_norm",)


def _get(state: dict[str, Tensor], *names: str) -> Tensor:
    """The first of ``names`` present in a Marian state dict (tied weights are often saved once)."""
    for name in names:
        if name in state:
            return state[name]
    raise InteropError(f"the weights lack {names[0]!r}; they do not fit a {SUPPORTED_ARCHITECTURE} of this config")


def state_from_marian(state: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Our full state dict (tied entries included) from a Marian one; InteropError on a missing tensor."""
    ours: dict[str, Tensor] = {}
    for mine, theirs in module_pairs(cfg):
        for part in ("weight", "bias"):
            ours[f"{mine}.{part}"] = torch.cat([_get(state, f"{name}.{part}") for name in theirs], dim=0)
    shared = ("model.shared.weight",) if cfg.share_embeddings else ()
    src = _get(state, "model.encoder.embed_tokens.weight", *shared)
    tgt = _get(state, "model.decoder.embed_tokens.weight", *shared)
    ours["encoder.embed.tokens.weight"], ours["decoder.embed.tokens.weight"] = src, tgt
    ours["output.weight"] = tgt if cfg.tie_output else _get(state, "lm_head.weight")
    ours["output.bias"] = state.get("final_logits_bias", torch.zeros(1, cfg.tgt_vocab_size)).reshape(-1)
    return ours


def state_to_marian(model: Transformer) -> dict[str, Tensor]:
    """The Marian state dict of our model (positions excluded: Marian computes them)."""
    cfg, mine = model.config, model.state_dict()
    state: dict[str, Tensor] = {}
    for ours, theirs in module_pairs(cfg):
        for part in ("weight", "bias"):
            for name, chunk in zip(theirs, mine[f"{ours}.{part}"].chunk(len(theirs), dim=0)):
                state[f"{name}.{part}"] = chunk.clone()
    src, tgt = mine["encoder.embed.tokens.weight"], mine["decoder.embed.tokens.weight"]
    state["model.encoder.embed_tokens.weight"], state["model.decoder.embed_tokens.weight"] = src, tgt
    if cfg.share_embeddings:
        state["model.shared.weight"] = src
    state["lm_head.weight"] = mine["output.weight"]
    bias = mine.get("output.bias")
    state["final_logits_bias"] = (bias if bias is not None else torch.zeros(cfg.tgt_vocab_size)).reshape(1, -1)
    return state


# ------------------------------------------------------------------------------------------------
# Position layout.


def with_sinusoid_layout(model: Transformer, layout: str) -> Transformer:
    """An equivalent model whose sinusoid table has ``layout``: "concat" (sines, then cosines:
    Marian's) or "interleaved" (the paper's).

    Permutes the d_model axis everywhere it meets the residual stream: embedding columns,
    LayerNorm parameters, the input columns of every projection reading the stream and the
    output rows (and biases) of every projection writing to it. The model is returned
    unchanged if it already has ``layout`` (or learned positions).
    """
    cfg = model.config
    if cfg.positional != "sinusoidal" or cfg.sinusoid_layout == layout:
        return model
    # Dimension j of the concat layout is dimension to_concat[j] of the interleaved one; the
    # inverse permutation goes back.
    to_concat = torch.cat([torch.arange(0, cfg.d_model, 2), torch.arange(1, cfg.d_model, 2)])
    perm = to_concat if layout == "concat" else torch.argsort(to_concat)
    permuted = {}
    for name, t in model.state_dict().items():
        if ".norm." in name or "final_norm." in name:
            t = t[perm]  # LayerNorm gain and bias
        elif name.endswith(("out_proj.weight", "linear2.weight")):
            t = t[perm]  # rows written to the stream
        elif name.endswith(("out_proj.bias", "linear2.bias")):
            t = t[perm]
        elif name.endswith(("tokens.weight", "qkv_proj.weight", "q_proj.weight", "kv_proj.weight",
                            "linear1.weight")) or name == "output.weight":
            t = t[:, perm]  # columns read from the stream
        permuted[name] = t
    out = Transformer(cfg.replace(sinusoid_layout=layout))
    out.load_state_dict(permuted)
    return out.eval()


def to_concat_layout(model: Transformer) -> Transformer:
    """An equivalent model whose sinusoid table is sines-then-cosines (Marian's layout)."""
    return with_sinusoid_layout(model, "concat")


# ------------------------------------------------------------------------------------------------
# Round trip: export --format hf records our config, import-hf restores it.


def original_config(hf: Any, cfg: ModelConfig) -> ModelConfig | None:
    """The :class:`ModelConfig` an export recorded in ``config.json`` (key ``OUR_CONFIG_KEY``),
    or None if there is none or it does not describe the Marian model ``cfg`` read from the same file.

    Marian has no word for two of our switches, the paper's interleaved sinusoids and a
    projection without bias; everything else must agree, so a ``config.json`` edited after the
    export (or a foreign key of that name) is read as a plain Marian config.
    """
    stored = getattr(hf, OUR_CONFIG_KEY, None)
    if not isinstance(stored, dict):
        return None
    try:
        ours = ModelConfig.from_dict(stored)
        as_marian = ours.replace(sinusoid_layout="concat", output_bias=True, extra=cfg.extra)
    except (TypeError, ValueError):
        return None
    return ours if as_marian == cfg else None


def as_original(model: Transformer, original: ModelConfig) -> Transformer | None:
    """``model`` (read from a Marian directory) rebuilt with the ``original`` config an export recorded:
    the d_model axis permuted back to its sinusoid layout, and the output bias dropped where the
    original had none. None if that bias is not all zeros (the export wrote zeros; a model
    trained further elsewhere may have changed it)."""
    state = with_sinusoid_layout(model, original.sinusoid_layout).state_dict()
    if not original.output_bias and state.pop("output.bias").any():
        return None
    out = Transformer(original)
    out.load_state_dict(state)
    return out.eval()
