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


def recipe(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        data=DataConfig(corpus=args.corpus, src_lang=args.src, tgt_lang=args.tgt, data_dir=args.data_dir,
                        vocab_size=8000, max_len=100, max_tokens=5000, seed=args.seed),
        model={"preset": "small", "d_model": 256, "n_heads": 4, "d_ff": 1024, "n_encoder_layers": 3,
               "n_decoder_layers": 3, "dropout": 0.2, "attention_dropout": 0.1},
        train=TrainConfig(epochs=1000, time_limit=args.minutes * 60, lr_scale=0.6, warmup=500, precision="auto",
                          seed=args.seed, log_every=50, eval_every=500, eval_sentences=200, save_every=100,
                          keep_last=5),
    )


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
    trainer = Trainer(recipe(args), run_dir)
    result = trainer.train()
    test = trainer.data.test_text[: args.test_sentences or None]
    sources, references = [s for s, _ in test], [t for _, t in test]
    rows = []
    beam = DecodeConfig(strategy="beam", beam_size=4, alpha=0.6)
    bf16 = fast_bf16("cpu")  # decode in bf16 only where the CPU multiplies bf16 in hardware
    translator = Translator.from_run_dir(run_dir, decoding=beam, bf16=bf16)
    precision = {"train": trainer.precision, "decode": "bf16" if bf16 else "fp32"}
    for label in ("best on validation", "average of last 5"):
        if label.startswith("average"):
            used = average_last(run_dir, min(5, len(list_checkpoints(run_dir))), run_dir / "averaged.safetensors")
            # the CPU engine packed the weights when the Translator prepared the model: give the model
            # back unprepared, load the averaged weights, and prepare it again
            translator.close()
            load_weights(translator.model, run_dir / "averaged.safetensors")
            translator = Translator(translator.model, translator.vocab, decoding=beam, bf16=bf16)
            label += f" ({used[0].name}..{used[-1].name})"
        t0 = time.perf_counter()
        hyps = translator.translate(sources)
        s = score(hyps, references)
        rows.append({"model": label, "bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2),
                     "decode_seconds": round(time.perf_counter() - t0, 1), "signature": s.bleu_signature})
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
