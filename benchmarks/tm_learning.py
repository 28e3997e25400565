"""A model that learns from its users: Tatoeba pairs sent to a real server's ``/suggest``, the
accepted ones served back from the memory, then ``transformer adapt`` on them, and BLEU before and
after on Tatoeba's test split (the users' domain) and Multi30k's test_2016 (the run's own).

For a French -> English run (the Multi30k recipe of docs/quality.md):

1. Tatoeba's pairs (``tatoeba/eng-fra.txt`` under ``--from``) are split as ``transformer
   evaluate --corpus tatoeba`` splits them (:func:`~transformer.corpus.registry.tatoeba_splits`,
   seed 0: no French sentence in two splits); ``--suggestions`` pairs of the train split, drawn
   with ``--seed``, are the users' corrections.
2. ``transformer serve RUN --tm DB --tm-auto-accept`` takes them one by one on LibreTranslate's
   ``POST /suggest`` (each checked; those that pass are accepted); the counts by answer and by
   refusal reason are printed.
3. Every accepted source is sent to ``POST /translate``: how many come back as their entry
   (``translatedText`` the entry's target, marked by ``memory`` with similarity 1).
4. ``transformer evaluate`` scores the run on Tatoeba's valid and test splits and on test_2016
   (beam 4, length penalty 0.6, sacreBLEU); ``transformer adapt RUN --tm DB --out NEW --steps
   N`` (timed) adapts it, and the adapted run is scored the same way. Settings such as
   ``--steps`` are chosen on Tatoeba's valid split; the test split is reported, never chosen on.

    python benchmarks/tm_learning.py runs/fr-en --from ../shared/data --out /tmp/tm-learning
    python benchmarks/tm_learning.py runs/fr-en --from ../shared/data --out /tmp/tm-learning --steps 500 \\
        --json tm_learning.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_process import ServerProcess  # noqa: E402

from transformer.corpus.registry import corpus_pairs, tatoeba_splits  # noqa: E402
from transformer.memory import TranslationMemory  # noqa: E402


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(" ".join(line.split()) + "\n" for line in lines), encoding="utf-8")
    return path


def test_sets(data: Path, work: Path, seed: int, n: int) -> tuple[list[tuple[str, str]], dict[str, tuple[Path, Path]]]:
    """The ``n`` suggestions ``(fr, en)`` from Tatoeba's train split, and each test set's source
    and reference files (Tatoeba's valid and test splits, Multi30k's test_2016)."""
    pairs = corpus_pairs("tatoeba", src="fr", tgt="en", split="all", directory=data / "tatoeba")
    splits = tatoeba_splits(pairs, seed=0)
    suggestions = random.Random(seed).sample(splits["train"], n)
    sets = {}
    for name in ("valid", "test"):
        sets[f"tatoeba {name}"] = (write_lines(work / f"tatoeba.{name}.fr", [fr for fr, _ in splits[name]]),
                                   write_lines(work / f"tatoeba.{name}.en", [en for _, en in splits[name]]))
    sets["multi30k test_2016"] = (data / "multi30k" / "test_2016_flickr.fr.gz",
                                  data / "multi30k" / "test_2016_flickr.en.gz")
    return suggestions, sets


def send_suggestions(server: ServerProcess, suggestions: list[tuple[str, str]]) -> dict:
    """Each pair to ``/suggest``; the answers counted, and the accepted ``(source, target)``."""
    answers: Counter = Counter()
    reasons: Counter = Counter()
    accepted = []
    start = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for i, (fr, en) in enumerate(suggestions, 1):
            r = client.post("/suggest", json={"q": fr, "s": en, "source": "fr", "target": "en"})
            answers[r.status_code] += 1
            body = r.json()
            if r.status_code == 200 and body.get("status") == "accepted":
                accepted.append((fr, en))
            elif r.status_code == 400:
                reasons[body.get("reason", "?")] += 1
            if i % 100 == 0:
                print(f"  /suggest: {i}/{len(suggestions)} sent, {len(accepted)} accepted", flush=True)
    seconds = time.monotonic() - start
    return {"sent": len(suggestions), "answers": {str(k): v for k, v in sorted(answers.items())},
            "accepted": len(accepted), "refused_by_reason": dict(reasons.most_common()),
            "seconds": round(seconds, 1), "accepted_pairs": accepted}


def recall_accepted(server: ServerProcess, accepted: list[tuple[str, str]]) -> dict:
    """Each accepted source to ``/translate``: how many come back as their entry."""
    back, missed = 0, []
    latencies = []
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for fr, en in accepted:
            start = time.perf_counter()
            r = client.post("/translate", json={"q": fr, "source": "fr", "target": "en"})
            latencies.append(time.perf_counter() - start)
            body = r.json()
            marks = body.get("memory") or []
            if (r.status_code == 200 and body.get("translatedText") == en
                    and any(m.get("memory", {}).get("similarity") == 1.0 for m in marks)):
                back += 1
            else:
                missed.append({"source": fr, "entry": en, "answer": body})
    latencies.sort()
    return {"accepted": len(accepted), "came_back": back, "missed": missed[:10],
            "p50_ms": round(1000 * latencies[len(latencies) // 2], 1) if latencies else None}


def evaluate(run: Path, sets: dict[str, tuple[Path, Path]], threads: str | None) -> dict[str, float]:
    """sacreBLEU of ``run`` on each test set (``transformer evaluate --json``)."""
    scores = {}
    for name, (src, ref) in sets.items():
        command = [sys.executable, "-m", "transformer.cli", "evaluate", str(run), "--src", str(src), "--ref", str(ref),
                   "--src-lang", "fr", "--tgt-lang", "en", "--beam", "4", "--alpha", "0.6", "--json"]
        if threads:
            command += ["--threads", threads]
        out = subprocess.run(command, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"transformer evaluate failed on {name}: {out.stderr[-2000:]}")
        scores[name] = round(json.loads(out.stdout.strip().splitlines()[-1])["bleu"], 2)
        print(f"  {run.name}: {name} BLEU {scores[name]:.2f}", flush=True)
    return scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a French -> English run")
    parser.add_argument("--from", dest="data", type=Path, required=True,
                        help="the folder holding tatoeba/eng-fra.txt and multi30k/ (e.g. ../shared/data)")
    parser.add_argument("--out", type=Path, required=True,
                        help="a new folder for the memory, the test files and the adapted run")
    parser.add_argument("--suggestions", type=int, default=1000, help="Tatoeba pairs sent to /suggest (default: 1000)")
    parser.add_argument("--steps", type=int, default=200, help="transformer adapt's --steps (default: 200)")
    parser.add_argument("--adapt-option", action="append", default=[], metavar="ARG",
                        help="another argument for transformer adapt (repeatable), e.g. --adapt-option=train.lr=5e-4")
    parser.add_argument("--seed", type=int, default=0, help="which train pairs are the suggestions (default: 0)")
    parser.add_argument("--threads", help="--threads of the server, evaluate and adapt (default: theirs)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"--out {args.out} exists: name a new folder")
    args.out.mkdir(parents=True)
    threads = ["--threads", args.threads] if args.threads else []
    result: dict = {"run_dir": str(args.run_dir), "steps": args.steps, "cpus": os.cpu_count(),
                    "loadavg_start": [round(x, 1) for x in os.getloadavg()]}

    suggestions, sets = test_sets(args.data, args.out, args.seed, args.suggestions)
    tm = (args.out / "memory.db").resolve()
    TranslationMemory(tm).close()  # an empty memory, which the server fills
    print(f"sending {len(suggestions)} Tatoeba pairs to /suggest ...", flush=True)
    server = ServerProcess(args.run_dir, ["--tm", str(tm), "--tm-auto-accept", "--tm-suggest-limit", "1000000",
                                          "--log-level", "warning", *threads])
    try:
        sent = send_suggestions(server, suggestions)
        recall = recall_accepted(server, sent.pop("accepted_pairs"))
    finally:
        server.stop()
    result.update(suggest=sent, recall=recall)
    print(f"/suggest: {sent['accepted']} of {sent['sent']} accepted in {sent['seconds']} s; refused: "
          f"{sent['refused_by_reason']}", flush=True)
    print(f"/translate: {recall['came_back']} of {recall['accepted']} accepted sources came back as their entry "
          f"(p50 {recall['p50_ms']} ms)", flush=True)

    print("scoring the run ...", flush=True)
    result["before"] = evaluate(args.run_dir, sets, args.threads)
    adapted = args.out / "adapted"
    command = [sys.executable, "-m", "transformer.cli", "adapt", str(args.run_dir), "--tm", str(tm), "--out", str(adapted),
               "--steps", str(args.steps), *threads, *args.adapt_option]
    print(f"adapting: {' '.join(command[2:])}", flush=True)
    start = time.monotonic()
    adapt = subprocess.run(command, capture_output=True, text=True)
    result["adapt"] = {"exit_status": adapt.returncode, "wall_s": round(time.monotonic() - start, 1),
                       "report": [line for line in adapt.stdout.splitlines() if "BLEU" in line or "trained" in line
                                  or line.startswith("memory:")],
                       "stderr_tail": adapt.stderr[-600:] if adapt.returncode else ""}
    print("\n".join(result["adapt"]["report"]) or adapt.stderr[-2000:], flush=True)
    print(f"transformer adapt: exit {adapt.returncode} after {result['adapt']['wall_s']} s", flush=True)
    if adapt.returncode == 0:
        result["after"] = evaluate(adapted, sets, args.threads)
        print("\n| test set | before | after | change |\n|---|---|---|---|")
        for name, before in result["before"].items():
            after = result["after"][name]
            print(f"| {name} | {before:.2f} | {after:.2f} | {after - before:+.2f} |")
    result["loadavg_end"] = [round(x, 1) for x in os.getloadavg()]
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return 0 if adapt.returncode == 0 else adapt.returncode


if __name__ == "__main__":
    sys.exit(main())
