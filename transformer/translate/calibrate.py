"""``transformer calibrate``: fit a run's translation confidence on held-out sentences.

The run's model translates the sentences (its validation set by default, or ``--src/--ref``),
each translation is scored against its reference with sentence-level chrF, and a logistic
regression from the translation's features (:mod:`transformer.translate.confidence`) to
"chrF >= 50" is fitted (:mod:`transformer.translate.calibration`) and written to
``RUN_DIR/confidence.json`` with the figures of how well it does on those sentences (the expected
calibration error, Spearman's correlation with chrF).

How a run's validation pairs are read belongs to training (``transformer.training.data_setup``),
which this layer does not import: the command line hands the reader in when the command runs. The
command's parser is in ``cli_args.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from transformer.errors import UserError
from transformer.run.config import DataConfig, RunConfig
from transformer.run.layout import RUN_CONFIG_FILE, WEIGHTS_FILE
from transformer.run.lock import RunLock, storage_errors
from transformer.translate.cli import translator_from_args
from transformer.translate.cli_args import MIN_CALIBRATION_SENTENCES
from transformer.translate.calibration import ADEQUATE_CHRF, DEFAULT_FEATURES, Calibration, file_sha256, fit_calibration
from transformer.translate.confidence import FEATURES, hypothesis_features
from transformer.translate.inputs import read_lines
from transformer.translate.stream import Progress
from transformer.translate.translator import Translator, padded

ValidationPairs = Callable[[DataConfig], list[tuple[str, str]]]  # a run's data settings -> its validation pairs
MIN_EACH = 5  # translations needed on each side of the threshold
BATCH = 64  # sentences translated (and measured) at a time: the progress bar's step
ECE_BINS = 10  # equal-width bins of the expected calibration error


def calibrate_command(args: argparse.Namespace, validation_pairs: ValidationPairs) -> int:
    if args.n_best != 1:
        raise UserError("--n-best is for translate: a calibration is fitted on the best translation of each sentence")
    if args.sentences is not None and args.sentences < 1:
        raise UserError(f"--sentences must be >= 1, got {args.sentences}")
    run_dir = Path(args.run_dir)
    if not (run_dir / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"{run_dir} is not a trained run directory: no {WEIGHTS_FILE}")
    pairs, where = _pairs(args, validation_pairs)
    if args.sentences:
        pairs = pairs[: args.sentences]
    if len(pairs) < MIN_CALIBRATION_SENTENCES:
        raise UserError(f"{where} has {len(pairs)} sentence pairs: too few to fit a calibration (at least "
                        f"{MIN_CALIBRATION_SENTENCES})")
    with storage_errors(run_dir), RunLock(run_dir, command="calibrate"):  # no training or averaging meanwhile
        translator = translator_from_args(args)
        show = not args.no_progress and sys.stderr.isatty()
        translations, features = translate_and_measure(translator, [s for s, _ in pairs], names=DEFAULT_FEATURES,
                                                       progress=show)
        kept = [i for i, t in enumerate(translations) if t is not None]  # sentences with no token are left out
        chrf = sentence_chrf([translations[i] for i in kept], [pairs[i][1] for i in kept])
        adequate = chrf >= ADEQUATE_CHRF
        if min(adequate.sum(), (~adequate).sum()) < MIN_EACH:
            raise UserError(f"{int(adequate.sum())} of {len(kept)} translations of {where} reach chrF "
                            f"{ADEQUATE_CHRF:g}: at least {MIN_EACH} on each side are needed to fit a calibration")
        fitted_on = {"data": where, "sentences": len(kept), "decoding": _decoding(translator),
                     "precision": translator.precision}
        calibration = fit_calibration(features[kept], adequate, names=DEFAULT_FEATURES,
                                      model_sha256=file_sha256(run_dir / WEIGHTS_FILE), fitted_on=fitted_on)
        found = figures(calibration.predict(features[kept]), chrf, features[kept])
        calibration = dataclasses.replace(calibration, figures=found)
        path = calibration.save(run_dir)
    _report(calibration, path)
    if args.json:
        print(json.dumps(calibration.to_json()))
    return 0


def _pairs(args: argparse.Namespace, validation_pairs: ValidationPairs) -> tuple[list[tuple[str, str]], str]:
    """The sentence pairs to calibrate on, and what they are (for messages and the file)."""
    if args.src or args.ref:
        if not (args.src and args.ref):
            raise UserError("give both --src FILE and --ref FILE")
        if args.data_dir:
            raise UserError("--from DIR is for the run's validation set; it does not go with --src/--ref")
        sources, references = read_lines(args.src), read_lines(args.ref)
        if len(sources) != len(references):
            raise UserError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}")
        return list(zip(sources, references)), args.src
    run_config = Path(args.run_dir) / RUN_CONFIG_FILE
    if not (run_config.exists() or run_config.is_symlink()):
        raise UserError(f"{args.run_dir} has no {RUN_CONFIG_FILE} to find its validation set in: give --src FILE "
                        "--ref FILE")
    data = RunConfig.read(run_config).data
    if args.data_dir:
        data = dataclasses.replace(data, data_dir=args.data_dir)
    pairs = validation_pairs(data)
    where = f"the run's validation set ({data.corpus} {data.src_lang}-{data.tgt_lang})"
    if not pairs:
        raise UserError(f"{where} is empty: give --src FILE --ref FILE")
    return list(pairs), where


def translate_and_measure(translator: Translator, sources: Sequence[str], *, names: Sequence[str] = FEATURES,
                          progress: bool = False, batch: int = BATCH) -> tuple[list[str | None], np.ndarray]:
    """The best translation of each source (None for a source with no token to translate) and its
    :data:`~transformer.translate.confidence.FEATURES` (``(N, F)``; ``names``: those wanted, the
    others nan; a row of nan for None). Sources are translated and measured in batches of similar
    length, so that little of the teacher-forced pass is spent on padding."""
    texts: list[str | None] = [None] * len(sources)
    rows = np.full((len(sources), len(FEATURES)), np.nan)
    with warnings.catch_warnings():  # translate_n_best reports a sentence it cuts
        warnings.simplefilter("ignore")
        src_ids = translator.encode_sources(list(sources))
    order = sorted(range(len(sources)), key=lambda i: len(src_ids[i]))
    bar = Progress(len(sources), 0, enabled=progress)
    try:
        for start in range(0, len(order), batch):
            part = order[start : start + batch]
            n_best = translator.translate_n_best([sources[i] for i in part])
            done = [k for k, hyps in enumerate(n_best) if hyps]
            for k in done:
                texts[part[k]] = translator.detokenize(n_best[k][0])
            if done:
                src, mask = padded([src_ids[part[k]] for k in done], translator.vocab.src.pad_id, translator.device)
                rows[[part[k] for k in done]] = hypothesis_features(
                    translator.model, src, mask, [[n_best[k][0]] for k in done], bos_id=translator.vocab.tgt.bos_id,
                    eos_id=translator.vocab.tgt.eos_id, names=names)
            bar.update(len(part), len(part))
    finally:
        bar.close()
    return texts, rows


def _decoding(translator: Translator) -> str:
    """The decoding a calibration was fitted with, in words (it holds for those settings)."""
    d = translator.decoding
    how = {"beam": f"beam {d.beam_size}, alpha {d.alpha:g}", "greedy": "greedy", "sample": "sampling"}[d.strategy]
    return how if translator.precision == "fp32" else f"{how}, {translator.precision}"


def _report(calibration: Calibration, path: Path) -> None:
    f, on = calibration.figures, calibration.fitted_on
    print(f"fitted on {on['sentences']} sentences of {on['data']} ({on['decoding']}):")
    print(f"  P(chrF >= {calibration.threshold:g}) = sigmoid({calibration.bias:+.3f} + sum of weight x "
          "(feature - mean) / scale)")
    print(f"  {'feature':<22} {'weight':>8} {'mean':>8} {'scale':>8}")
    for name, w, m, sd in zip(calibration.features, calibration.weights, calibration.mean, calibration.scale):
        print(f"  {name:<22} {w:>+8.3f} {m:>8.3f} {sd:>8.3f}")
    print(f"on those sentences: ECE {f['ece']:.3f} ({f['ece_bins']} bins), Spearman with chrF "
          f"{_figure(f['spearman_chrf'])} (mean log-probability alone: {_figure(f['spearman_chrf_mean_log_prob'])}); "
          f"{f['adequate_share']:.1%} reach chrF {calibration.threshold:g}, mean confidence {f['mean_confidence']:.1%}")
    print(f"wrote {path}")


def _figure(value: float | None) -> str:
    """A correlation, or "undefined" (a constant side has no ranks to correlate)."""
    return "undefined" if value is None else f"{value:.3f}"


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
