"""Training at the paper's data sizes: the tokenized-data cache (data.binarize) against tokenizing in memory.

A parallel corpus of ``--pairs`` French-English pairs (WMT14 en-de has 4.5 million) is made by
repeating the shared corpora (Tatoeba's 167,130 pairs and Multi30k's 29,000 training captions, read
from ``--from``) and written as two line-aligned files. Each measurement runs in a child process,
whose peak resident memory comes from ``os.wait4``:

* ``build``: the first run on the corpus, with an empty cache: reading, training the BPE tokenizer
  (``--vocab-size``), tokenizing into the memory-mapped cache over all CPUs (pairs/s as the
  progress line reports it) -- ``prepare_data`` as ``transformer train`` calls it;
* ``cached``: a training run on the cached corpus: seconds from the child's start (interpreter,
  imports, reading the cache, filtering, grouping into batches, the model) to the end of the first
  optimizer step, and the peak memory of ``--steps`` steps of a ``tiny`` model;
* ``memory``: the same run with ``data.binarize=false`` (every pair as Python lists, tokenized at
  each start), on ``--old-pairs`` pairs (the size that fits), beside ``cached`` on the same pairs;
* ``floor``: a child that imports everything and builds the model and optimizer, without data: the
  memory the run needs "besides the data".

Targets (issue 28): with the cache, peak memory under 2 GB besides the model and the first step
under 10 s at 4.5 million pairs.

    python benchmarks/big_corpus.py --from ../shared/data --out big_corpus.json            # 4.5M pairs
    python benchmarks/big_corpus.py --from ../shared/data --pairs 50000 --old-pairs 50000  # a quick check
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_corpus(data: Path, pairs: int, out: Path) -> tuple[Path, Path]:
    """``pairs`` French-English pairs: Tatoeba and Multi30k's training captions, repeated, as two files."""
    from transformer.corpus.registry import read_corpus

    src, tgt = out / f"corpus-{pairs}.fr", out / f"corpus-{pairs}.en"
    if src.is_file() and tgt.is_file():
        return src, tgt
    base = read_corpus("tatoeba", src="fr", tgt="en", split="all", directory=data / "tatoeba")[0]
    base += read_corpus("multi30k", src="fr", tgt="en", split="train", directory=data / "multi30k")[0]
    whole, rest = divmod(pairs, len(base))
    block_fr = "".join(f"{s}\n" for s, _ in base).encode("utf-8")
    block_en = "".join(f"{t}\n" for _, t in base).encode("utf-8")
    with open(src, "wb") as fs, open(tgt, "wb") as ft:
        for _ in range(whole):
            fs.write(block_fr)
            ft.write(block_en)
        fs.write("".join(f"{s}\n" for s, _ in base[:rest]).encode("utf-8"))
        ft.write("".join(f"{t}\n" for _, t in base[:rest]).encode("utf-8"))
    return src, tgt


def overrides(src: Path, tgt: Path, args: argparse.Namespace, binarize: bool) -> list[str]:
    return ["data.corpus=files", f"data.train_src={src}", f"data.train_tgt={tgt}", f"data.vocab_size={args.vocab_size}",
            f"data.binarize={str(binarize).lower()}", "model.preset=tiny", "train.precision=fp32",
            f"train.max_steps={args.steps}", "train.eval_sentences=0", f"train.log_every={args.steps}",
            "train.tensorboard=false", "train.alignment_sentences=0"]


# ------------------------------------------------------------------------------------------------ children

def child(mode: str, started: float, settings: list[str], run_dir: str) -> dict:
    """Runs in the child process; returns what it measured."""
    from transformer.run.config import RunConfig

    cfg = RunConfig().with_overrides(settings)
    if mode == "build":
        from transformer.training.data_setup import prepare_data

        lines = io.StringIO()
        t0 = time.perf_counter()
        data = prepare_data(cfg.data, progress=lines)
        seconds = time.perf_counter() - t0
        rates = re.findall(r"([\d,]+) pairs/s", lines.getvalue())
        return {"seconds": round(seconds, 1), "pairs": len(data.train),
                "tokenize_pairs_per_s": int(rates[-1].replace(",", "")) if rates else None}
    if mode == "floor":
        import torch

        import transformer.training.trainer  # noqa: F401  (everything a run imports)
        from transformer.model import build_model

        size = cfg.data.vocab_size
        model = build_model(cfg.model_config(src_vocab_size=size, tgt_vocab_size=size))
        optimizer = torch.optim.Adam(model.parameters())
        loss = sum(p.sum() for p in model.parameters())
        loss.backward()
        optimizer.step()
        return {"parameters": sum(p.numel() for p in model.parameters())}
    from transformer.training.trainer import Trainer

    trainer = Trainer(cfg, run_dir, show_progress=False)
    first: list[float] = []
    step = trainer.optimizer.step

    def timed_step(*a, **k):
        out = step(*a, **k)
        if not first:
            first.append(time.time() - started)
        return out

    trainer.optimizer.step = timed_step
    trainer.train()
    return {"first_step_s": round(first[0], 2), "pairs": len(trainer.data.train), "batches": len(trainer.batches)}


def measure(mode: str, settings: list[str], run_dir: Path, env: dict) -> dict:
    """Run ``mode`` in a child process; its result and its peak RSS."""
    started = time.time()
    proc = subprocess.Popen([sys.executable, __file__, "--child", mode, "--started", repr(started),
                             "--run-dir", str(run_dir), "--settings", json.dumps(settings)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{err.decode()[-3000:]}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["wall_s"] = round(time.time() - started, 1)
    result["peak_rss_mib"] = round(result.pop("_maxrss_kib") / 1024, 1)
    result["workers_peak_rss_mib"] = round(result.pop("_children_maxrss_kib") / 1024, 1)  # the largest worker
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="data", default=str(ROOT.parent / "shared" / "data"),
                        help="local copy of the corpora (tatoeba/, multi30k/)")
    parser.add_argument("--pairs", type=int, default=4_500_000, help="pairs of the large corpus (WMT14 en-de: 4.5M)")
    parser.add_argument("--old-pairs", type=int, default=670_000, help="pairs for the in-memory path, which must fit")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps of each training run")
    parser.add_argument("--workdir", default=None, help="where the corpus files, the cache and the runs go (kept)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import resource

        result = child(args.child, args.started, json.loads(args.settings), args.run_dir)
        result["_maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        result["_children_maxrss_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(json.dumps(result))
        return 0

    work = Path(args.workdir or tempfile.mkdtemp(prefix="big_corpus-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TRANSFORMER_DATA_CACHE": str(work / "cache")}
    results: dict = {"pairs": args.pairs, "old_pairs": args.old_pairs, "cpus": os.cpu_count(),
                     "machine": platform.processor() or platform.machine(), "vocab_size": args.vocab_size}
    t = time.perf_counter()
    big = make_corpus(Path(args.data), args.pairs, work)
    print(f"corpus of {args.pairs:,} pairs in {work} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    results["floor"] = measure("floor", overrides(*big, args, True), work / "floor", env)
    results["build"] = measure("build", overrides(*big, args, True), work / "build", env)
    results["cached"] = measure("train", overrides(*big, args, True), work / "run-cached", env)
    small = make_corpus(Path(args.data), args.old_pairs, work) if args.old_pairs != args.pairs else big
    if small != big:
        measure("build", overrides(*small, args, True), work / "build-small", env)
        results["cached_small"] = measure("train", overrides(*small, args, True), work / "run-cached-small", env)
    else:
        results["cached_small"] = results["cached"]
    results["memory_small"] = measure("train", overrides(*small, args, False), work / "run-memory-small", env)

    floor = results["floor"]["peak_rss_mib"]
    build = results["build"]
    print(f"\nbuilding the cache for {args.pairs:,} pairs: {build['seconds']} s (read, tokenizer, tokenize), "
          f"tokenizing {build['tokenize_pairs_per_s']:,} pairs/s on {results['cpus']} CPUs, peak {build['peak_rss_mib']} MiB "
          f"(largest worker {build['workers_peak_rss_mib']} MiB)")
    print(f"\n{'training':22} {'pairs':>10} {'start to first step s':>22} {'peak MiB':>9} {'above the floor':>16}")
    for name, n, r in (("from the cache", args.pairs, results["cached"]),
                       ("from the cache", args.old_pairs, results["cached_small"]),
                       ("in memory (old path)", args.old_pairs, results["memory_small"])):
        print(f"{name:22} {n:>10,} {r['first_step_s']:>22} {r['peak_rss_mib']:>9} {r['peak_rss_mib'] - floor:>16.0f}")
    print(f"floor (imports, model, optimizer, no data): {floor} MiB")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
