"""Configuration of the recurrent baseline: one validated dataclass, JSON round trip, presets.

The ``architecture`` field (always ``"rnn"``) is written to a run directory's ``config.json``
so that loading code knows which model to build; a Transformer's ``config.json`` has no such
field (see ``transformer.model.config_from_dict``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformer import config_dict
from transformer.config import ConfigFile
from transformer.errors import UserError

ARCHITECTURE = "rnn"
# Score function names of the RNN decoder -> names in transformer.model.scores.build_score.
RNN_SCORES: dict[str, str] = {
    "additive": "additive",  # Bahdanau et al. 2015: v^T tanh(W q + U h)
    "dot": "dot",  # Luong et al. 2015 "dot": q . h
    "general": "bilinear",  # Luong et al. 2015 "general": h^T W q
    "scaled_dot": "scaled_dot",  # q . h / sqrt(d) (Vaswani et al. 2017)
}


@dataclass
class RNNConfig(ConfigFile):
    """Sizes and switches of the attentional LSTM encoder-decoder (Bahdanau et al. 2015; Luong et al. 2015).

    The encoder is a bidirectional LSTM of ``n_encoder_layers`` layers with ``hidden_size // 2``
    units per direction, so its states (the attention keys and values) have ``hidden_size``
    features, like the decoder LSTM's. ``score`` picks the attention score function. With
    ``input_feeding`` (Luong et al. 3.3) the previous attentional vector is fed to the decoder
    LSTM with the next target embedding; without it the decoder LSTM runs over the whole target
    in one call during training. The attentional vector has ``embed_dim`` features, so the output
    projection can share the target embedding's weights (``tie_output``).
    """

    src_vocab_size: int = field(metadata=config_dict.positive_int())
    tgt_vocab_size: int = field(metadata=config_dict.positive_int())
    architecture: str = ARCHITECTURE
    embed_dim: int = field(default=256, metadata=config_dict.positive_int())
    # decoder LSTM units = encoder units of both directions together (even)
    hidden_size: int = field(default=512, metadata=config_dict.positive_int(note="even"))
    n_encoder_layers: int = field(default=1, metadata=config_dict.positive_int())
    n_decoder_layers: int = field(default=1, metadata=config_dict.positive_int())
    score: str = "general"  # "additive" | "dot" | "general" | "scaled_dot"
    # hidden size of the additive score (default: hidden_size)
    attention_dim: int | None = field(default=None, metadata=config_dict.positive_int(none_means="the hidden size"))
    input_feeding: bool = True
    # on embeddings, between LSTM layers, on encoder states and attentional vectors
    dropout: float = field(default=0.2, metadata=config_dict.probability())
    share_embeddings: bool = False  # one embedding for source and target (needs one vocabulary)
    tie_output: bool = True  # target embedding == pre-softmax projection
    output_bias: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes; not read by the model

    def __post_init__(self) -> None:
        self.validate()

    @property
    def d_model(self) -> int:
        """The width the learning-rate schedule is scaled by (``d_model^-0.5``): ``hidden_size``."""
        return self.hidden_size

    def validate(self) -> None:
        """Raise :class:`~transformer.errors.UserError` naming the first field that is out of range.

        The numeric ranges are declared on the fields (:func:`transformer.config_dict.check_fields`):
        sizes and layer counts are positive integers (``hidden_size`` even), ``attention_dim`` a
        positive integer or null, ``dropout`` in [0, 1).
        """
        if self.architecture != ARCHITECTURE:
            raise UserError(f"RNNConfig.architecture must be {ARCHITECTURE!r}, got {self.architecture!r}")
        config_dict.check_fields(self, "RNNConfig")  # the numeric ranges declared on the fields
        if self.hidden_size % 2:
            raise UserError(f"RNNConfig.hidden_size must be even (two encoder directions), got {self.hidden_size}")
        if self.score not in RNN_SCORES:
            raise UserError(f"RNNConfig.score must be one of {list(RNN_SCORES)}, got {self.score!r}")
        if self.attention_dim is not None and self.score != "additive":
            raise UserError(f"RNNConfig.attention_dim only applies to score='additive', not {self.score!r}")
        for name in ("input_feeding", "share_embeddings", "tie_output", "output_bias"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"RNNConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise UserError(
                f"share_embeddings=True needs one shared vocabulary, but src_vocab_size={self.src_vocab_size} "
                f"!= tgt_vocab_size={self.tgt_vocab_size}"
            )


# Sizes by preset name, matching the Transformer presets' roles: "tiny" for tests, "small" for CPU
# training in minutes (about 5.7M parameters with an 8,000-token shared vocabulary), "base" larger.
RNN_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(embed_dim=32, hidden_size=32, dropout=0.0),
    "small": dict(embed_dim=256, hidden_size=512),
    "base": dict(embed_dim=512, hidden_size=1024, n_encoder_layers=2, n_decoder_layers=2),
    "big": dict(embed_dim=1024, hidden_size=1024, n_encoder_layers=4, n_decoder_layers=4, dropout=0.3),
}


def rnn_preset(name: str, *, src_vocab_size: int, tgt_vocab_size: int | None = None, **overrides: Any) -> RNNConfig:
    """The named RNN preset for the given vocabularies (one shared vocabulary when tgt is omitted)."""
    if name not in RNN_PRESETS:
        raise UserError(f"unknown preset {name!r}; choose one of {sorted(RNN_PRESETS)}")
    tgt = src_vocab_size if tgt_vocab_size is None else tgt_vocab_size
    values: dict[str, Any] = dict(RNN_PRESETS[name], src_vocab_size=src_vocab_size, tgt_vocab_size=tgt,
                                  share_embeddings=tgt == src_vocab_size)
    values.update(overrides)
    return RNNConfig(**values)
