"""How long the command line takes to answer ``--help``: what it imports before it can print.

Each case runs ``python -m transformer.cli ARGS`` (the command ``transformer`` runs the same
``main``) in a fresh process, from the checkout's root; the cases (of every checkout given)
alternate within each round, and the table shows the median wall time over the rounds, the median
CPU time (user + system) and the largest peak resident memory of each. ``python -c pass`` is the
interpreter's own start, for reference. The load average is printed with the table: on a shared
machine the wall times follow it, the CPU times much less.

``--checkout DIR ...`` measures the package of other checkouts (``git worktree add /tmp/old
COMMIT``), each first on ``sys.path``, to compare versions on the same machine in one run.

    python benchmarks/cli_startup.py                       # 7 rounds, about 10 seconds
    python benchmarks/cli_startup.py --checkout . /tmp/old --rounds 11 --out startup.json
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

ROOT = Path(__file__).resolve().parents[1]
CASES = {  # name -> the arguments after ``python``
    "python -c pass": ["-c", "pass"],
    "transformer --help": ["-m", "transformer.cli", "--help"],
    "transformer translate --help": ["-m", "transformer.cli", "translate", "--help"],
    "transformer serve --help": ["-m", "transformer.cli", "serve", "--help"],
}


def run_once(args: list[str], checkout: Path) -> tuple[float, float, int]:
    """One run of ``python ARGS`` in ``checkout`` (its package first on ``sys.path``): its wall time
    (s), CPU time (s) and peak resident memory (KiB)."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, cwd=checkout)
    _, status, usage = os.wait4(process.pid, 0)  # the child's own resource usage, which Popen.wait does not give
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"python {' '.join(args)} in {checkout} exited with status {process.returncode} (its error "
                         "is above)")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def measure(rounds: int, checkouts: list[Path]) -> dict[str, dict[str, dict[str, float]]]:
    runs = {str(c): {name: [] for name in CASES} for c in checkouts}
    for checkout in checkouts:  # a first run of each, not counted: the files come into the page cache
        for args in CASES.values():
            run_once(args, checkout)
    for _ in range(rounds):
        for checkout in checkouts:
            for name, args in CASES.items():
                runs[str(checkout)][name].append(run_once(args, checkout))
    return {checkout: {name: {"wall_s": statistics.median(r[0] for r in results),
                              "cpu_s": statistics.median(r[1] for r in results),
                              "peak_rss_mib": max(r[2] for r in results) / 1024}
                       for name, results in cases.items()}
            for checkout, cases in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs of each case (default: 7); the median is shown")
    parser.add_argument("--checkout", type=Path, nargs="+", default=[ROOT],
                        help="the checkouts whose package to measure (default: this one)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    checkouts = [c.resolve() for c in args.checkout]
    for checkout in checkouts:
        if not (checkout / "transformer" / "cli.py").is_file():
            parser.error(f"{checkout} is not a checkout of this project (no transformer/cli.py)")
    load_before = os.getloadavg()[0]
    results = measure(args.rounds, checkouts)
    load_after = os.getloadavg()[0]
    print(f"{args.rounds} rounds, {len(os.sched_getaffinity(0))} CPUs, load average {load_before:.2f} before, "
          f"{load_after:.2f} after (1 minute)")
    width = max(len(name) for name in CASES)
    for checkout, cases in results.items():
        print(f"\n{checkout}\n{'case':<{width}}  {'wall (s)':>8}  {'CPU (s)':>7}  {'peak RSS (MiB)':>14}")
        for name, result in cases.items():
            print(f"{name:<{width}}  {result['wall_s']:>8.3f}  {result['cpu_s']:>7.3f}  {result['peak_rss_mib']:>14.1f}")
    if args.out:
        args.out.write_text(json.dumps({"rounds": args.rounds, "load_average": [load_before, load_after],
                                        "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
