"""The recurrent baseline against the Transformer on Multi30k, with the same time budget each.

For every direction (de -> en and fr -> en by default) both models are trained by the same
trainer on the same batches, tokenizer and schedule for ``--minutes`` of wall time, then scored:

* training speed: target tokens per second (mean over the logged windows) and wall time per epoch
  (training time / epochs done, fractions counted);
* quality at equal wall time: sacreBLEU (cased, detokenized) on test_2016_flickr with the model
  that was best on validation, beam 4, length penalty 0.6;
* decoding speed: sentences per second for that beam search over the test set;
* the sequential cost: one teacher-forced forward pass (batch ``--batch``, source = target length)
  of freshly built models for growing lengths (``--lengths``).

Transformer: the recipe of ``benchmarks/multi30k.py`` (d_model 256, 3 + 3 layers, 4 heads, d_ff 1024,
dropout 0.2, warmup 500, scale 0.6). RNN: the ``small`` RNN preset (embedding 256, bidirectional
LSTM encoder of 2 x 256, LSTM decoder of 512 with input feeding, ``--score`` attention, dropout 0.2),
the same schedule (its width 512 in ``d_model^-0.5``) and gradient clipping at norm 1 (customary for
LSTMs). Both: joint BPE 8,000, batches of about 5,000 padded tokens, label smoothing 0.1.

Precision: bf16 where the CPU has bf16 matrix units (AVX-512 bf16 or AMX), fp32 elsewhere (there
PyTorch emulates bf16 products, far slower than fp32): training by ``train.precision=auto`` (bf16
autocast where the training device has the units), decoding with a bf16 copy of the model and
the forward-pass timing under bf16 autocast. The precisions used are printed with the tables and
recorded in the results.

    python benchmarks/rnn_vs_transformer.py --minutes 30 --from ../shared/data
    python benchmarks/rnn_vs_transformer.py --minutes 3 --directions de-en --from ../shared/data   # a quick check

Results go to ``OUT_DIR/results.json`` (default ``runs/rnn-vs-transformer``) and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multi30k import FIRST_RECIPE, recipe  # noqa: E402  (the Transformer's Multi30k recipe)

from transformer.decoding import DecodeConfig  # noqa: E402
from transformer.translate.evaluation import score  # noqa: E402
from transformer.model.masks import padding_mask  # noqa: E402
from transformer.model import build_model  # noqa: E402
from transformer.cpu.training_precision import fast_bf16  # noqa: E402
from transformer.run.config import RunConfig  # noqa: E402
from transformer.training.trainer import Trainer  # noqa: E402
from transformer.translate.translator import Translator  # noqa: E402

MODELS = ("transformer", "rnn")


def transformer_recipe(args: argparse.Namespace) -> RunConfig:
    """The Transformer's Multi30k recipe for ``args.src`` -> ``args.tgt``, as this comparison was measured."""
    return recipe(corpus="multi30k", src=args.src, tgt=args.tgt, data_dir=args.data_dir, minutes=args.minutes,
                  seed=args.seed, overrides=FIRST_RECIPE)


def rnn_recipe(args: argparse.Namespace) -> RunConfig:
    """The Transformer's recipe with the RNN in place of the model, and gradient clipping."""
    base = transformer_recipe(args).to_dict()
    base["model"] = {"architecture": "rnn", "preset": "small", "score": args.score, "dropout": 0.2}
    base["train"]["clip_norm"] = 1.0
    return RunConfig.from_dict(base)


def train_and_score(kind: str, args: argparse.Namespace, run_dir: Path) -> dict:
    """Train one model for the time budget, then measure its speed and test BLEU."""
    cfg = transformer_recipe(args) if kind == "transformer" else rnn_recipe(args)
    trainer = Trainer(cfg, run_dir)
    result = trainer.train()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in records if r["kind"] == "train"]
    epochs = result.steps * cfg.train.accumulate / len(trainer.batches)  # fractions of an epoch count
    test = trainer.data.test_text[: args.test_sentences or None]
    bf16 = fast_bf16("cpu")  # decode in bf16 only where the CPU multiplies bf16 in hardware
    translator = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="beam", beam_size=4, alpha=0.6),
                                         precision="bf16" if bf16 else "fp32")
    start = time.perf_counter()
    hyps = translator.translate([s for s, _ in test])
    decode_s = time.perf_counter() - start
    s = score(hyps, [t for _, t in test])
    return {"model": kind, "parameters": trainer.model.num_parameters(), "steps": result.steps,
            "train_precision": trainer.precision, "decode_precision": "bf16" if bf16 else "fp32",
            "train_seconds": round(result.seconds, 1), "epochs": round(epochs, 2),
            "tokens_per_s": round(statistics.mean(rates)) if rates else None,
            "seconds_per_epoch": round(result.seconds / epochs, 1) if epochs else None,
            "bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2), "test_sentences": len(test),
            "decode_seconds": round(decode_s, 1), "sentences_per_s": round(len(test) / decode_s, 1),
            "signature": s.bleu_signature}


@torch.inference_mode()
def forward_times(args: argparse.Namespace, precision: str) -> list[dict]:
    """Median time of one teacher-forced forward pass (``precision``: bf16 autocast or fp32) per model and length."""
    torch.manual_seed(args.seed)
    vocab = 8000
    models = {}
    for kind in MODELS:
        cfg = (transformer_recipe(args) if kind == "transformer" else rnn_recipe(args))
        models[kind] = build_model(cfg.model_config(src_vocab_size=vocab, tgt_vocab_size=vocab)).eval()
    rows = []
    for n in args.lengths:
        src = torch.randint(4, vocab, (args.batch, n))
        tgt = torch.randint(4, vocab, (args.batch, n))
        mask = padding_mask(src, pad_id=0)
        row = {"length": n}
        for kind, model in models.items():
            times = []
            for _ in range(args.repeats + 1):  # the first run warms up
                start = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                    model(src, tgt, mask)
                times.append(time.perf_counter() - start)
            row[f"{kind}_ms"] = round(1000 * statistics.median(times[1:]), 1)
        rows.append(row)
        print(f"forward pass ({precision}), length {n}: transformer {row['transformer_ms']} ms, "
              f"rnn {row['rnn_ms']} ms", flush=True)
    return rows


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def print_tables(results: dict) -> None:
    for direction, (t, r) in results["directions"].items():
        print(f"\nMulti30k {direction}, {results['minutes']:g} min of training each ({t['train_precision']}), "
              f"test_2016_flickr ({t['test_sentences']} sentences), beam 4, alpha 0.6, "
              f"decoded in {t['decode_precision']}")
        print(f"{'':<26}{'Transformer':>14}{'RNN (' + r['score'] + ')':>18}{'Transformer / RNN':>20}")
        for label, key in (("parameters", "parameters"), ("steps", "steps"), ("epochs", "epochs"),
                           ("train tokens/s", "tokens_per_s"), ("wall s per epoch", "seconds_per_epoch"),
                           ("test BLEU", "bleu"), ("test chrF", "chrf"), ("decode sentences/s", "sentences_per_s")):
            print(f"{label:<26}{t[key]!s:>14}{r[key]!s:>18}{ratio(t[key], r[key]):>20}")
    if results.get("forward"):
        print(f"\nOne forward pass, batch {results['batch']}, source = target length, {results['forward_precision']}, "
              "untrained models")
        print(f"{'length':>8}{'Transformer ms':>16}{'RNN ms':>12}{'RNN / Transformer':>20}")
        for row in results["forward"]:
            print(f"{row['length']:>8}{row['transformer_ms']:>16}{row['rnn_ms']:>12}"
                  f"{ratio(row['rnn_ms'], row['transformer_ms']):>20}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--directions", default="de-en,fr-en", help="comma-separated SRC-TGT pairs (default: de-en,fr-en)")
    parser.add_argument("--minutes", type=float, default=30.0, help="training time budget per model and direction")
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of the corpora (e.g. ../shared/data)")
    parser.add_argument("--score", default="general", choices=("additive", "dot", "general", "scaled_dot"),
                        help="the RNN's attention score function (default: general)")
    parser.add_argument("--test-sentences", type=int, default=0, help="score only the first N test sentences (0: all)")
    parser.add_argument("--lengths", default="16,32,64,128,256,512,1024",
                        help="sequence lengths of the forward-pass timing (empty: skip it)")
    parser.add_argument("--batch", type=int, default=8, help="batch size of the forward-pass timing")
    parser.add_argument("--repeats", type=int, default=3, help="timed forward passes per length (median)")
    parser.add_argument("--out-dir", default="runs/rnn-vs-transformer", help="run directories and results.json")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.corpus = "multi30k"
    args.lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    out = Path(args.out_dir)
    if out.exists() and any(out.iterdir()):
        parser.error(f"{out} is not empty (a run directory there would be resumed); choose another --out-dir")
    results: dict = {"minutes": args.minutes, "batch": args.batch, "threads": torch.get_num_threads(),
                     "directions": {}}
    args.src, args.tgt = "de", "en"  # the forward timing alone (--directions "") builds its models from the recipes
    for direction in [d.strip() for d in args.directions.split(",") if d.strip()]:
        args.src, args.tgt = direction.split("-")
        pair = []
        for kind in MODELS:
            print(f"== {direction}: training the {kind} for {args.minutes:g} min", flush=True)
            row = train_and_score(kind, args, out / f"{direction}-{kind}")
            row["score"] = args.score if kind == "rnn" else "scaled_dot"
            pair.append(row)
        results["directions"][direction] = pair
    results["forward_precision"] = "bf16" if fast_bf16("cpu") else "fp32"  # autocast only where bf16 is fast
    results["forward"] = forward_times(args, results["forward_precision"]) if args.lengths else []
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print_tables(results)
    print(f"\nsignature: {next(iter(results['directions'].values()))[0]['signature']}" if results["directions"] else "")


if __name__ == "__main__":
    main()
