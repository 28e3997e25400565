"""Load on ``transformer serve``: throughput and latency with dynamic batching against batch size 1.

    python benchmarks/serve_load.py RUN_DIR [--clients 64] [--seconds 60] [--sentences FILE] [--precision int8] [--device cuda]

For each mode (``dynamic``: the server's dynamic batching, up to --max-batch-size texts per model
call; ``batch1``: --max-batch-size 1) the script starts ``transformer serve RUN_DIR`` on 127.0.0.1
(a free port), lets --clients concurrent clients send one sentence per request for --seconds
seconds, and reports sentences/s, p50/p99 latency, failed requests and the server's mean batch
size; then it stops the server with SIGTERM and checks that it exits 0. An overload check
follows: a server with a short queue (--overload-queue) gets --overload-requests requests at
once; the excess must be answered 503 quickly, the rest 200.

With --reload-after SECONDS, each mode's server swaps its model in that many seconds into the
load (docs/serving.md, Reloading): to --reload-run DIR through ``POST /admin/reload`` (the server
gets a fresh admin key), or without --reload-run by SIGHUP (RUN_DIR loaded again). The result
then counts the answers of each model version and the reload's answer; failed requests should
stay 0.

Only 127.0.0.1 is contacted, every run is bounded (clients <= 1024, seconds <= 600). Sentences
come from --sentences (one per line, plain or gzip) or the built-in French corpus. The last line
printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import gzip
import json
import os
import signal
import sys
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_process import ServerProcess  # noqa: E402


def read_sentences(path: str | None, n: int = 2000) -> list[str]:
    if path is None:
        from transformer.corpus.builtin import generate_pairs

        return [fr for fr, _ in generate_pairs(n, seed=7)]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    if not lines:
        raise SystemExit(f"{path}: no sentences")
    return lines[:n]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


async def load(url: str, sentences: list[str], clients: int, seconds: float, beam_size: int,
               reload: tuple[float, Any] | None = None) -> dict:
    """``clients`` loops, each sending one sentence per request until ``seconds`` have passed;
    ``reload``: (after how many seconds, an async function) to call once in the middle of it."""
    latencies: list[float] = []
    failures: dict[str, int] = {}
    versions: dict[str, int] = {}
    reloaded: dict = {}
    counter = iter(range(10**9))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        start = time.perf_counter()
        deadline = start + seconds

        async def one_client() -> None:
            while time.perf_counter() < deadline:
                text = sentences[next(counter) % len(sentences)]
                sent = time.perf_counter()
                try:
                    r = await client.post("/v1/translate", json={"text": text, "beam_size": beam_size})
                    if r.status_code == 200:
                        latencies.append(time.perf_counter() - sent)
                        version = r.json().get("model_version") or "?"
                        versions[version] = versions.get(version, 0) + 1
                    else:
                        failures[str(r.status_code)] = failures.get(str(r.status_code), 0) + 1
                except httpx.HTTPError as err:
                    failures[type(err).__name__] = failures.get(type(err).__name__, 0) + 1

        async def reload_once() -> None:
            await asyncio.sleep(reload[0])
            reloaded.update(await reload[1]())
            reloaded["at_s"] = round(time.perf_counter() - start, 1)

        await asyncio.gather(*(one_client() for _ in range(clients)), *([reload_once()] if reload else []))
        elapsed = time.perf_counter() - start
    result = {"sentences": len(latencies), "seconds": round(elapsed, 1),
              "sentences_per_s": round(len(latencies) / elapsed, 2),
              "p50_ms": round(percentile(latencies, 50) * 1000, 1), "p99_ms": round(percentile(latencies, 99) * 1000, 1),
              "failed": sum(failures.values()), "failures": failures}
    if reload:
        result["versions"] = versions
        result["reload"] = reloaded
    return result


def reloader(server: ServerProcess, run: str | None, key: str):
    """The reload of ``--reload-after``: ``POST /admin/reload`` to ``run``, or SIGHUP without one."""
    async def reload() -> dict:
        if run is None:
            server.proc.send_signal(signal.SIGHUP)
            return {"how": "SIGHUP"}
        async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
            r = await client.post("/admin/reload", json={"run": run}, headers={"X-Admin-Key": key})
        return {"how": "POST /admin/reload", "status": r.status_code, "answer": r.json()}
    return reload


async def burst(url: str, sentences: list[str], n: int, beam_size: int) -> dict:
    """``n`` requests at once; how many got 200 and 503, and how fast the 503s came.

    First ``n`` GET /health at once (no model work, fresh connections, like the burst) give the
    baseline: what answering ``n`` requests at once costs on this machine, client included."""
    async def timed(client: httpx.AsyncClient, method: str, path: str, body: dict | None) -> tuple[str, float]:
        sent = time.perf_counter()
        try:
            r = await client.request(method, path, json=body)
            status = str(r.status_code)
        except httpx.HTTPError as err:
            status = type(err).__name__
        return status, time.perf_counter() - sent

    limits = httpx.Limits(max_connections=n)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        baseline = await asyncio.gather(*(timed(client, "GET", "/health", None) for _ in range(n)))
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        results = await asyncio.gather(*(timed(client, "POST", "/v1/translate", {
            "text": sentences[i % len(sentences)], "beam_size": beam_size}) for i in range(n)))
    by_status: dict[str, list[float]] = {}
    for status, seconds in results:
        by_status.setdefault(status, []).append(seconds)
    rejected = by_status.get("503", [])
    return {"requests": n, "status_counts": {k: len(v) for k, v in sorted(by_status.items())},
            "health_burst_p99_ms": round(percentile([s for _, s in baseline], 99) * 1000, 1),
            "rejected_p50_ms": round(percentile(rejected, 50) * 1000, 1),
            "rejected_p99_ms": round(percentile(rejected, 99) * 1000, 1),
            "served_p99_ms": round(percentile(by_status.get("200", []), 99) * 1000, 1),
            "other_failures": sum(len(v) for k, v in by_status.items() if k not in ("200", "503"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("run_dir", help="run directory of a trained model")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients (default: 64, at most 1024)")
    parser.add_argument("--seconds", type=float, default=60.0, help="load time per mode (default: 60, at most 600)")
    parser.add_argument("--modes", default="dynamic,batch1", help="dynamic, batch1, both, or none: only the overload check (default: both)")
    parser.add_argument("--max-batch-size", type=int, default=None,
                        help="texts per model call in dynamic mode (default: the server's for the device, 32 on a CPU)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="the server's --device (default: cpu)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0, help="the batching window (default: 5)")
    parser.add_argument("--beam", type=int, default=4, help="beam size of every request (default: 4)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "int8", "fp16"),
                        help="the server's --precision (default: fp32)")
    parser.add_argument("--sentences", help="one source sentence per line (plain or .gz; default: built-in French)")
    parser.add_argument("--overload-queue", type=int, default=16, help="--max-queue of the overload check (default: 16)")
    parser.add_argument("--overload-requests", type=int, default=200,
                        help="requests sent at once in the overload check (default: 200; 0 skips it)")
    parser.add_argument("--reload-after", type=float, default=None, metavar="SECONDS",
                        help="reload the model this many seconds into each mode's load (default: no reload)")
    parser.add_argument("--reload-run", metavar="DIR", help="with --reload-after: the run swapped in through POST "
                        "/admin/reload (default: RUN_DIR again, by SIGHUP)")
    args = parser.parse_args()
    if args.reload_run is not None and args.reload_after is None:
        parser.error("--reload-run needs --reload-after SECONDS")
    if args.reload_after is not None and not 0 <= args.reload_after < args.seconds:
        parser.error("--reload-after must be in [0, --seconds)")
    if not 1 <= args.clients <= 1024 or not 0 < args.seconds <= 600 or not 0 <= args.overload_requests <= 2000:
        parser.error("--clients must be in 1..1024, --seconds in (0, 600], --overload-requests in 0..2000")
    modes = [m for m in args.modes.split(",") if m and m != "none"]
    if any(m not in ("dynamic", "batch1") for m in modes):
        parser.error(f"--modes takes dynamic and/or batch1 (or none), got {args.modes!r}")
    sentences = read_sentences(args.sentences)
    if args.max_batch_size is None:
        from transformer.cuda import decoding as cuda_decoding
        from transformer.serve.limits import ServeLimits

        args.max_batch_size = cuda_decoding.SERVE_BATCH_SIZE if args.device == "cuda" else ServeLimits().max_batch_size
    common = ["--log-level", "warning", "--beam", str(args.beam), "--batch-wait-ms", str(args.batch_wait_ms), "--device", args.device,
              "--precision", args.precision]
    key = secrets.token_urlsafe(24)
    key_file = None
    if args.reload_run is not None:  # a key file: the key stays out of the process list
        key_file = tempfile.NamedTemporaryFile("w", suffix=".key", delete=False)
        key_file.write(key + "\n")
        key_file.close()
        atexit.register(os.unlink, key_file.name)  # however the script ends
        common += ["--admin-key-file", key_file.name]
    summary: dict = {"run_dir": str(Path(args.run_dir)), "clients": args.clients, "seconds": args.seconds,
                     "beam_size": args.beam, "precision": args.precision, "cpus": os.cpu_count(), "device": args.device,
                     "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "modes": {}}

    for mode in modes:
        size = args.max_batch_size if mode == "dynamic" else 1
        server = ServerProcess(args.run_dir, [*common, "--max-batch-size", str(size), "--max-queue", str(4 * args.clients)])
        try:
            asyncio.run(load(server.url, sentences, min(args.clients, 4), 2.0, args.beam))  # warm-up
            before = server.health()["batching"]
            reload = None if args.reload_after is None else (args.reload_after,
                                                             reloader(server, args.reload_run, key))
            result = asyncio.run(load(server.url, sentences, args.clients, args.seconds, args.beam, reload))
            after = server.health()["batching"]
        finally:
            result_exit = server.stop()
        batches = after["batches"] - before["batches"]
        result["mean_batch_size"] = round((after["batched_texts"] - before["batched_texts"]) / max(batches, 1), 2)
        result["exit_status_after_sigterm"] = result_exit
        summary["modes"][mode] = result
        print(f"{mode:>8}: {result['sentences_per_s']:7.2f} sentences/s  p50 {result['p50_ms']:8.1f} ms  "
              f"p99 {result['p99_ms']:8.1f} ms  failed {result['failed']}  mean batch {result['mean_batch_size']}  "
              f"exit {result_exit}", flush=True)
        if "reload" in result:
            print(f"{'':>8}  reload ({result['reload'].get('how')}) at {result['reload'].get('at_s')} s: answers by "
                  f"model version {result['versions']}", flush=True)

    if args.overload_requests:
        server = ServerProcess(args.run_dir, [*common, "--max-batch-size", str(args.max_batch_size),
                                                "--max-queue", str(args.overload_queue)])
        try:
            over = asyncio.run(burst(server.url, sentences, args.overload_requests, args.beam))
        finally:
            overload_exit = server.stop()
        over["exit_status_after_sigterm"] = overload_exit
        summary["overload"] = over
        print(f"overload: {args.overload_requests} requests at once, queue {args.overload_queue}: "
              f"{over['status_counts']}; 503 p50 {over['rejected_p50_ms']} ms, p99 {over['rejected_p99_ms']} ms; "
              f"served p99 {over['served_p99_ms']} ms; baseline ({args.overload_requests} GET /health at once) "
              f"p99 {over['health_burst_p99_ms']} ms", flush=True)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
