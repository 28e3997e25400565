"""How well the translation confidence ranks translations, and how well it is calibrated.

For each run directory (a Multi30k run; its language pair from its ``run_config.json``):

1. the confidence is fitted on the run's validation set, as ``transformer calibrate RUN_DIR
   --from DIR`` fits it (which writes the run's ``confidence.json``; ``--keep`` uses the one the
   run has instead);
2. the run translates Multi30k ``test_2016_flickr`` (1,000 sentences; beam 4, alpha 0.6, the
   settings it was calibrated with), and each translation gets its confidence and its sentence
   chrF (sacreBLEU's ``sentence_chrf``).

Reported per run: the Spearman correlation of the confidence with chrF, beside the raw
length-normalised log-probability's (the baseline); the expected calibration error (ECE) for
the event "chrF >= 50" in 10 equal-width bins, beside the ECE of ``exp(mean log-probability)``
(the geometric mean of the token probabilities) taken as a probability; the share of translations
that reach chrF 50; the reliability table (per bin: sentences, mean confidence, share reaching
chrF 50). The targets: Spearman >= 0.45 and ECE <= 0.08 (PASS or FAIL).

    python benchmarks/confidence.py --run-dir runs/multi30k-de-en --run-dir runs/multi30k-fr-en --from ../shared/data --out confidence.json
    python benchmarks/confidence.py --run-dir runs/m30k --from ../shared/data --quick   # 100 sentences each
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from transformer.cli import main as transformer_main
from transformer.corpus.registry import corpus_pairs, fetch
from transformer.run.directory import run_languages
from transformer.translate.calibrate import (
    ECE_BINS, expected_calibration_error, sentence_chrf, spearman, translate_and_measure,
)
from transformer.translate.calibration import ADEQUATE_CHRF, Calibration
from transformer.translate.confidence import FEATURES
from transformer.translate.translator import load_translator

TARGET_SPEARMAN = 0.45
TARGET_ECE = 0.08


def reliability(confidence: np.ndarray, adequate: np.ndarray, bins: int = ECE_BINS) -> list[dict]:
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    rows = []
    for b in range(bins):
        inside = which == b
        if inside.any():
            rows.append({"bin": f"{b / bins:.1f}-{(b + 1) / bins:.1f}", "sentences": int(inside.sum()),
                         "confidence": round(float(confidence[inside].mean()), 3),
                         "adequate": round(float(adequate[inside].mean()), 3)})
    return rows


def measure(run_dir: str, args: argparse.Namespace) -> dict:
    src, tgt = run_languages(run_dir)
    if not (src and tgt):
        raise SystemExit(f"{run_dir}: its run_config.json does not name its languages")
    if not args.keep:
        argv = ["calibrate", run_dir, "--no-progress"] + (["--from", args.data_dir] if args.data_dir else []) \
            + (["--sentences", "100"] if args.quick else [])
        if transformer_main(argv) != 0:
            raise SystemExit(f"{run_dir}: calibrate failed")
    calibration = Calibration.load(run_dir)
    if calibration is None:
        raise SystemExit(f"{run_dir} has no confidence.json: run without --keep")
    pairs = corpus_pairs("multi30k", src=src, tgt=tgt, split=args.split,
                         directory=fetch("multi30k", local_dir=args.data_dir))
    pairs = pairs[:100] if args.quick else pairs
    translator = load_translator(run_dir)
    start = time.perf_counter()
    translations, features = translate_and_measure(translator, [s for s, _ in pairs])
    seconds = time.perf_counter() - start
    chrf = sentence_chrf(translations, [r for _, r in pairs])
    confidence = calibration.predict(features)
    adequate = chrf >= ADEQUATE_CHRF
    mean_log_prob = features[:, FEATURES.index("mean_log_prob")]
    result = {
        "run_dir": run_dir, "direction": f"{src}-{tgt}", "split": args.split, "sentences": len(pairs),
        "calibrated_on": calibration.fitted_on, "features": list(calibration.features),
        "adequate_share": round(float(adequate.mean()), 4),
        "spearman": round(spearman(confidence, chrf), 4),
        "spearman_mean_log_prob": round(spearman(mean_log_prob, chrf), 4),
        "ece": round(expected_calibration_error(confidence, adequate), 4), "ece_bins": ECE_BINS,
        "ece_exp_mean_log_prob": round(expected_calibration_error(np.exp(mean_log_prob), adequate), 4),
        "validation": calibration.figures, "seconds": round(seconds, 1),
        "reliability": reliability(confidence, adequate),
    }
    result["pass"] = result["spearman"] >= TARGET_SPEARMAN and result["ece"] <= TARGET_ECE
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", action="append", required=True, help="a trained Multi30k run (repeatable)")
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of the corpora (e.g. ../shared/data)")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--keep", action="store_true", help="use each run's confidence.json as it is (no calibrate)")
    parser.add_argument("--quick", action="store_true",
                        help="100 validation and 100 test sentences, to check the script")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    results = [measure(run_dir, args) for run_dir in args.run_dir]
    print(f"\nmulti30k {args.split}, beam 4, alpha 0.6; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| direction | sentences | reach chrF 50 | Spearman (confidence) | Spearman (mean log-prob) | "
          f"ECE ({ECE_BINS} bins) | ECE of exp(mean log-prob) | |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['direction']} | {r['sentences']} | {r['adequate_share']:.1%} | {r['spearman']:.3f} | "
              f"{r['spearman_mean_log_prob']:.3f} | {r['ece']:.3f} | {r['ece_exp_mean_log_prob']:.3f} | "
              f"{'PASS' if r['pass'] else 'FAIL'} |")
    for r in results:
        print(f"\n{r['direction']} reliability (bin: sentences, mean confidence, share reaching chrF 50):")
        for row in r["reliability"]:
            print(f"  {row['bin']}: {row['sentences']:4d}  {row['confidence']:.3f}  {row['adequate']:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
