"""Attention weights of one translated sentence, ready to draw or save as JSON.

:func:`collect_attention` translates a sentence (the translator's best hypothesis), then runs
one teacher-forced forward pass of ``Transformer.attention_maps`` on ``(source ids, <s> + output
ids)`` in float32 and keeps every weight, per layer and head.

Axes (the same in the arrays, the JSON, the heatmaps and the page):

* ``source``: the source subword pieces ``x_1 .. x_S`` (no ``<s>``/``</s>``: the encoder sees none).
* ``target_input``: what the decoder reads, ``<s> y_1 .. y_n`` (T = n + 1 positions).
* ``target_output``: what each decoder position predicts, ``y_1 .. y_n </s>`` (same T positions).

Rows are the attending (query) positions, columns the attended (key) positions:

=======  =================  ================  ==================================
kind     rows               columns           array shape
=======  =================  ================  ==================================
encoder  ``source``         ``source``        ``(L_enc, H, S, S)`` input-input
decoder  ``target_output``  ``target_input``  ``(L_dec, H, T, T)`` output-output
cross    ``target_output``  ``source``        ``(L_dec, H, T, S)`` input-output
=======  =================  ================  ==================================

A model without self-attention (the recurrent baseline, ``model.architecture=rnn``) has only
the ``cross`` kind, with one layer and one head: a row per decoder step.

So a decoder row is labelled by the token being predicted there: the row of ``student`` in the
cross-attention shows where the model looked while producing ``student``, and in the decoder
self-attention the same row may only look at ``<s> I am a`` (the causal mask: entries above the
diagonal, column > row, are exactly 0). Every row sums to 1.

Pieces are shown without the word-boundary mark ``▁``; ``word_start`` keeps that information.

:meth:`AttentionData.to_json` writes the format described by ``schema.json`` (JSON Schema) in
this package: weights as integers in units of ``weight_scale`` (10**4 by default), each number
stored once.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from transformer.errors import UserError
from transformer.text.pieces import TokenAxis
from transformer.visualize._io import write_text_atomic

KINDS: tuple[str, ...] = ("encoder", "decoder", "cross")
KIND_TITLES = {"encoder": "input-input (encoder self-attention)",
               "decoder": "output-output (decoder self-attention)",
               "cross": "input-output (encoder-decoder attention)"}
AXES = {"encoder": ("source", "source"), "decoder": ("target_output", "target_input"),
        "cross": ("target_output", "source")}
FORMAT, VERSION = "transformer-attention", 1
DECIMALS = 4
SINUSOIDAL_MAX_TOKENS = 1024  # sinusoids extend to any length; this keeps pictures and pages usable


@dataclass
class AttentionData:
    """Every attention weight of one sentence and its translation (see the module docstring for axes).

    ``weights[kind]`` is a float32 array ``(layers, heads, rows, cols)`` for each kind of :data:`KINDS`
    the model has (all three for a Transformer, ``cross`` only for the recurrent baseline).
    """

    source: str
    translation: str
    tokens: dict[str, TokenAxis]  # "source", "target_input", "target_output"
    weights: dict[str, np.ndarray]  # "encoder", "decoder", "cross" (the kinds the model has)
    model: dict[str, Any]  # {"layers": {"encoder": L, "decoder": L}, "heads": H, "d_model": E[, "architecture": "rnn"]}

    @property
    def kinds(self) -> list[str]:
        """The attention kinds present, in :data:`KINDS` order."""
        return [k for k in KINDS if k in self.weights]

    def axes(self, kind: str) -> tuple[TokenAxis, TokenAxis]:
        """``(row tokens, column tokens)`` of ``kind``."""
        rows, cols = AXES[check_kind(kind)]
        return self.tokens[rows], self.tokens[cols]

    def n_layers(self, kind: str) -> int:
        if check_kind(kind) not in self.weights:
            raise UserError(f"this model has no {kind} attention; its kinds: {self.kinds}")
        return int(self.weights[kind].shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.model["heads"])

    def check_layer(self, kind: str, layer: int | None) -> int:
        """``layer`` (default: the last; negative counts from the end) as an index; UserError if it does not exist."""
        return check_layer(self.n_layers(kind), kind, layer)

    def check_heads(self, heads: list[int] | None) -> list[int]:
        """``heads`` (default: all) as a list of indices; UserError naming the valid range otherwise."""
        return check_heads(self.n_heads, heads)

    # ---------------------------------------------------------------------------------------
    def to_dict(self, *, decimals: int = DECIMALS) -> dict[str, Any]:
        """The JSON document described by ``schema.json``.

        Weights are stored as integers in units of ``weight_scale = 10**decimals``: the attention
        probability is ``weights[layer][head][row][col] / weight_scale`` (rounded to ``decimals``).
        """
        if isinstance(decimals, bool) or not isinstance(decimals, int) or not 1 <= decimals <= 6:
            raise UserError(f"decimals must be an integer in 1..6, got {decimals!r}")
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": self.source,
            "translation": self.translation,
            "model": self.model,
            "weight_scale": 10**decimals,
            "tokens": {name: axis.to_dict() for name, axis in self.tokens.items()},
            "kinds": {
                kind: {"rows": AXES[kind][0], "cols": AXES[kind][1],
                       "weights": _quantized(self.weights[kind], decimals)}
                for kind in self.kinds
            },
        }

    def to_json(self, path: str | os.PathLike[str] | None = None, *, decimals: int = DECIMALS) -> str:
        """Compact JSON text (UTF-8, not ASCII-escaped); also written atomically to ``path`` when given."""
        text = json.dumps(self.to_dict(decimals=decimals), ensure_ascii=False, separators=(",", ":"))
        if path is not None:
            write_text_atomic(path, text + "\n")
        return text

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AttentionData:
        """Read a document written by :meth:`to_dict` (weights come back rounded); UserError for
        another document."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise UserError(f"not a {FORMAT} document (format={d.get('format') if isinstance(d, dict) else None!r})")
        try:
            return cls(
                source=d["source"], translation=d["translation"],
                tokens={name: TokenAxis.from_dict(axis) for name, axis in d["tokens"].items()},
                weights={k: (np.asarray(d["kinds"][k]["weights"], dtype=np.float64) / d["weight_scale"]).astype(
                    np.float32) for k in KINDS if k in d["kinds"]},
                model=d["model"],
            )
        except KeyError as err:
            raise UserError(f"a {FORMAT} document without its {err} entry") from None

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> AttentionData:
        """Read the file :meth:`to_json` wrote; UserError naming ``path`` for another file."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UserError(f"{path} is not a JSON document ({err})") from None
        try:
            return cls.from_dict(data)
        except UserError as err:
            raise UserError(f"{path}: {err}") from None


def _quantized(array: np.ndarray, decimals: int) -> list:
    """Nested lists of ints: ``round(weight * 10**decimals)`` (JSON half the size of rounded floats)."""
    return np.rint(array.astype(np.float64) * 10**decimals).astype(np.int64).tolist()


def check_layer(n_layers: int, kind: str, layer: int | None) -> int:
    """``layer`` of a ``kind`` stack with ``n_layers`` layers as an index (default: the last)."""
    n = n_layers
    if layer is None:
        return n - 1
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not -n <= layer < n:
        raise UserError(f"layer {layer!r} does not exist: the {kind} has {n} layers (valid: 0..{n - 1})")
    return int(layer) % n


def check_heads(n_heads: int, heads: list[int] | None) -> list[int]:
    """``heads`` (default: all ``n_heads``) as a list of distinct head indices."""
    if heads is None:
        return list(range(n_heads))
    heads = list(heads)
    if not heads:
        raise UserError(f"no heads chosen: pick some of 0..{n_heads - 1}")
    for i in heads:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < n_heads:
            raise UserError(f"head {i!r} does not exist: the model has {n_heads} heads (valid: 0..{n_heads - 1})")
    if len(set(heads)) != len(heads):
        raise UserError(f"heads {heads} repeat a head")
    return [int(i) for i in heads]


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise UserError(f"unknown attention kind {kind!r}; choose one of {list(KINDS)}")
    return kind


def token_limit(config: Any) -> int:
    """Longest sequence this model takes: ``max_positions`` for learned positions, else 1024
    (:data:`SINUSOIDAL_MAX_TOKENS`; sinusoids extend to any length, pictures and pages do not)."""
    return config.max_positions if getattr(config, "positional", None) == "learned" else SINUSOIDAL_MAX_TOKENS


def _limit(translator: Any, max_tokens: int | None) -> tuple[int, str]:
    """The longest allowed sequence for ``collect_attention`` and why (for error messages)."""
    config = translator.model.config
    if max_tokens is not None:
        return max_tokens, "max_tokens"
    own = getattr(translator, "max_input_tokens", None)
    if own is not None and own < token_limit(config):
        return own, "the translator's max_input_tokens"
    return token_limit(config), _limit_reason(config)


def _limit_reason(config: Any) -> str:
    if getattr(config, "positional", None) == "learned":
        return "its learned position table has max_positions entries"
    return "the configured maximum for sinusoidal positions"


def best_translation_ids(translator: Any, sentence: str) -> list[int]:
    """Token ids of the translator's best hypothesis for ``sentence`` (its configured decoding)."""
    if hasattr(translator, "translate_n_best"):
        n_best = translator.translate_n_best([sentence])[0]
        return list(n_best[0].tokens) if n_best else []
    return list(translator.translate_hypotheses([sentence])[0].tokens)


def collect_attention(translator: Any, sentence: str, *, translation: str | None = None,
                      max_tokens: int | None = None) -> AttentionData:
    """Translate ``sentence`` and collect all attention weights of the model for it.

    The translation is the translator's best hypothesis with its own decoding settings (what
    ``translator.translate`` returns; use ``translator.with_decoding(strategy="greedy")`` for
    greedy decoding); the weights come from one teacher-forced pass on that translation.

    Args:
        translator: a :class:`transformer.translate.translator.Translator`.
        sentence: the source text.
        translation: force this target text instead of decoding (e.g. a reference translation).
        max_tokens: the longest source or decoder input allowed (default: :func:`token_limit`, or
            the translator's ``max_input_tokens`` when smaller).

    Raises ``UserError("empty sentence")`` for a blank sentence and a ``UserError`` naming the
    length and the limit when the sentence (or translation) is longer than the model allows.
    """
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
    model, vocab = translator.model, translator.vocab
    cfg = model.config
    src_ids = vocab.src.encode(sentence) if sentence.strip() else []
    if not src_ids:
        raise UserError("empty sentence")
    limit, why = _limit(translator, max_tokens)
    if len(src_ids) > limit:
        raise UserError(f"sentence is {len(src_ids)} tokens long, but at most {limit} are allowed ({why})")
    if translation is None:
        out_ids = best_translation_ids(translator, sentence)
    else:
        if not translation.strip():
            raise UserError("empty translation")
        out_ids = vocab.tgt.encode(translation)
    tgt_ids = [vocab.tgt.bos_id, *out_ids]
    if len(tgt_ids) > limit:
        raise UserError(f"translation needs {len(tgt_ids)} decoder positions (<s> + {len(out_ids)} tokens), "
                        f"but at most {limit} are allowed ({why})")

    device = next(model.parameters()).device
    src = torch.tensor([src_ids], dtype=torch.long, device=device)
    tgt = torch.tensor([tgt_ids], dtype=torch.long, device=device)
    maps = model.eval().attention_maps(src, tgt, torch.ones_like(src, dtype=torch.bool))

    def stack(ws: list[torch.Tensor]) -> np.ndarray:
        return torch.stack([w[0] for w in ws]).float().cpu().numpy()  # (L, H, rows, cols)

    return AttentionData(
        source=sentence,
        translation=vocab.tgt.decode(out_ids),
        tokens={
            "source": TokenAxis.from_pieces(vocab.src.pieces(src_ids)),
            "target_input": TokenAxis.from_pieces(vocab.tgt.pieces(tgt_ids)),
            "target_output": TokenAxis.from_pieces(vocab.tgt.pieces([*out_ids, vocab.tgt.eos_id])),
        },
        weights={kind: stack(ws) for kind, ws in
                 (("encoder", maps.encoder), ("decoder", maps.decoder_self), ("cross", maps.cross)) if ws},
        model=_model_info(cfg, maps),
    )


def attention_layout(config: Any) -> dict[str, tuple[int, int]]:
    """``{kind: (layers, heads)}`` of a model config: all three kinds for a Transformer, only
    ``cross`` with one layer and one head for the recurrent baseline (``architecture == "rnn"``)."""
    if getattr(config, "architecture", "transformer") == "rnn":
        return {"cross": (1, 1)}
    return {"encoder": (config.n_encoder_layers, config.n_heads), "decoder": (config.n_decoder_layers, config.n_heads),
            "cross": (config.n_decoder_layers, config.n_heads)}


def _model_info(config: Any, maps: Any) -> dict[str, Any]:
    """The ``model`` entry of the JSON document: attention layers per stack, heads, width."""
    info: dict[str, Any] = {"layers": {"encoder": len(maps.encoder), "decoder": len(maps.cross)},
                            "heads": int(maps.cross[0].shape[1]), "d_model": int(config.d_model)}
    if getattr(config, "architecture", "transformer") != "transformer":
        info["architecture"] = config.architecture
    return info
