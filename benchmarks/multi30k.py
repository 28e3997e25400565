"""Translation quality on real corpora: train within a time budget, score with sacreBLEU.

The recipe (documented in the README): a post-LN Transformer of d_model 256, 3 + 3 layers,
4 heads, d_ff 1024, dropout 0.2, a joint BPE vocabulary of 8,000, batches of about 5,000
padded tokens, label smoothing 0.1, Adam(0.9, 0.98, 1e-9) with the paper's schedule (warmup
500, scale 0.6), checkpoints every 100 steps; the last 5 are averaged (paper 6.1). Test sets are
scored cased and detokenized with beam 4, length penalty 0.6. Precision: training under bf16
autocast where the device has bf16 matrix units (CUDA from compute capability 8.0, CPUs with
AVX-512 bf16 or AMX) and in fp32 elsewhere (``train.precision=auto``: PyTorch emulates bf16
products without those units, far slower than fp32); decoding on the CPU in bf16 where it has
bf16 units, else fp32. Both precisions are printed and recorded in ``benchmark.json``.

    python benchmarks/multi30k.py --corpus multi30k --src de --tgt en --minutes 30 --from ../shared/data
    python benchmarks/multi30k.py --corpus tatoeba --src fr --tgt en --minutes 30 --from ../shared/data
    python benchmarks/multi30k.py --minutes 0.5 --test-sentences 20 --run-dir /tmp/m30k-check --from ../shared/data
                                                                    # a check of the script, not a result
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from transformer.training.checkpoint import WEIGHTS_FILE, load_weights
from transformer.decoding import DecodeConfig
from transformer.translate.evaluation import score
from transformer.cpu.precision import fast_bf16
from transformer.training.config import DataConfig, RunConfig, TrainConfig
from transformer.training.averaging import average_last
from transformer.training.state import list_checkpoints
from transformer.training.trainer import Trainer
from transformer.translate.translator import Translator


BEAM = DecodeConfig(strategy="beam", beam_size=4, alpha=0.6)


def recipe(*, corpus: str, src: str, tgt: str, data_dir: str | None, minutes: float, seed: int = 0) -> RunConfig:
    """The benchmark's run configuration (the recipe in this module's docstring)."""
    return RunConfig(
        data=DataConfig(corpus=corpus, src_lang=src, tgt_lang=tgt, data_dir=data_dir,
                        vocab_size=8000, max_len=100, max_tokens=5000, seed=seed),
        model={"preset": "small", "d_model": 256, "n_heads": 4, "d_ff": 1024, "n_encoder_layers": 3,
               "n_decoder_layers": 3, "dropout": 0.2, "attention_dropout": 0.1},
        train=TrainConfig(epochs=1000, time_limit=minutes * 60, lr_scale=0.6, warmup=500, precision="auto",
                          seed=seed, log_every=50, eval_every=500, eval_sentences=200, save_every=100,
                          keep_last=5),
    )


def decode_in_bf16() -> bool:
    """Decode in bf16 only where the CPU multiplies bf16 in hardware."""
    return fast_bf16("cpu")


def score_run(run_dir: Path, pairs: list[tuple[str, str]], *, weights: Path | None = None) -> dict:
    """Beam 4 (alpha 0.6) BLEU and chrF of the run's model, or of ``weights`` loaded into it, on ``pairs``."""
    bf16 = decode_in_bf16()
    translator = Translator.from_run_dir(run_dir, decoding=BEAM, bf16=bf16)
    if weights is not None:
        # the CPU engine packed the weights when the Translator prepared the model: give the model
        # back unprepared, load the other weights, and prepare it again
        translator.close()
        load_weights(translator.model, weights)
        translator = Translator(translator.model, translator.vocab, decoding=BEAM, bf16=bf16)
    try:
        t0 = time.perf_counter()
        hyps = translator.translate([s for s, _ in pairs])
        seconds = time.perf_counter() - t0
    finally:
        translator.close()
    s = score(hyps, [t for _, t in pairs])
    return {"bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2), "decode_seconds": round(seconds, 1),
            "signature": s.bleu_signature}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="multi30k", choices=("multi30k", "tatoeba"))
    parser.add_argument("--src", default="de")
    parser.add_argument("--tgt", default="en")
    parser.add_argument("--minutes", type=float, default=30.0, help="training time budget")
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of the corpora")
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-sentences", type=int, default=0,
                        help="score only the first N test sentences (0: all; fewer are a check, not a result)")
    args = parser.parse_args()
    run_dir = Path(args.run_dir or f"runs/{args.corpus}-{args.src}-{args.tgt}")

    start = time.perf_counter()
    trainer = Trainer(recipe(corpus=args.corpus, src=args.src, tgt=args.tgt, data_dir=args.data_dir,
                             minutes=args.minutes, seed=args.seed), run_dir)
    result = trainer.train()
    test = trainer.data.test_text[: args.test_sentences or None]
    precision = {"train": trainer.precision, "decode": "bf16" if decode_in_bf16() else "fp32"}
    rows = [{"model": "best on validation", **score_run(run_dir, test)}]
    used = average_last(run_dir, min(5, len(list_checkpoints(run_dir))), run_dir / "averaged.safetensors")
    rows.append({"model": f"average of last 5 ({used[0].name}..{used[-1].name})",
                 **score_run(run_dir, test, weights=run_dir / "averaged.safetensors")})
    summary = {"corpus": args.corpus, "direction": f"{args.src}-{args.tgt}", "test_sentences": len(test),
               "train_steps": result.steps, "train_seconds": round(result.seconds), "epochs": result.epochs_completed,
               "precision": precision,
               "wall_seconds": round(time.perf_counter() - start), "results": rows, "weights": str(run_dir / WEIGHTS_FILE)}
    (run_dir / "benchmark.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\n{args.corpus} {args.src}->{args.tgt}: {len(test)} test sentences, {result.steps} steps "
          f"({result.epochs_completed} epochs) in {result.seconds / 60:.1f} min of training ({precision['train']}), "
          f"beam 4, alpha 0.6, decoded in {precision['decode']}")
    print(f"{'model':<48} {'BLEU':>6} {'chrF':>6} {'decode s':>9}")
    for r in rows:
        print(f"{r['model']:<48} {r['bleu']:>6.2f} {r['chrf']:>6.2f} {r['decode_seconds']:>9.1f}")
    print(f"signature: {rows[0]['signature']}")


if __name__ == "__main__":
    main()
