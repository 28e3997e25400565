"""The translation memory's lookups at 10,000 and 1,000,000 entries: exact and fuzzy, how fast,
how often the fuzzy search finds what it should, and the file's size on disk.

The entries are Tatoeba's English-French pairs (``tatoeba/eng-fra.txt`` under ``--from``, read
there, never copied), shuffled with ``--seed``; past its 167,130 pairs, each further round takes
them again with one English word replaced by a random word of the corpus, until ``--sizes``
entries are imported (``import_pairs``, accepted, batches of ``--batch``) into a memory in a
temporary folder. Then, one thread, each timed by itself:

- ``exact hit``: ``lookup`` of ``--queries`` sources in the memory;
- ``exact miss``: ``lookup`` of as many sentences that are not (Tatoeba's French side, as English);
- ``fuzzy, one word``: ``search`` (``min_similarity`` 0.75) of memory sources with one word replaced;
- ``fuzzy, two typos``: ``search`` of memory sources with two letters replaced;
- ``fuzzy, unrelated``: ``search`` of the French sentences (nothing to find).

"found" is the share of edited queries whose original entry is among the results (five at most),
counted over the queries where that entry's similarity reaches the threshold (so it should be
found); "as good", the share whose best result is at least as similar as the original; the
median and 99th percentile of each kind are printed in milliseconds, of wall-clock time and of
the process's CPU time (what a lookup costs when other work shares the cores), with the size of
the file (checkpointed, closed) and the import's speed.

    python benchmarks/memory_lookup.py --from ../shared/data
    python benchmarks/memory_lookup.py --from ../shared/data --sizes 10000 --queries 200
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rapidfuzz import fuzz

from transformer.memory import TranslationMemory, normalise

THRESHOLD = 0.75


def read_pairs(path: Path) -> list[tuple[str, str]]:
    pairs = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            columns = line.rstrip("\n").split("\t")
            if len(columns) >= 2 and columns[0].strip() and columns[1].strip():
                pairs.append((columns[0], columns[1]))
    return pairs


def replace_word(text: str, vocabulary: list[str], rng: random.Random) -> str:
    words = text.split()
    position = rng.randrange(len(words))
    choice = rng.choice(vocabulary)
    while choice == words[position]:
        choice = rng.choice(vocabulary)
    words[position] = choice
    return " ".join(words)


def two_typos(text: str, rng: random.Random) -> str:
    letters = list(text)
    for _ in range(2):
        position = rng.randrange(len(letters))
        letters[position] = rng.choice("abcdefghijklmnopqrstuvwxyz".replace(letters[position].lower(), ""))
    return "".join(letters)


def entries(pairs: list[tuple[str, str]], vocabulary: list[str], size: int, seed: int) -> Iterator[tuple[str, str]]:
    """``size`` pairs: the corpus once, then rounds of it with one English word replaced."""
    rng = random.Random(seed)
    given = 0
    for round_ in range(size // len(pairs) + 1):
        for source, target in pairs:
            if given == size:
                return
            yield (source if round_ == 0 else replace_word(source, vocabulary, rng)), target
            given += 1


def percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000


def timed(call: Callable[[str], object], texts: list[str]) -> tuple[dict, list[object]]:
    """Each call's wall-clock time and the process's CPU time (what the call itself cost, when
    other work shares the cores), and the results."""
    wall, cpu, results = [], [], []
    for text in texts:
        start, start_cpu = time.perf_counter(), time.process_time()
        results.append(call(text))
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    (median, p99), (cpu_median, cpu_p99) = percentiles(wall), percentiles(cpu)
    return {"median_ms": median, "p99_ms": p99, "cpu_median_ms": cpu_median, "cpu_p99_ms": cpu_p99}, results


def measure(size: int, pairs: list[tuple[str, str]], vocabulary: list[str], args: argparse.Namespace,
            folder: Path) -> dict:
    path = folder / f"memory-{size}.db"
    start, start_cpu = time.perf_counter(), time.process_time()
    with TranslationMemory(path) as tm:
        built = [r for r in tm.imports() if r.state == "complete" and r.units == size and r.name == "tatoeba"]
        report = built[-1] if built else tm.import_pairs(entries(pairs, vocabulary, size, args.seed), "en", "fr",
                                                         name="tatoeba", batch=args.batch)
    build, build_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    if built:  # measured again in a kept folder: the import's figures are not this run's
        build = build_cpu = None
    size_bytes = path.stat().st_size  # closed: the log is checkpointed into the file and removed
    rng = random.Random(args.seed + 1)
    with TranslationMemory(path) as tm:
        total = tm.stats().total
        sample = [tm.get(rng.randint(1, total)) for _ in range(args.queries)]
        sources = [entry.source for entry in sample]
        french = [target for _, target in rng.sample(pairs, args.queries)]
        rows = {}
        rows["exact hit"], _ = timed(lambda text: tm.lookup(text, "en", "fr"), sources)
        rows["exact miss"], _ = timed(lambda text: tm.lookup(text, "en", "fr"), french)
        for kind, edit in (("fuzzy, one word", lambda s: replace_word(s, vocabulary, rng)),
                           ("fuzzy, two typos", lambda s: two_typos(s, rng))):
            edited = [edit(source) for source in sources]
            rows[kind], results = timed(lambda text: tm.search(text, "en", "fr", min_similarity=THRESHOLD), edited)
            due = [i for i, text in enumerate(edited)
                   if fuzz.ratio(normalise(text), normalise(sources[i])) / 100 >= THRESHOLD]
            rows[kind]["due"] = len(due)
            rows[kind]["found"] = sum(any(normalise(m.entry.source) == normalise(sources[i]) for m in results[i])
                                      for i in due)
            # A near-duplicate of the original may rank above it (the memory holds variants of each
            # sentence): what matters is a match at least as close.
            rows[kind]["as_good"] = sum(bool(results[i]) and results[i][0].similarity >= fuzz.ratio(
                normalise(edited[i]), normalise(sources[i])) / 100 - 1e-9 for i in due)
        rows["fuzzy, unrelated"], _ = timed(lambda text: tm.search(text, "en", "fr", min_similarity=THRESHOLD), french)
        start = time.perf_counter()
        tm.stats()
        stats_ms = (time.perf_counter() - start) * 1000
    return {"entries": total, "added": report.added, "duplicates": report.duplicates, "build_s": build,
            "build_cpu_s": build_cpu,
            "size_bytes": size_bytes, "stats_ms": stats_ms, "lookups": rows}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            return next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="data_dir", default="../shared/data", help="the folder holding tatoeba/")
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000], help="entries in each memory")
    p.add_argument("--queries", type=int, default=1000, help="lookups of each kind")
    p.add_argument("--batch", type=int, default=5000, help="entries per import transaction")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", help="build the memories here and keep them, or measure those built there before "
                   "(default: a temporary folder, removed)")
    p.add_argument("--json", dest="json_out", help="write every number here")
    args = p.parse_args(argv)
    pairs = read_pairs(Path(args.data_dir) / "tatoeba" / "eng-fra.txt")
    random.Random(args.seed).shuffle(pairs)
    vocabulary = sorted({word for source, _ in pairs for word in source.split()})
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="memory-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(),
               "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
               "load_before": os.getloadavg()[0]}
    results = {}
    try:
        for size in args.sizes:
            results[size] = measure(size, pairs, vocabulary, args, folder)
            result = results[size]
            imported = ("imported before" if result["build_s"] is None else
                        f"imported in {result['build_s']:.1f} s ({result['build_cpu_s']:.1f} s of CPU, "
                        f"{result['added'] / result['build_cpu_s']:,.0f} entries per CPU second)")
            print(f"\n{result['entries']:,} entries: {imported}, {result['size_bytes'] / 2**20:.1f} MiB on disk, "
                  f"stats() {result['stats_ms']:.2f} ms")
            print(f"  {'lookup':<18} {'median ms':>9} {'p99 ms':>8} {'CPU median':>10} {'CPU p99':>8}  found, as good")
            for kind, row in result["lookups"].items():
                found = f"{row['found']}/{row['due']}, {row['as_good']}/{row['due']}" if "due" in row else ""
                print(f"  {kind:<18} {row['median_ms']:>9.3f} {row['p99_ms']:>8.3f} {row['cpu_median_ms']:>10.3f} "
                      f"{row['cpu_p99_ms']:>8.3f}  {found}", flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    machine["load_after"] = os.getloadavg()[0]
    print(f"\n{machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, SQLite {machine['sqlite']}, "
          f"load average {machine['load_before']:.1f} before, {machine['load_after']:.1f} after")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"machine": machine, "results": results}, indent=2) + "\n",
                                       encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
