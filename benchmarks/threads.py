"""How many threads, alone and beside a busy process: the measurements behind ``--threads``' default.

On a machine that other programs share (a laptop with a browser open, a CI runner), PyTorch's
default of one thread per core can be much slower than fewer threads: every parallel region waits
for its slowest thread, and a thread that shares its core with a busy process runs a fraction of
the time. This script measures, each in a fresh process (OpenMP reads its settings at start):

- training: optimizer steps of the demo's model (d_model 128, 3 + 3 layers, a 2,000 vocabulary,
  batches of about 2,500 target tokens, the CPU engine), target tokens per second;
- translation: greedy decoding of 200 sentences with a run's model (``--run-dir``, e.g. the
  demo's), sentences per second;

for thread settings (1, every CPU this process may use, that with ``OMP_WAIT_POLICY=PASSIVE``,
and ``auto``: the package's default, which counts the CPUs that are idle when the command starts),
alone and beside 1 or 2 busy processes (``yes > /dev/null``, as many as asked). Settings alternate
within a round; the table shows medians over rounds.

    python benchmarks/threads.py --run-dir runs/demo                # about 5 minutes
    python benchmarks/threads.py --run-dir runs/demo --busy 0 1 2 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SETTINGS = {  # name -> (threads, extra environment)
    "1 thread": ("1", {}),
    "all CPUs": ("all", {}),
    "all CPUs, passive wait": ("all", {"OMP_WAIT_POLICY": "PASSIVE"}),
    "auto (default)": ("auto", {}),
}


def child(workload: str, threads: str, run_dir: str | None, seconds: float) -> dict:
    """Run one workload in this process for about ``seconds`` and return its rate."""
    sys.path.insert(0, str(HERE))
    from transformer.threads import default_threads  # first, as the commands do: its count starts before torch loads

    import torch

    n = len(os.sched_getaffinity(0)) if threads == "all" else default_threads() if threads == "auto" else int(threads)
    torch.set_num_threads(n)
    if workload == "train":
        from train_step import PAD, make_step

        from transformer.config import preset
        from transformer.data import make_batch
        from transformer.model import Transformer
        from transformer.cpu import accelerate_training

        cfg = preset("small", src_vocab_size=2000, d_model=128, n_heads=4, d_ff=512, n_encoder_layers=3,
                     n_decoder_layers=3, dropout=0.1, attention_dropout=0.0)
        torch.manual_seed(0)
        model = Transformer(cfg)
        accelerate_training(model)
        g = torch.Generator().manual_seed(0)
        batches = []
        for _ in range(4):  # about 2,500 target tokens each: 200 sentences of 8-17 tokens
            examples = []
            for _ in range(200):
                n_src, n_tgt = (int(torch.randint(8, 18, (1,), generator=g)) for _ in range(2))
                examples.append((torch.randint(4, 2000, (n_src,), generator=g).tolist(),
                                 torch.randint(4, 2000, (n_tgt,), generator=g).tolist()))
            batches.append(make_batch(examples, pad_id=PAD, bos_id=1, eos_id=2))
        step = make_step("ours", model, False, torch.device("cpu"))
        for b in batches[:2]:
            step(b)  # warm-up: kernels compiled, memory allocated
        tokens, start, i = 0, time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            b = batches[i % len(batches)]
            step(b)
            tokens += b.n_tgt_tokens
            i += 1
        return {"threads": n, "rate": tokens / (time.perf_counter() - start), "unit": "target tokens/s"}
    from transformer.decoding import DecodeConfig
    from transformer.translate.translator import Translator

    translator = Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy"))
    sentences = _sentences(os.environ.get("THREADS_BENCH_SENTENCES"))
    translator.translate(sentences[:20])
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        translator.translate(sentences)
        done += len(sentences)
    return {"threads": n, "rate": done / (time.perf_counter() - start), "unit": "sentences/s"}


def _sentences(path: str | None) -> list[str]:
    """200 source sentences: the first lines of ``path`` (plain or gzip), else built-in French ones."""
    if path:
        from transformer.translate.inputs import read_lines

        return [line.strip() for line in read_lines(path)[:200]]
    from transformer.corpus.builtin import generate_pairs

    return [src for src, _ in generate_pairs(200, seed=12345)]


def measure(workload: str, setting: str, run_dir: str | None, sentences: str | None, seconds: float) -> dict:
    threads, env = SETTINGS[setting]
    cmd = [sys.executable, __file__, "--child", workload, "--threads", threads, "--seconds", str(seconds)]
    if run_dir:
        cmd += ["--run-dir", run_dir]
    if sentences:
        cmd += ["--sentences", sentences]
    out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", help="a run to translate with (e.g. the demo's); without it, training only")
    parser.add_argument("--sentences", help="source sentences to translate, one a line (default: built-in French)")
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1], help="busy processes beside the measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per cell")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--threads", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.sentences:
            os.environ["THREADS_BENCH_SENTENCES"] = args.sentences
        print(json.dumps(child(args.child, args.threads, args.run_dir, args.seconds)))
        return

    import torch

    from transformer.threads import default_threads

    workloads = ["train"] + (["translate"] if args.run_dir else [])
    print(f"CPUs this process may use: {len(os.sched_getaffinity(0))}; PyTorch's default threads: "
          f"{torch.get_num_threads()}; auto now: {default_threads()}; {args.rounds} rounds of {args.seconds:.0f} s")
    results: dict[tuple[str, int, str], list[float]] = {}
    used: dict[tuple[str, int, str], int] = {}
    for busy in args.busy:
        neighbours = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(busy)]
        try:
            time.sleep(0.5 if busy else 0)
            for r in range(args.rounds):
                for workload in workloads:
                    for setting in SETTINGS:
                        m = measure(workload, setting, args.run_dir, args.sentences, args.seconds)
                        results.setdefault((workload, busy, setting), []).append(m["rate"])
                        used[workload, busy, setting] = m["threads"]
                        print(f"  busy={busy} round {r + 1} {workload:9s} {setting:24s} threads={m['threads']} "
                              f"{m['rate']:9.1f} {m['unit']}", flush=True)
        finally:
            for p in neighbours:
                p.kill()
    print()
    print("| workload | busy processes | setting | threads | rate (median) | vs 1 thread |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows = []
    for (workload, busy, setting), rates in results.items():
        median = statistics.median(rates)
        one = statistics.median(results[workload, busy, "1 thread"])
        unit = "tokens/s" if workload == "train" else "sentences/s"
        print(f"| {workload} | {busy} | {setting} | {used[workload, busy, setting]} | {median:,.0f} {unit} | "
              f"{median / one:.2f} |")
        rows.append({"workload": workload, "busy": busy, "setting": setting, "threads": used[workload, busy, setting],
                     "rates": rates, "median": median})
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
