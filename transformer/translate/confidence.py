"""A confidence per translation: the probability that it is adequate, from what the model knows.

The model's own scores rank translations only roughly: a long, correct sentence has a lower
log-probability than a short, wrong one, and a translation that skips half of its source can be
fluent and probable. The confidence here combines a few numbers the model gives for a finished
translation, its own score and what one teacher-forced pass of the decoder over ``<s> + tokens``
shows (the step that predicted each token, ``</s>`` included), into one probability fitted on
held-out data:

* ``mean_log_prob``: the length-normalised log-probability, ``Hypothesis.log_prob / (len(tokens)
  + 1)`` (the log-probability of the tokens and ``</s>`` over their number: the raw baseline);
* ``min_log_prob``, ``p10_log_prob``: the least probable token, the 10th percentile of the tokens;
* ``mean_entropy``: the mean entropy of the model's distribution at each step (how unsure it was);
* ``uncovered_share``, ``coverage_penalty``: how the last decoder layer's encoder-decoder attention,
  averaged over heads and summed over the output steps, covers the source tokens (the share that
  received less than half a step's attention; GNMT's coverage penalty ``sum_j log min(c_j, 1)``
  divided by the source length);
* ``length_ratio``, ``length_ratio_squared``: ``log(output length / source length)`` and its square
  (a translation much shorter or longer than usual is suspect);
* ``source_length``: ``log`` of the source length.

:data:`FEATURES` lists them all (every one is computed); a :class:`Calibration` uses some of them
(:data:`DEFAULT_FEATURES` when fitted by ``transformer calibrate``) in a logistic regression on
standardised features that predicts the event "sentence-level chrF >= 50" (``ADEQUATE_CHRF``):
``confidence = sigmoid(bias + sum_i w_i (x_i - mean_i) / scale_i)``. Fitted on a run's validation
data, it is stored in ``RUN_DIR/confidence.json`` (format below) with the sha256 of the
``model.safetensors`` it was fitted for: a changed model needs a new calibration (the old one is
not loaded).

``confidence.json``::

    {"format": "transformer-confidence", "version": 1,
     "event": {"metric": "chrF", "threshold": 50.0},
     "features": ["mean_log_prob", ...], "mean": [...], "scale": [...], "weights": [...],
     "bias": 0.3, "model_sha256": "...",
     "fitted_on": {"data": ..., "sentences": ..., "decoding": ...},
     "figures": {"ece": ..., "ece_bins": 10, "spearman_chrf": ..., ...}}

The features of a hypothesis depend on its source, its tokens and its score alone, not on the
other sentences of its batch (padding is masked; the output layer, where a feature needs it, runs
over a bounded number of rows at a time).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from transformer.errors import UserError
from transformer.decoding import Hypothesis
from transformer.decoding.common import inference, token_log_probs
from transformer.model import Transformer
from transformer.run.layout import CONFIDENCE_FILE, WEIGHTS_FILE
from transformer.run_files import RunFileError, read_json, write_atomic

FEATURES = ("mean_log_prob", "min_log_prob", "p10_log_prob", "mean_entropy", "uncovered_share", "coverage_penalty",
            "length_ratio", "length_ratio_squared", "source_length")
# Chosen on the Multi30k validation sets by 10-fold cross-validation: no other feature added to these
# two improved the log-loss or the rank correlation with chrF beyond noise (docs/decoding.md, Confidence).
DEFAULT_FEATURES = ("mean_log_prob", "coverage_penalty")
ADEQUATE_CHRF = 50.0  # the event a confidence is the probability of: sentence-level chrF >= this
UNCOVERED_BELOW = 0.5  # a source token with less attention than this, summed over the steps, is "uncovered"
COVERAGE_FLOOR = 0.01  # the coverage penalty's floor: a token with less attention counts as this little
ECE_BINS = 10  # equal-width bins of the expected calibration error
FORMAT, VERSION = "transformer-confidence", 1
L2 = 1.0  # the ridge penalty on the standardised weights (a prior that keeps separable data finite)
# Logits of at most this many elements are held at a time (rows x steps x vocabulary): 64 MB in float32.
_LOGIT_ELEMENTS = 1 << 24


# ------------------------------------------------------------------------------------------------ features
# The features read from the model's distribution at each step: they need the output layer's logits.
_DISTRIBUTION = ("min_log_prob", "p10_log_prob", "mean_entropy")


@inference
def hypothesis_features(model: Transformer, src: Tensor, src_mask: Tensor, results: Sequence[Sequence[Hypothesis]],
                        *, bos_id: int, eos_id: int, memory: Tensor | None = None,
                        names: Sequence[str] = FEATURES) -> np.ndarray:
    """The :data:`FEATURES` of every hypothesis, as ``(M, len(FEATURES))`` float64 in the order of
    ``results`` flattened (sentence by sentence, best first).

    ``mean_log_prob`` is the hypothesis's own ``log_prob / (len(tokens) + 1)``; the others come from
    one teacher-forced pass of the decoder over ``<s> + tokens``, the output layer included only
    where a feature of the distribution (``min_log_prob``, ``p10_log_prob``, ``mean_entropy``) is
    wanted.

    Args:
        model: the model that translated (a ``Transformer``: one decoder pass with the attention
            weights; another model, such as the recurrent baseline: its ``attention_maps`` and
            ``decode``).
        src, src_mask: the ``(B, S)`` source ids and mask (True = real token) the results came from.
        results: per sentence, its hypotheses (``decode``'s output).
        bos_id, eos_id: the target tokenizer's ``<s>`` and ``</s>``.
        memory: ``model.encode(src, src_mask)`` when the caller has it (a ``Transformer``'s);
            else the sources are encoded here.
        names: the features wanted; the columns of the others are nan.
    """
    flat = [(b, h) for b, hyps in enumerate(results) for h in hyps]
    if not flat:
        return np.zeros((0, len(FEATURES)))
    if isinstance(model, Transformer) and memory is None:
        memory = model.encode(src, src_mask)
    distribution = any(name in names for name in _DISTRIBUTION)
    # with the logits, a bounded number of rows at a time: rows x steps x vocabulary elements
    longest = max(len(h.tokens) for _, h in flat) + 1
    rows = max(1, _LOGIT_ELEMENTS // (longest * model.config.tgt_vocab_size)) if distribution else len(flat)
    out = np.concatenate([
        _chunk_features(model, src, src_mask, memory, flat[start : start + rows], bos_id=bos_id, eos_id=eos_id,
                        distribution=distribution, entropy="mean_entropy" in names)
        for start in range(0, len(flat), rows)])
    out[:, [i for i, name in enumerate(FEATURES) if name not in names]] = np.nan
    return out


def _chunk_features(model: Transformer, src: Tensor, src_mask: Tensor, memory: Tensor | None,
                    chunk: list[tuple[int, Hypothesis]], *, bos_id: int, eos_id: int, distribution: bool,
                    entropy: bool) -> np.ndarray:
    dev = src.device
    width = max(len(h.tokens) for _, h in chunk) + 1
    # A translation that filled a learned position table was cut there without </s>: its steps
    # read every position, and the pass reads no more (the step after it was never taken).
    cfg = getattr(model, "config", None)
    if cfg is not None and getattr(cfg, "positional", None) == "learned":
        width = min(width, cfg.max_positions)
    tgt = torch.full((len(chunk), width), bos_id, dtype=torch.long)  # (M, T): <s> + tokens, padding after (causal)
    gold = torch.full((len(chunk), width), eos_id, dtype=torch.long)  # (M, T): tokens + </s>
    for i, (_, h) in enumerate(chunk):
        tokens = torch.tensor(h.tokens, dtype=torch.long)
        tgt[i, 1 : len(h.tokens) + 1] = tokens[: width - 1]
        gold[i, : len(h.tokens)] = tokens
    index = torch.tensor([b for b, _ in chunk], device=dev)
    rows_mask = src_mask.index_select(0, index)
    if memory is not None:
        logits, cross = _teacher_forced(model, memory.index_select(0, index), tgt.to(dev), rows_mask,
                                        logits=distribution)
    else:
        logits, cross = _attention_maps(model, src.index_select(0, index), tgt.to(dev), rows_mask,
                                        logits=distribution)
    picked = spread = None
    if logits is not None:
        log_probs = token_log_probs(logits)  # (M, T, V) float32
        picked = log_probs.gather(-1, gold.to(dev).unsqueeze(-1)).squeeze(-1).double().cpu().numpy()  # (M, T)
        if entropy:
            spread = (-(log_probs.exp() * log_probs).sum(-1)).double().cpu().numpy()  # (M, T)
    cross = cross.double().cpu()  # (M, T, S)
    mask = rows_mask.cpu()
    out = np.empty((len(chunk), len(FEATURES)))
    for i, (_, h) in enumerate(chunk):
        steps = min(len(h.tokens) + 1, width)
        out[i] = _features(h.log_prob / steps, None if picked is None else picked[i, :steps],
                           None if spread is None else spread[i, :steps], cross[i, :steps][:, mask[i]].numpy())
    return out


def _teacher_forced(model: Transformer, memory: Tensor, tgt: Tensor, src_mask: Tensor, *,
                    logits: bool) -> tuple[Tensor | None, Tensor]:
    """The logits ``(M, T, V)`` of ``tgt`` (None unless ``logits``) and the last decoder layer's
    encoder-decoder attention, averaged over its heads, ``(M, T, S)``: one pass of a Transformer's
    decoder."""
    hidden, _, cross = model.decoder(tgt, memory, src_mask, need_weights=True)
    return model.output(hidden) if logits else None, cross[-1].mean(dim=1)


def _attention_maps(model, src: Tensor, tgt: Tensor, src_mask: Tensor, *, logits: bool) -> tuple[Tensor | None, Tensor]:
    """What :func:`_teacher_forced` gives, from any model with ``attention_maps``, ``encode`` and ``decode``."""
    cross = model.attention_maps(src, tgt, src_mask).cross[-1].mean(dim=1)
    return model.decode(tgt, model.encode(src, src_mask), src_mask) if logits else None, cross


def _features(mean_log_prob: float, log_probs: np.ndarray | None, entropy: np.ndarray | None,
              attention: np.ndarray) -> list[float]:
    """One hypothesis's :data:`FEATURES` from its length-normalised log-probability, its steps'
    target log-probabilities ``(T,)`` and entropies ``(T,)`` (None: not computed, nan) and its
    head-averaged attention over its real source tokens ``(T, S)``."""
    steps, source = attention.shape
    coverage = attention.sum(axis=0)  # (S,) attention each source token received over all steps
    ratio = math.log(steps / max(source, 1))
    return [
        float(mean_log_prob),
        float(log_probs.min()) if log_probs is not None else math.nan,
        float(np.percentile(log_probs, 10)) if log_probs is not None else math.nan,
        float(entropy.mean()) if entropy is not None else math.nan,
        float((coverage < UNCOVERED_BELOW).mean()) if source else 0.0,
        float(np.log(np.clip(coverage, COVERAGE_FLOOR, 1.0)).mean()) if source else 0.0,
        ratio,
        ratio * ratio,
        math.log(max(source, 1)),
    ]


def attach_confidence(model: Transformer, src: Tensor, src_mask: Tensor, results: list[list[Hypothesis]],
                      calibration: Calibration | None, *, bos_id: int, eos_id: int,
                      memory: Tensor | None = None) -> None:
    """Set ``h.confidence`` for every hypothesis of ``results`` (see :func:`hypothesis_features` for
    the arguments; only the calibration's features are computed). Without a calibration nothing is
    computed and every ``confidence`` stays None: an uncalibrated number in [0, 1] would read as a
    probability without being one."""
    if calibration is None or not any(results):
        return
    features = hypothesis_features(model, src, src_mask, results, bos_id=bos_id, eos_id=eos_id, memory=memory,
                                   names=calibration.features)
    for h, p in zip((h for hyps in results for h in hyps), calibration.predict(features)):
        h.confidence = float(p)


# ------------------------------------------------------------------------------------------------ calibration
@dataclass(frozen=True)
class Calibration:
    """A fitted mapping from :data:`FEATURES` to the probability that a translation is adequate
    (sentence chrF >= ``threshold``): a logistic regression on standardised features.

    ``features``: the names used (a subset of :data:`FEATURES`); ``mean``, ``scale``: their
    standardisation; ``weights``, ``bias``: the regression. ``model_sha256``: the sha256 of the
    weights it was fitted for (None: not checked). ``fitted_on`` and ``figures``: what it was
    fitted on and how well it did there (for people; not used to predict).
    """

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float = ADEQUATE_CHRF
    model_sha256: str | None = None
    fitted_on: dict[str, Any] = field(default_factory=dict, compare=False)
    figures: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        _check_fields(self.features, self.mean, self.scale, self.weights, self.bias, self.threshold)

    def predict(self, features: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
        """The probabilities ``(N,)`` in [0, 1] for ``(N, len(FEATURES))`` features (the columns of
        :data:`FEATURES`, as :func:`hypothesis_features` gives them)."""
        x = _feature_matrix(features)
        columns = x[:, [FEATURES.index(name) for name in self.features]]
        z = (columns - np.asarray(self.mean)) / np.asarray(self.scale)
        return _sigmoid(self.bias + z @ np.asarray(self.weights))

    # -------------------------------------------------------------------------------------------- the file
    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "event": {"metric": "chrF", "threshold": self.threshold},
                "features": list(self.features), "mean": list(self.mean), "scale": list(self.scale),
                "weights": list(self.weights), "bias": self.bias, "model_sha256": self.model_sha256,
                "fitted_on": self.fitted_on, "figures": self.figures}

    @classmethod
    def from_json(cls, data: Any, *, where: str = CONFIDENCE_FILE) -> Calibration:
        """The calibration a parsed ``confidence.json`` describes; RunFileError naming ``where``."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RunFileError(f"{where} is not a confidence calibration (no \"format\": \"{FORMAT}\")")
        if data.get("version") != VERSION:
            raise RunFileError(f"{where} has version {data.get('version')!r}; this version of the package reads "
                               f"version {VERSION}: run `transformer calibrate` again")
        event = data.get("event")
        if not isinstance(event, dict) or event.get("metric") != "chrF":
            raise RunFileError(f"{where}: \"event\" must be {{\"metric\": \"chrF\", \"threshold\": ...}}")
        sha = data.get("model_sha256")
        if sha is not None and not (isinstance(sha, str) and len(sha) == 64):
            raise RunFileError(f"{where}: \"model_sha256\" must be a sha256 in hex or null")
        try:
            return cls(tuple(_list(data, "features", where)), tuple(_list(data, "mean", where)),
                       tuple(_list(data, "scale", where)), tuple(_list(data, "weights", where)),
                       data.get("bias"), event.get("threshold"), sha,
                       _dict(data, "fitted_on", where), _dict(data, "figures", where))
        except UserError as err:
            raise RunFileError(f"{where}: {err}") from None

    @classmethod
    def load(cls, run_dir: str | os.PathLike[str]) -> Calibration | None:
        """The calibration in ``run_dir/confidence.json``; None when the run has none, and None with a
        warning when it was fitted for other weights than the run's ``model.safetensors`` (the model
        changed since: after ``average`` or more training). RunFileError (a UserError) when the
        file is not a valid calibration."""
        path = Path(run_dir) / CONFIDENCE_FILE
        if not (path.exists() or path.is_symlink()):
            return None
        try:
            calibration = cls.from_json(read_json(path), where=str(path))
        except FileNotFoundError:  # removed meanwhile
            return None
        weights = Path(run_dir) / WEIGHTS_FILE
        if calibration.model_sha256 is not None and weights.is_file() \
                and file_sha256(weights) != calibration.model_sha256:
            warnings.warn(f"{path} was fitted for another {WEIGHTS_FILE} (the model has changed since), so it is "
                          f"not used: run `transformer calibrate {run_dir}` again, or remove it", stacklevel=2)
            return None
        return calibration

    def save(self, run_dir: str | os.PathLike[str]) -> Path:
        """Write ``run_dir/confidence.json`` whole (a work file renamed onto it); returns its path."""
        return write_atomic(Path(run_dir) / CONFIDENCE_FILE, json.dumps(self.to_json(), indent=2) + "\n")


def _list(data: dict, key: str, where: str) -> list:
    value = data.get(key)
    if not isinstance(value, list):
        raise RunFileError(f"{where}: \"{key}\" must be a list")
    return value


def _dict(data: dict, key: str, where: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise RunFileError(f"{where}: \"{key}\" must be an object")
    return value


def _check_fields(features: tuple, mean: tuple, scale: tuple, weights: tuple, bias: Any, threshold: Any) -> None:
    """UserError naming what is wrong with a calibration's numbers."""
    unknown = [f for f in features if f not in FEATURES]
    if unknown or not features:
        raise UserError(f"unknown features {unknown}; known: {list(FEATURES)}" if unknown else "no features")
    if len(set(features)) != len(features):
        raise UserError(f"a feature is named twice: {list(features)}")
    for name, values in (("mean", mean), ("scale", scale), ("weights", weights)):
        if len(values) != len(features):
            raise UserError(f"{len(features)} features but {len(values)} {name} values")
        if not all(_finite(v) for v in values):
            raise UserError(f"{name} values must be finite numbers")
    if not all(v > 0 for v in scale):
        raise UserError("scale values must be > 0")
    if not _finite(bias):
        raise UserError(f"bias must be a finite number, got {bias!r}")
    if not _finite(threshold):
        raise UserError(f"the event's threshold must be a finite number, got {threshold!r}")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _feature_matrix(features: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != len(FEATURES):
        raise ValueError(f"features must be (N, {len(FEATURES)}), one column per FEATURES, got shape {x.shape}")
    return x


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # exact sigmoid, without overflow for large |x|


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------------ fitting
def fit_calibration(features: np.ndarray, adequate: np.ndarray, *, names: Sequence[str] = DEFAULT_FEATURES,
                    threshold: float = ADEQUATE_CHRF, l2: float = L2, model_sha256: str | None = None,
                    fitted_on: dict[str, Any] | None = None) -> Calibration:
    """Fit the logistic regression of ``adequate`` on the standardised ``names`` columns.

    Args:
        features: ``(N, len(FEATURES))``, as :func:`hypothesis_features` gives them.
        adequate: ``(N,)`` bool, whether each translation is adequate (chrF >= ``threshold``).
        names: the features to use.
        l2: the ridge penalty on the standardised weights (not on the bias).
        model_sha256, fitted_on: recorded in the calibration.

    Returns:
        the :class:`Calibration` maximising the penalised likelihood (Newton's method, float64).
    """
    x = _feature_matrix(features)
    y = np.asarray(adequate, dtype=np.float64).reshape(-1)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} feature rows but {len(y)} labels")
    unknown = [n for n in names if n not in FEATURES]
    if unknown:
        raise UserError(f"unknown features {unknown}; known: {list(FEATURES)}")
    columns = x[:, [FEATURES.index(n) for n in names]]
    if not np.isfinite(columns).all():
        raise UserError("features must be finite")
    mean = columns.mean(axis=0)
    scale = columns.std(axis=0)
    scale[scale < 1e-12] = 1.0  # a constant feature: its weight goes to 0 under the penalty
    z = np.hstack([np.ones((len(y), 1)), (columns - mean) / scale])  # (N, 1 + F): the bias first
    penalty = np.full(z.shape[1], float(l2))
    penalty[0] = 0.0
    w = np.zeros(z.shape[1])
    for _ in range(100):
        p = _sigmoid(z @ w)
        gradient = z.T @ (p - y) + penalty * w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return Calibration(tuple(names), tuple(mean.tolist()), tuple(scale.tolist()), tuple(w[1:].tolist()),
                       float(w[0]), float(threshold), model_sha256, dict(fitted_on or {}))


# ------------------------------------------------------------------------------------------------ figures
def sentence_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """sacreBLEU's sentence-level chrF of each hypothesis against its reference, ``(N,)``."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    return np.array([sacrebleu.sentence_chrf(h, [r]).score for h, r in zip(hypotheses, references)])


def expected_calibration_error(confidence: np.ndarray, outcome: np.ndarray, *, bins: int = ECE_BINS) -> float:
    """``sum_b n_b / N |mean outcome_b - mean confidence_b|`` over ``bins`` equal-width bins of [0, 1]."""
    p = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(outcome, dtype=np.float64)
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            total += inside.sum() / len(p) * abs(y[inside].mean() - p[inside].mean())
    return float(total)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (ties get their mean rank); nan when either side is constant."""
    ra, rb = _ranks(np.asarray(a, dtype=np.float64)), _ranks(np.asarray(b, dtype=np.float64))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    starts = np.cumsum(counts) - counts
    return (starts + (counts - 1) / 2.0)[inverse]


def figures(confidence: np.ndarray, chrf: np.ndarray, features: np.ndarray, *,
            threshold: float = ADEQUATE_CHRF) -> dict[str, Any]:
    """How well ``confidence`` does on sentences with chrF scores ``chrf``: the expected calibration
    error for the event chrF >= ``threshold`` (``ECE_BINS`` bins), the Spearman correlation of the
    confidence with chrF, and the raw baseline's (``mean_log_prob``) beside it."""
    chrf = np.asarray(chrf, dtype=np.float64)
    adequate = chrf >= threshold
    baseline = np.asarray(features)[:, FEATURES.index("mean_log_prob")]
    return {"sentences": int(len(chrf)), "adequate_share": _rounded(adequate.mean()),
            "mean_confidence": _rounded(np.mean(confidence)),
            "ece": _rounded(expected_calibration_error(confidence, adequate)), "ece_bins": ECE_BINS,
            "spearman_chrf": _rounded(spearman(confidence, chrf)),
            "spearman_chrf_mean_log_prob": _rounded(spearman(baseline, chrf))}


def _rounded(value: float) -> float | None:
    """A figure for the file: 4 decimals, None where undefined (JSON has no nan)."""
    return round(float(value), 4) if math.isfinite(value) else None
