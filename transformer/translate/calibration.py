"""A translation's confidence: the probability that it is adequate, from its features
(:mod:`~transformer.translate.confidence`).

A :class:`Calibration` uses some of the :data:`~transformer.translate.confidence.FEATURES`
(:data:`DEFAULT_FEATURES` when fitted by ``transformer calibrate``) in a logistic regression on
standardised features that predicts the event "sentence-level chrF >= 50" (``ADEQUATE_CHRF``):
``confidence = sigmoid(bias + sum_i w_i (x_i - mean_i) / scale_i)``. Fitted on a run's validation
data, it is stored in ``RUN_DIR/confidence.json`` (format below) with the sha256 of the
``model.safetensors`` it was fitted for: a changed model needs a new calibration (the old one is
not loaded). :func:`attach_confidence` gives each hypothesis its confidence.

``confidence.json``::

    {"format": "transformer-confidence", "version": 1,
     "event": {"metric": "chrF", "threshold": 50.0},
     "features": ["mean_log_prob", ...], "mean": [...], "scale": [...], "weights": [...],
     "bias": 0.3, "model_sha256": "...",
     "fitted_on": {"data": ..., "sentences": ..., "decoding": ...},
     "figures": {"ece": ..., "ece_bins": 10, "spearman_chrf": ..., ...}}
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
from torch import Tensor

from transformer.decoding import Hypothesis
from transformer.errors import UserError
from transformer.model import Transformer
from transformer.run.layout import CONFIDENCE_FILE, WEIGHTS_FILE
from transformer.run_files import RunFileError, read_json, write_atomic
from transformer.translate.confidence import FEATURES, hypothesis_features

# Chosen on the Multi30k validation sets by 10-fold cross-validation: no other feature added to these
# two improved the log-loss or the rank correlation with chrF beyond noise (docs/decoding.md, Confidence).
DEFAULT_FEATURES = ("mean_log_prob", "coverage_penalty")
ADEQUATE_CHRF = 50.0  # the event a confidence is the probability of: sentence-level chrF >= this
FORMAT, VERSION = "transformer-confidence", 1
L2 = 1.0  # the ridge penalty on the standardised weights (a prior that keeps separable data finite)


def attach_confidence(model: Transformer, src: Tensor, src_mask: Tensor, results: list[list[Hypothesis]],
                      calibration: Calibration | None, *, bos_id: int, eos_id: int,
                      memory: Tensor | None = None) -> None:
    """Set ``h.confidence`` for every hypothesis of ``results`` (see
    :func:`~transformer.translate.confidence.hypothesis_features` for the arguments; only the
    calibration's features are computed). Without a calibration nothing is computed and every
    ``confidence`` stays None: an uncalibrated number in [0, 1] would read as a probability without
    being one."""
    if calibration is None or not any(results):
        return
    features = hypothesis_features(model, src, src_mask, results, bos_id=bos_id, eos_id=eos_id, memory=memory,
                                   names=calibration.features)
    for h, p in zip((h for hyps in results for h in hyps), calibration.predict(features)):
        h.confidence = float(p)


# ------------------------------------------------------------------------------------------------ calibration
@dataclass(frozen=True)
class Calibration:
    """A fitted mapping from :data:`~transformer.translate.confidence.FEATURES` to the probability
    that a translation is adequate (sentence chrF >= ``threshold``): a logistic regression on
    standardised features.

    ``features``: the names used (a subset of ``FEATURES``); ``mean``, ``scale``: their
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
        ``FEATURES``, as :func:`~transformer.translate.confidence.hypothesis_features` gives them)."""
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
        features: ``(N, len(FEATURES))``, as :func:`~transformer.translate.confidence.hypothesis_features` gives them.
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

