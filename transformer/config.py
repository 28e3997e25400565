"""Model configuration: one validated dataclass, JSON round-trip, and the paper's presets.

Every switch that departs from the paper (Vaswani et al., 2017) has a name here, with the
paper's choice as its default: post-LN, sqrt(d_model) embedding scale, interleaved sin/cos
positions, tied target embedding and pre-softmax projection (section 3.4).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from transformer import config_dict
from transformer.run_files import write_atomic
from transformer.errors import UserError

ACTIVATIONS = ("relu", "gelu", "silu")
POSITIONAL = ("sinusoidal", "learned")
SINUSOID_LAYOUTS = ("interleaved", "concat")
BOOL_FIELDS = ("norm_first", "scale_embeddings", "share_embeddings", "tie_output", "output_bias")


class ConfigFile:
    """The JSON round trip of a model's config, shared by :class:`ModelConfig` and the recurrent
    baseline's ``RNNConfig``: a dict, JSON text, a ``config.json`` file."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Build from a dict; unknown keys are an error that lists the valid ones."""
        return cls(**config_dict.check_keys(
            data, config_dict.field_names(cls), mapping="a model config must be a JSON object", owner=cls.__name__,
            required=("src_vocab_size", "tgt_vocab_size"), config="model config"))

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """Serialise to JSON text; write it (atomically) to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        if path is not None:
            write_atomic(path, text)
        return text

    @classmethod
    def from_json(cls, source: str | os.PathLike[str]) -> Self:
        """Read from a JSON file path, or from JSON text.

        Raises:
            FileNotFoundError: ``source`` is a path to no file.
            UserError: the text is not JSON, or not a valid config (the message says why).
        """
        text = str(source)
        if not text.lstrip().startswith("{"):
            path = Path(source)
            if not path.is_file():
                raise FileNotFoundError(f"model config file not found: {path}")
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"model config {path} is not UTF-8 text: {err}") from None
        try:
            data = json.loads(text)
        except ValueError as err:  # not JSON, or an integer of more digits than Python converts
            raise UserError(f"model config is not valid JSON: {err}") from None
        return cls.from_dict(data)

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass
class ModelConfig(ConfigFile):
    """Sizes and switches of an encoder-decoder Transformer (paper section 3, Table 3)."""

    src_vocab_size: int = field(metadata=config_dict.positive_int())
    tgt_vocab_size: int = field(metadata=config_dict.positive_int())
    d_model: int = field(default=512, metadata=config_dict.positive_int(
        note="a multiple of n_heads; even with sinusoidal positions"))
    n_heads: int = field(default=8, metadata=config_dict.positive_int())
    d_ff: int = field(default=2048, metadata=config_dict.positive_int())
    n_encoder_layers: int = field(default=6, metadata=config_dict.int_at_least(1))
    n_decoder_layers: int = field(default=6, metadata=config_dict.int_at_least(1))
    # residual dropout and dropout on embeddings + positions (5.4)
    dropout: float = field(default=0.1, metadata=config_dict.probability())
    attention_dropout: float = field(default=0.1, metadata=config_dict.probability())  # on the attention weights
    # dropout between the two feed-forward layers
    activation_dropout: float = field(default=0.0, metadata=config_dict.probability())
    activation: str = "relu"  # position-wise FFN non-linearity (3.3): "relu", "gelu" or "silu" (swish, Marian)
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN + final LayerNorm
    layer_norm_eps: float = field(default=1e-5, metadata=config_dict.positive())
    positional: str = "sinusoidal"  # "sinusoidal" (3.5) or "learned"
    sinusoid_layout: str = "interleaved"  # sin on even / cos on odd dims, or "concat" (all sin, then all cos)
    # size of a learned position table (sinusoids extend on demand)
    max_positions: int = field(default=1024, metadata=config_dict.positive_int())
    scale_embeddings: bool = True  # multiply token embeddings by sqrt(d_model) (3.4)
    share_embeddings: bool = False  # one embedding for source and target (needs one vocabulary)
    tie_output: bool = True  # target embedding == pre-softmax projection (3.4)
    output_bias: bool = False  # a bias on the pre-softmax projection
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes (e.g. provenance); not read by the model

    def __post_init__(self) -> None:
        self.validate()

    # ----------------------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        """d_k = d_v = d_model / h (3.2.2)."""
        return self.d_model // self.n_heads

    def validate(self) -> None:
        """Raise :class:`~transformer.errors.UserError` naming the first field that is out of range.

        The numeric ranges are declared on the fields (:func:`transformer.config_dict.check_fields`):
        sizes are positive integers, layer counts >= 1, dropout rates in [0, 1), ``layer_norm_eps``
        > 0 and finite.
        """
        config_dict.check_fields(self, "ModelConfig")
        for name in BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"ModelConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if self.d_model % self.n_heads != 0:
            raise UserError(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}); "
                f"e.g. d_model=512 with n_heads=8 gives d_k=64"
            )
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("positional", self.positional, POSITIONAL)
        _check_choice("sinusoid_layout", self.sinusoid_layout, SINUSOID_LAYOUTS)
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise UserError(f"sinusoidal positions need an even d_model, got {self.d_model}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise UserError(
                "share_embeddings=True needs one shared vocabulary, but src_vocab_size="
                f"{self.src_vocab_size} != tgt_vocab_size={self.tgt_vocab_size}; train a joint tokenizer "
                "or set share_embeddings=False"
            )


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserError(f"ModelConfig.{name} must be one of {list(choices)}, got {value!r}")


# ------------------------------------------------------------------------------------------------
# Presets. "base" and "big" are the paper's Table 3 rows; "small" fits CPU training in minutes,
# "tiny" is for tests.
PRESETS: dict[str, dict[str, Any]] = {
    "base": dict(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=6, n_decoder_layers=6, dropout=0.1),
    "big": dict(d_model=1024, n_heads=16, d_ff=4096, n_encoder_layers=6, n_decoder_layers=6, dropout=0.3),
    "small": dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3, dropout=0.1),
    "tiny": dict(d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0,
                 attention_dropout=0.0),
}


def preset(name: str, *, src_vocab_size: int, tgt_vocab_size: int | None = None, **overrides: Any) -> ModelConfig:
    """The named preset for the given vocabulary sizes (one shared vocabulary when tgt is omitted).

    With a single shared vocabulary the source/target embeddings are shared as in the paper.
    """
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    shared = tgt_vocab_size is None or tgt_vocab_size == src_vocab_size
    values: dict[str, Any] = dict(PRESETS[name])
    values.update(
        src_vocab_size=src_vocab_size,
        tgt_vocab_size=src_vocab_size if tgt_vocab_size is None else tgt_vocab_size,
        share_embeddings=shared,
    )
    values.update(overrides)
    return ModelConfig(**values)
