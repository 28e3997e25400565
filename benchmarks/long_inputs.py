"""Long inputs: encoder forward time and peak memory, fused attention against explicit weights.

One `base`-size encoder (preset base: d_model 512, 8 heads, d_ff 2048, 6 layers; random
weights, seed 0, evaluation mode, ``torch.inference_mode``), batch 1, one source of L random
token ids (no padding, so no mask), L = 512 ... 16,384, in fp32 and under bf16 autocast (bf16
matrix products, as ``Translator(precision="bf16")`` computes). bf16 runs by default only where the CPU
has bf16 matrix units (AVX-512 bf16 or AMX); elsewhere PyTorch emulates bf16 products, far slower
than fp32, and only fp32 runs unless asked for (``--precision fp32 bf16``). Two paths through
the same weights:

* fused: ``model.encode(src)``, attention by ``torch.nn.functional.scaled_dot_product_attention``
  (never materialises the L x L score matrix);
* explicit: ``model.encoder(src, None, need_weights=True)``, the path ``attention_maps`` uses:
  scores, softmax and weights written out, and every layer's ``(1, H, L, L)`` weights kept and
  returned (6 x 8 x L^2 elements, fp32, or bf16 under autocast: at fp32 3.2 GB for 4,096
  tokens, 12.9 GB for 8,192, whose measured peak is then about 16 GB).

Each measurement runs in a fresh Python process: it builds the model, runs a 16-token forward
(libraries and kernels loaded), reads its resident set size (RSS), then runs the measured
forward once and reports peak RSS (``ru_maxrss``) minus that baseline: the memory the forward
pass itself needed. Time is the median of the following forwards (``--repeats``, fewer when one
forward takes longer than ``--budget`` seconds). Explicit runs whose kept weights would exceed
``--max-explicit-gb`` (default 16) are skipped: 16,384 tokens at fp32 (52 GB) and bf16 (26 GB).

The table gives, per length, time and memory of both paths and their ratios, then the growth:
MB per 1,000 tokens of each doubling (constant when memory is linear in L, doubling at each
step when it is quadratic) and the ratio of memory between successive lengths (2x = linear,
4x = quadratic). Below about 2,000 tokens the fused path's peak is dominated by a fixed
workspace of some 60 MB (measured: 66 MB at both 512 and 1,024 tokens, fp32, one thread), so
its linear growth shows from 2,048 tokens on.

    python benchmarks/long_inputs.py --out long_inputs.json
    python benchmarks/long_inputs.py --quick        # 512 and 1,024 tokens only, to check the script
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext

LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_LENGTHS = (512, 1024)
VOCAB = 37000  # the paper's shared BPE vocabulary (the embedding table is part of the baseline, not of the forward)


def _rss_mb() -> float:
    """Current resident set size in MB (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def measure(path: str, length: int, precision: str, repeats: int, budget: float) -> dict:
    """Run in the child process: one measurement, returned as a dict."""
    import torch

    from transformer.config import preset
    from transformer.model import Transformer

    torch.manual_seed(0)
    model = Transformer(preset("base", src_vocab_size=VOCAB)).eval()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else nullcontext()

    def forward(src: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), autocast:
            if path == "fused":
                return model.encode(src)
            memory, weights = model.encoder(src, None, need_weights=True)
            assert len(weights) == len(model.encoder.layers)
            return memory

    forward(torch.randint(4, VOCAB, (1, 16)))  # load kernels and libraries before the baseline
    src = torch.randint(4, VOCAB, (1, length), generator=torch.Generator().manual_seed(length))
    baseline = _rss_mb()
    t0 = time.perf_counter()
    out = forward(src)
    first = time.perf_counter() - t0
    peak = _max_rss_mb() - baseline
    assert out.shape == (1, length, model.config.d_model) and bool(torch.isfinite(out.float()).all())
    del out
    times = []
    spent = first
    for _ in range(repeats):
        if spent + first > budget and times:
            break
        t0 = time.perf_counter()
        forward(src)
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    return {"path": path, "length": length, "precision": precision, "peak_mb": round(peak, 1),
            "seconds": round(statistics.median(times or [first]), 4), "first_seconds": round(first, 4),
            "timed_runs": len(times)}


def explicit_estimate_gb(length: int, precision: str, heads: int = 8, layers: int = 6) -> float:
    """The attention weights the explicit path keeps: layers x heads x L^2 elements (bf16 under autocast).

    The measured peak is about (layers + 2) / layers of this (one layer's scores and softmax on top).
    """
    return layers * heads * length**2 * (2 if precision == "bf16" else 4) / 1e9


def run_child(path: str, length: int, precision: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", path, str(length), precision,
           "--repeats", str(args.repeats), "--budget", str(args.budget)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return {"path": path, "length": length, "precision": precision, "error": tail[0]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def growth(rows: list[dict]) -> list[dict]:
    """Memory growth between successive lengths of one path: MB per 1k tokens added and the ratio."""
    out = []
    ok = [r for r in rows if "peak_mb" in r]
    for a, b in zip(ok, ok[1:]):
        out.append({"from": a["length"], "to": b["length"],
                    "mb_per_1k_tokens": round((b["peak_mb"] - a["peak_mb"]) / ((b["length"] - a["length"]) / 1000), 1),
                    "memory_ratio": round(b["peak_mb"] / a["peak_mb"], 2) if a["peak_mb"] > 0 else None})
    return out


def fmt(x: float | None, spec: str, suffix: str = "") -> str:
    """``x`` formatted by ``spec`` (plus ``suffix``), or a dash of the same width when there is no value."""
    if x is None:
        return "-".rjust(len(format(0.0, spec)) + len(suffix))
    return format(x, spec) + suffix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="512 and 1,024 tokens only")
    parser.add_argument("--lengths", type=int, nargs="+", default=None, help=f"default: {' '.join(map(str, LENGTHS))}")
    parser.add_argument("--precision", nargs="+", choices=("fp32", "bf16"), default=None,
                        help="default: fp32 bf16 where the CPU has bf16 matrix units (AVX-512 bf16 or AMX), "
                        "else fp32 alone (bf16 is emulated there, far slower)")
    parser.add_argument("--repeats", type=int, default=3, help="timed forwards after the measured one (default 3)")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of timed forwards per measurement")
    parser.add_argument("--max-explicit-gb", type=float, default=16.0, help="skip explicit runs estimated above this")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--child", nargs=3, metavar=("PATH", "LENGTH", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        path, length, precision = args.child
        print(json.dumps(measure(path, int(length), precision, args.repeats, args.budget)))
        return

    import torch

    from transformer.cpu.training_precision import bf16_left_out, fast_bf16

    if args.precision is None:
        args.precision = ["fp32", "bf16"] if fast_bf16("cpu") else ["fp32"]
        if "bf16" not in args.precision:
            print(bf16_left_out("pass --precision fp32 bf16 to run it anyway"), flush=True)
    lengths = args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS)
    results: dict[str, dict[str, list[dict]]] = {}
    for precision in args.precision:
        results[precision] = {"fused": [], "explicit": []}
        for length in lengths:
            for path in ("fused", "explicit"):  # alternate the contenders
                estimate = explicit_estimate_gb(length, precision)
                if path == "explicit" and estimate > args.max_explicit_gb:
                    row = {"path": path, "length": length, "precision": precision,
                           "skipped": f"weights kept {estimate:.0f} GB > {args.max_explicit_gb:g} GB"}
                else:
                    row = run_child(path, length, precision, args)
                results[precision][path].append(row)
                shown = (f"{row['seconds']:.3f} s, {row['peak_mb']:.0f} MB" if "seconds" in row
                         else row.get("skipped") or f"error: {row.get('error')}")
                print(f"  {precision} {path:<8} {length:>6} tokens: {shown}", flush=True)

    threads = torch.get_num_threads()
    print(f"\nbase encoder (6 layers, d_model 512, 8 heads), batch 1, inference; torch {torch.__version__}, "
          f"{threads} threads, {platform.processor() or platform.machine()}")
    print("peak memory = max RSS during the forward minus RSS before it, each in a fresh process")
    summary = {"machine": {"torch": torch.__version__, "threads": threads, "cpu_count": os.cpu_count(),
                           "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                           "cpu_bf16_units": fast_bf16("cpu")},
               "model": "preset base encoder, 6 layers, d_model 512, 8 heads, d_ff 2048, batch 1",
               "results": results, "growth": {}}
    for precision, paths in results.items():
        print(f"\n{precision}")
        print(f"{'tokens':>7} | {'fused s':>8} {'explicit s':>10} {'expl/fused':>10} | "
              f"{'fused MB':>9} {'explicit MB':>11} {'expl/fused':>10}")
        for f, e in zip(paths["fused"], paths["explicit"]):
            fs, es = f.get("seconds"), e.get("seconds")
            fm, em = f.get("peak_mb"), e.get("peak_mb")
            note = "" if es is not None else f"  explicit {e.get('skipped') or 'error: ' + str(e.get('error'))}"
            print(f"{f['length']:>7} | {fmt(fs, '8.3f')} {fmt(es, '10.3f')} "
                  f"{fmt(es / fs if fs and es else None, '9.2f', 'x')} | {fmt(fm, '9.0f')} {fmt(em, '11.0f')} "
                  f"{fmt(em / fm if fm and em else None, '9.1f', 'x')}{note}")
        summary["growth"][precision] = {path: growth(rows) for path, rows in paths.items()}
        print("memory growth between successive lengths (linear: constant MB per 1k tokens and ratio 2x "
              "per doubling; quadratic: ratio 4x)")
        for path in ("fused", "explicit"):
            steps = summary["growth"][precision][path]
            if steps:
                shown = ", ".join(f"{g['from']}->{g['to']}: {g['mb_per_1k_tokens']:.0f} MB/1k "
                                  f"({fmt(g['memory_ratio'], '.2f')}x)" for g in steps)
                print(f"  {path:<8} {shown}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
