"""Translation quality on real corpora: train within a time budget, score with sacreBLEU.

The recipe (:func:`recipe`; how each choice was made is in docs/quality.md): a post-LN
Transformer of d_model 256, 3 + 3 layers, 4 heads, d_ff 1024, dropout 0.2 (attention 0.1), a
joint BPE vocabulary of 5,000 (one embedding for source, target and output, the default with a
joint vocabulary), batches of about 5,000 padded tokens, label smoothing 0.1, AdamW(0.9, 0.98,
1e-9) with decoupled weight decay 0.1 of the weight matrices, word dropout 0.1
(``train.word_dropout``), the paper's schedule (warmup 500, scale 0.6) whose rate falls linearly
to zero over the last 30% of the time (``train.cooldown``), checkpoints every 100 steps; the last 5 are averaged
(paper 6.1). Validation and test sets are scored cased and detokenized with beam 4,
length penalty 0.6. Precision: training under bf16 autocast where the device has bf16 matrix
units (CUDA from compute capability 8.0, CPUs with AVX-512 bf16 or AMX) and in fp32 elsewhere
(``train.precision=auto``); decoding on the device the run trained on, in bf16 where it has bf16 units, else fp32.

Every run records what makes runs of different days comparable: the day's matmul peak, the
CPU, steps, epochs and target tokens seen. ``--milestones`` stops training at those minutes,
scores validation and test with the average of the last checkpoints, and goes on with the same
schedule: the time to a quality comes from one run (before the cooldown starts, the model at
minute 8 of a 30-minute run is the model of a run without one). ``--set`` changes one setting of the recipe (an ablation); ``--tune-average`` picks how
many of the last checkpoints to average and ``--tune-decoding`` beam size and length penalty,
both on validation. Settings are chosen on validation; test_2016 is reported beside it, never
chosen on.

    python benchmarks/multi30k.py --corpus multi30k --src-lang de --tgt-lang en --minutes 30 --from ../shared/data
    python benchmarks/multi30k.py --src-lang fr --minutes 30 --from ../shared/data
    python benchmarks/multi30k.py --minutes 10 --milestones 4,6,8 --set model.dropout=0.3 \\
        --label "dropout 0.3" --run-dir /tmp/ablation-dropout --from ../shared/data
    python benchmarks/multi30k.py --table /tmp/ablation-*/benchmark.json   # the ablation table (markdown)
    python benchmarks/multi30k.py --steps 6900 --set train.device=cuda --from ../shared/data
                                  # a 30-minute CPU run's steps replayed on a GPU (scored there too)
    python benchmarks/multi30k.py --minutes 0.5 --test-sentences 20 --run-dir /tmp/m30k-check --from ../shared/data
                                                                    # a check of the script, not a result
    python benchmarks/multi30k.py --corpus builtin --src-lang fr --minutes 0.1 --set model.preset=tiny \
        --peak-sizes 256 --run-dir /tmp/builtin-check           # the same check without a corpus to read
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import time
from pathlib import Path

import torch

from train_step import cpu_model, matmul_peak
from transformer.cpu.training_precision import fast_bf16
from transformer.decoding import DecodeConfig
from transformer.training.averaging import average_last
from transformer.run.model import WEIGHTS_FILE, load_weights
from transformer.run.config import DataConfig, RunConfig, TrainConfig
from transformer.run.checkpoints import list_checkpoints
from transformer.training.trainer import Trainer
from transformer.translate.evaluation import score
from transformer.inference_precision import resolve_device
from transformer.translate.translator import Translator

BEAM = DecodeConfig(strategy="beam", beam_size=4, alpha=0.6)
AVERAGE = 5  # checkpoints averaged into the scored model
AVERAGED_FILE = "averaged.safetensors"
# the recipe before the choices of docs/quality.md (joint BPE 8,000, no cooldown, Adam without weight
# decay, no word dropout): the fine-tuning and RNN benchmarks' documented tables were measured with it
FIRST_RECIPE = ("data.vocab_size=8000", "train.cooldown=0", "train.optimizer=adam", "train.weight_decay=0",
                "train.word_dropout=0")


def recipe(*, corpus: str, src: str, tgt: str, data_dir: str | None, minutes: float, seed: int = 0,
           overrides: tuple[str, ...] | list[str] = ()) -> RunConfig:
    """The benchmark's run configuration (the recipe in this module's docstring), with ``overrides``
    (``section.key=value``) applied."""
    cfg = RunConfig(
        data=DataConfig(corpus=corpus, src_lang=src, tgt_lang=tgt, data_dir=data_dir,
                        vocab_size=5000, max_len=100, max_tokens=5000, seed=seed),
        model={"preset": "small", "d_model": 256, "n_heads": 4, "d_ff": 1024, "n_encoder_layers": 3,
               "n_decoder_layers": 3, "dropout": 0.2, "attention_dropout": 0.1},
        train=TrainConfig(epochs=1000, time_limit=minutes * 60, lr_scale=0.6, warmup=500, cooldown=0.3,
                          optimizer="adamw", weight_decay=0.1, word_dropout=0.1, precision="auto",
                          seed=seed, log_every=50, eval_every=500, eval_sentences=200, save_every=100,
                          keep_last=AVERAGE),
    )
    return cfg.with_overrides(list(overrides)) if overrides else cfg


def run_device(run_dir: Path) -> torch.device:
    """Where the run trained (its ``train.device``; ``auto`` is the GPU where there is one): it is
    scored there too."""
    name = json.loads((run_dir / "run_config.json").read_text())["train"]["device"]
    return resolve_device(name)


def decode_in_bf16(device: torch.device | str = "cpu") -> bool:
    """Decode in bf16 only where the device multiplies bf16 in hardware."""
    return fast_bf16(device)


def load_scoring_translator(run_dir: Path, *, weights: Path | None = None,
                            decoding: DecodeConfig = BEAM) -> Translator:
    """The run's model (or ``weights`` loaded into it) prepared for decoding, on the run's device."""
    device = run_device(run_dir)
    precision = "bf16" if decode_in_bf16(device) else "fp32"
    translator = Translator.from_run_dir(run_dir, decoding=decoding, precision=precision, device=device)
    if weights is not None:
        # the CPU engine packed the weights when the Translator prepared the model: give the model
        # back unprepared, load the other weights, and prepare it again
        translator.close()
        load_weights(translator.model, weights)
        translator = Translator(translator.model, translator.vocab, decoding=decoding, precision=precision,
                                device=device)
    return translator


def score_with(translator: Translator, pairs: list[tuple[str, str]]) -> dict:
    """BLEU and chrF of ``translator`` on ``pairs`` (source, reference)."""
    t0 = time.perf_counter()
    hyps = translator.translate([s for s, _ in pairs])
    seconds = time.perf_counter() - t0
    s = score(hyps, [t for _, t in pairs])
    return {"bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2), "decode_seconds": round(seconds, 1),
            "signature": s.bleu_signature}


def score_run(run_dir: Path, pairs: list[tuple[str, str]], *, weights: Path | None = None,
              decoding: DecodeConfig = BEAM) -> dict:
    """Beam 4 (alpha 0.6) BLEU and chrF of the run's model, or of ``weights`` loaded into it, on ``pairs``."""
    translator = load_scoring_translator(run_dir, weights=weights, decoding=decoding)
    try:
        return score_with(translator, pairs)
    finally:
        translator.close()


def score_sets(run_dir: Path, sets: dict[str, list[tuple[str, str]]], *, weights: Path | None = None,
               decoding: DecodeConfig = BEAM) -> dict[str, dict]:
    """:func:`score_run` on several sets with one prepared model."""
    translator = load_scoring_translator(run_dir, weights=weights, decoding=decoding)
    try:
        return {name: score_with(translator, pairs) for name, pairs in sets.items()}
    finally:
        translator.close()


def average_now(run_dir: Path, n: int = AVERAGE) -> tuple[Path, str]:
    """Average the run's last ``n`` checkpoints into ``averaged.safetensors``; the file and a label."""
    used = average_last(run_dir, min(n, len(list_checkpoints(run_dir))), run_dir / AVERAGED_FILE)
    return run_dir / AVERAGED_FILE, f"average of last {len(used)} ({used[0].name}..{used[-1].name})"


def tune_average(run_dir: Path, sets: dict[str, list[tuple[str, str]]], windows: list[int], *,
                 ema: bool = False) -> dict:
    """Average the last N checkpoints for each N of ``windows`` (and, for a run with ``train.ema``,
    take its moving average of the weights as a candidate too, ``average`` 0), keep the candidate
    with the best validation BLEU (ties: the smaller N, the moving average first) in
    ``averaged.safetensors``, and score test with it."""
    grid = []
    if ema:  # the run's model.safetensors is its moving average
        grid.append({"average": 0, "model": "moving average of the weights",
                     "valid": score_run(run_dir, sets["valid"], weights=run_dir / WEIGHTS_FILE)})
    for n in sorted(set(windows)):
        weights, label = average_now(run_dir, n)
        grid.append({"average": n, "model": label, "valid": score_run(run_dir, sets["valid"], weights=weights)})
    best = max(grid, key=lambda g: (g["valid"]["bleu"], -g["average"]))
    if best["average"]:
        weights, _ = average_now(run_dir, best["average"])
    else:
        weights = run_dir / AVERAGED_FILE
        shutil.copyfile(run_dir / WEIGHTS_FILE, weights)
    return {**best, "test": score_run(run_dir, sets["test"], weights=weights), "grid": grid}


def tune_decoding(run_dir: Path, weights: Path, valid: list[tuple[str, str]], beams: list[int],
                  alphas: list[float]) -> tuple[DecodeConfig, list[dict]]:
    """The beam size and length penalty with the best validation BLEU (ties: the smaller beam,
    then the smaller alpha), and every setting's scores."""
    translator = load_scoring_translator(run_dir, weights=weights)
    grid = []
    try:
        for beam in beams:
            for alpha in alphas:
                s = score_with(translator.with_decoding(beam_size=beam, alpha=alpha), valid)
                grid.append({"beam": beam, "alpha": alpha, **s})
                print(f"  validation, beam {beam}, alpha {alpha}: BLEU {s['bleu']:.2f} chrF {s['chrf']:.2f}", flush=True)
    finally:
        translator.close()
    best = max(grid, key=lambda r: (r["bleu"], -r["beam"], -r["alpha"]))
    return DecodeConfig(strategy="beam", beam_size=best["beam"], alpha=best["alpha"]), grid


def machine(peak_sizes: list[int] | None = None) -> dict:
    """What makes runs of different days comparable: the CPU, torch, and today's matmul peak (of
    ``peak_sizes`` square products, default :func:`train_step.matmul_peak`'s)."""
    cpu = cpu_model() or platform.processor() or platform.machine()
    print("measuring the matmul peak ...", flush=True)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"cpu": cpu, "gpu": gpu, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "date": datetime.date.today().isoformat(),
            "peak_gflops": {"fp32": round(matmul_peak(torch.float32, sizes=peak_sizes) / 1e9),
                            "bf16": round(matmul_peak(torch.bfloat16, sizes=peak_sizes) / 1e9)
                            if fast_bf16("cpu") else None}}


def milestone_minutes(text: str | None, minutes: float) -> list[float]:
    """The sorted minutes to stop and score at, ending with ``minutes``."""
    marks = sorted({float(m) for m in (text or "").split(",") if m.strip()} | {minutes})
    if marks[0] <= 0 or marks[-1] > minutes:
        raise SystemExit(f"--milestones must lie in (0, --minutes={minutes}], got {text}")
    return marks


def run(args: argparse.Namespace) -> dict:
    run_dir = Path(args.run_dir or f"runs/{args.corpus}-{args.src}-{args.tgt}")
    if run_dir.is_dir() and list_checkpoints(run_dir):
        raise SystemExit(f"{run_dir} already holds a run: choose another --run-dir (the benchmark starts from scratch)")
    info = machine(args.peak_sizes)
    print(f"{info['cpu']}, {info['threads']} threads, torch {info['torch']}; matmul peak fp32 "
          f"{info['peak_gflops']['fp32']} GFLOP/s, bf16 {info['peak_gflops']['bf16']} GFLOP/s", flush=True)
    start = time.perf_counter()
    trained = 0.0
    rows = []
    trainer = result = None
    kept = max([args.average, *(args.tune_average or [])])
    keep = [f"train.keep_last={kept}"] if kept > AVERAGE else []
    steps = [f"train.max_steps={args.steps}", "train.time_limit=null"] if args.steps else []
    cfg = recipe(corpus=args.corpus, src=args.src, tgt=args.tgt, data_dir=args.data_dir,
                 minutes=args.minutes, seed=args.seed, overrides=steps + args.set + keep)
    for mark in milestone_minutes(args.milestones, args.minutes):
        # each segment pauses the whole run at its mark, so the schedule (and its cooldown) stays the run's
        trainer = Trainer(cfg, run_dir)
        result = trainer.train(pause_at=mark * 60 if mark < args.minutes else None)
        trained += result.seconds
        sets = {"valid": trainer.data.valid_text[: args.valid_sentences or None],
                "test": trainer.data.test_text[: args.test_sentences or None]}
        weights, label = average_now(run_dir, args.average)
        scores = score_sets(run_dir, sets, weights=weights)
        rows.append({"minutes": round(trained / 60, 2), "steps": result.steps,
                     "epochs": round(result.steps / trainer.steps_per_epoch, 2),
                     "target_tokens": result.target_tokens, "model": label,
                     "valid": scores["valid"], "test": scores["test"],
                     "gap": round(scores["valid"]["bleu"] - scores["test"]["bleu"], 2)})
        r = rows[-1]
        print(f"minute {r['minutes']:.1f}: step {r['steps']}, epoch {r['epochs']:.1f}, {r['target_tokens']:,} target "
              f"tokens; {label}: validation BLEU {r['valid']['bleu']:.2f}, test BLEU {r['test']['bleu']:.2f}", flush=True)
    assert trainer is not None and result is not None
    # the run's own model: its best checkpoint on validation, or its moving average with train.ema
    final = {"averaged": rows[-1],
             "best_on_validation": {"model": f"moving average of the weights (decay {cfg.train.ema})" if cfg.train.ema
                                    else "best checkpoint on validation (greedy BLEU, 200 sentences)",
                                    **score_sets(run_dir, sets)}}
    if args.tune_average:
        final["tuned_average"] = tune_average(run_dir, sets, args.tune_average, ema=bool(cfg.train.ema))
    if args.tune_decoding:
        decoding, grid = tune_decoding(run_dir, run_dir / AVERAGED_FILE, sets["valid"], args.tune_beams,
                                       args.tune_alphas)
        chosen = score_sets(run_dir, {"test": sets["test"]}, weights=run_dir / AVERAGED_FILE, decoding=decoding)
        final["tuned_decoding"] = {"beam": decoding.beam_size, "alpha": decoding.alpha, "grid": grid,
                                   "valid": next(g for g in grid if g["beam"] == decoding.beam_size
                                                 and g["alpha"] == decoding.alpha),
                                   "test": chosen["test"]}
    reached = next((r["minutes"] for r in rows if r["test"]["bleu"] >= args.target), None) if args.target else None
    return {"label": args.label or (", ".join(args.set) if args.set else "recipe"), "settings": list(args.set),
            "corpus": args.corpus, "direction": f"{args.src}-{args.tgt}", "seed": args.seed,
            "machine": info, "precision": {"train": trainer.precision, "decode": "bf16" if decode_in_bf16(trainer.device) else "fp32"},
            "device": str(trainer.device),
            "valid_sentences": len(sets["valid"]), "test_sentences": len(sets["test"]),
            "train_steps": result.steps, "train_seconds": round(trained), "epochs": rows[-1]["epochs"],
            "target_tokens": result.target_tokens, "milestones": rows, "final": final,
            "target": args.target, "minutes_to_target": reached,
            "wall_seconds": round(time.perf_counter() - start), "run_config": cfg.to_dict(),
            "weights": str(run_dir / WEIGHTS_FILE), "run_dir": str(run_dir)}


def report(summary: dict) -> None:
    print(f"\n{summary['corpus']} {summary['direction']} ({summary['label']}): {summary['train_steps']} steps, "
          f"{summary['epochs']:.1f} epochs, {summary['target_tokens']:,} target tokens in "
          f"{summary['train_seconds'] / 60:.1f} min of training ({summary['precision']['train']}); matmul peak bf16 "
          f"{summary['machine']['peak_gflops']['bf16']} GFLOP/s; decoded in {summary['precision']['decode']}")
    print(f"{'minute':>6} {'steps':>6} {'epochs':>6} {'valid BLEU':>10} {'test BLEU':>9} {'gap':>5} "
          f"{'valid chrF':>10} {'test chrF':>9}")
    for r in summary["milestones"]:
        print(f"{r['minutes']:>6.1f} {r['steps']:>6} {r['epochs']:>6.1f} {r['valid']['bleu']:>10.2f} "
              f"{r['test']['bleu']:>9.2f} {r['gap']:>5.2f} {r['valid']['chrf']:>10.2f} {r['test']['chrf']:>9.2f}")
    best = summary["final"]["best_on_validation"]
    print(f"{best['model']}: valid BLEU {best['valid']['bleu']:.2f}, test BLEU {best['test']['bleu']:.2f}")
    if chosen := summary["final"].get("tuned_average"):
        def name(n: int) -> str:
            return "the moving average" if n == 0 else f"last {n}"
        print(f"averaging chosen on validation: {name(chosen['average'])} (" + ", ".join(
            f"{name(g['average'])}: {g['valid']['bleu']:.2f}" for g in chosen["grid"])
            + f"); test BLEU {chosen['test']['bleu']:.2f}")
    if tuned := summary["final"].get("tuned_decoding"):
        print(f"decoding chosen on validation: beam {tuned['beam']}, alpha {tuned['alpha']}: valid BLEU "
              f"{tuned['valid']['bleu']:.2f}, test BLEU {tuned['test']['bleu']:.2f}")
    if summary["target"]:
        reached = summary["minutes_to_target"]
        print(f"test BLEU >= {summary['target']}: " + (f"at minute {reached:.1f}" if reached else "not reached"))
    print(f"signature: {summary['milestones'][-1]['test']['signature']}")


def table(paths: list[Path]) -> None:
    """The ablation table (markdown) of benchmark.json files; the first is the baseline, to which
    each row's validation BLEU is compared at the same minute. A run's last row adds the decoding
    ``--tune-decoding`` chose on validation and its scores (``-`` for runs without it)."""
    runs = [json.loads(p.read_text()) for p in paths]
    base = {round(r["minutes"]): r for r in runs[0]["milestones"]}  # compared at the same minute
    print("| change | minutes | steps | epochs | target tokens | valid BLEU | test BLEU | gap | valid vs first "
          "| decoding chosen on valid: valid / test BLEU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for run_ in runs:
        for i, r in enumerate(run_["milestones"]):
            last = i == len(run_["milestones"]) - 1
            label = run_["label"] if last else f"{run_['label']} (at minute {r['minutes']:.0f})"
            same = base.get(round(r["minutes"]))
            delta = f"{r['valid']['bleu'] - same['valid']['bleu']:+.2f}" if same else "-"
            tokens = f"{r['target_tokens'] / 1e6:.1f}M" if r.get("target_tokens") else "-"
            tuned = run_["final"].get("tuned_decoding") if last else None
            chosen = (f"beam {tuned['beam']}, alpha {tuned['alpha']}: {tuned['valid']['bleu']:.2f} / "
                      f"{tuned['test']['bleu']:.2f}") if tuned else "-"
            print(f"| {label} | {r['minutes']:.1f} | {r['steps']:,} | {r['epochs']:.1f} | {tokens} | "
                  f"{r['valid']['bleu']:.2f} | {r['test']['bleu']:.2f} | {r['gap']:+.2f} | {delta} | {chosen} |")
    peaks = sorted({r["machine"]["peak_gflops"]["bf16"] for r in runs if r["machine"]["peak_gflops"]["bf16"]})
    print(f"\nbf16 matmul peak of the runs: {', '.join(map(str, peaks))} GFLOP/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="multi30k", choices=("multi30k", "tatoeba", "builtin"),
                        help="the corpus (builtin: the generated French-English one, --src-lang fr, for checks)")
    parser.add_argument("--src-lang", dest="src", default="de")
    parser.add_argument("--tgt-lang", dest="tgt", default="en")
    parser.add_argument("--minutes", type=float, default=30.0, help="training time budget")
    parser.add_argument("--steps", type=int, default=0,
                        help="train for this many steps instead of --minutes (the cooldown follows the steps): "
                        "replays a CPU run's step count on a faster device, e.g. a GPU (--set train.device=cuda)")
    parser.add_argument("--milestones", default=None,
                        help="comma-separated minutes before --minutes at which to score too (e.g. 4,6,8,10,15,20)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change a setting of the recipe (e.g. model.dropout=0.3); repeatable")
    parser.add_argument("--label", default=None, help="the run's name in tables (default: its --set changes)")
    parser.add_argument("--average", type=int, default=AVERAGE, help="checkpoints averaged into the scored model")
    parser.add_argument("--target", type=float, default=37.0,
                        help="report the first milestone where test BLEU reaches this (0: none)")
    parser.add_argument("--tune-average", type=lambda s: [int(x) for x in s.split(",")], default=None,
                        metavar="N,N,...", help="at the end, choose how many of the last checkpoints to average "
                        "on validation (e.g. 5,10,20; the run keeps that many)")
    parser.add_argument("--tune-decoding", action="store_true",
                        help="at the end, choose beam size and length penalty on validation (for the "
                        "average --tune-average chose)")
    parser.add_argument("--tune-beams", type=lambda s: [int(x) for x in s.split(",")], default=[4, 6, 8])
    parser.add_argument("--tune-alphas", type=lambda s: [float(x) for x in s.split(",")],
                        default=[0.6, 0.8, 1.0, 1.2, 1.3, 1.4, 1.5, 1.6, 2.0])
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of the corpora")
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--valid-sentences", type=int, default=0, help="score only the first N validation sentences")
    parser.add_argument("--test-sentences", type=int, default=0,
                        help="score only the first N test sentences (0: all; fewer are a check, not a result)")
    parser.add_argument("--peak-sizes", nargs="+", type=int, default=None,
                        help="sizes of the square matmuls of the recorded peak (default: 2048 3072 4096)")
    parser.add_argument("--table", nargs="+", type=Path, default=None, metavar="BENCHMARK_JSON",
                        help="print the ablation table of these benchmark.json files (the first is the baseline)")
    args = parser.parse_args()
    if args.steps < 0 or (args.steps and args.milestones):
        parser.error("--steps must be >= 1, and goes without --milestones (which are minutes)")
    if args.table:
        table(args.table)
        return
    summary = run(args)
    (Path(summary["run_dir"]) / "benchmark.json").write_text(json.dumps(summary, indent=2) + "\n")
    report(summary)


if __name__ == "__main__":
    main()
