"""How many bad suggestions pass the checks of ``transformer.translate.suggestion_checks``, and how
many good ones, for a French -> English run.

Good suggestions are Tatoeba's references (``tatoeba/eng-fra.txt`` under ``--from``, read there;
its train split as ``transformer evaluate --corpus tatoeba`` splits it, so that the test split
never decides a threshold; shuffled with ``--seed``): a French sentence and its English
translation. Bad ones are planted, the same number, in turn of these kinds:

- ``wrong language (fr)``: another French translation of the source's English (Tatoeba often has
  several; else the French of another pair): a person who answered in the source's language;
- ``wrong language (de)``: Multi30k's German translation of a Multi30k French validation sentence;
- ``copy of source``: the source itself, as it is, in lower case, or without its last character;
- ``random string``: letters and spaces as long as the reference, or a key held down ("aaaaaa");
- ``truncation``: the reference cut after a third to two thirds of its words (references of 4
  words or more);
- ``other sentence``: the reference of another pair, as long within a fifth;
- ``machine translation``: the model's own translation of the source;
- ``repeated``: a good suggestion sent again while the first waits for review.

Every suggestion goes through :func:`~transformer.translate.suggestion_checks.check_suggestion`
with the default thresholds (the good first, in a fresh memory where each that passes is added as
pending, then the bad; the relevance check's other sentences 4 Tatoeba sources, as a memory's
entries would give them), and the tables print how many of each kind pass, how many were refused
by each check, the model checks' measures (the log-probability of the end after the suggestion,
the score gap to the model's own translation, the relevance) by kind for the suggestions that
reached the model, and what other values of ``ABSURD_MARGIN`` and ``MIN_RELEVANCE`` would let pass.

    python benchmarks/suggestion_checks.py runs/fr-en --from ../shared/data
    python benchmarks/suggestion_checks.py runs/fr-en --limit 20 --out checks.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("wrong language (fr)", "wrong language (de)", "copy of source", "random string", "truncation",
         "other sentence", "machine translation", "repeated")
MARGINS = (4.0, 5.0, 6.0, 8.0)
RELEVANCES = (0.0, 0.25, 0.3, 0.5)


def read_tatoeba(folder: Path) -> list[tuple[str, str]]:
    """The ``(french, english)`` pairs of Tatoeba's train split (seed 0, as ``transformer evaluate``'s)."""
    from transformer.corpus.registry import corpus_pairs, tatoeba_splits

    return tatoeba_splits(corpus_pairs("tatoeba", src="fr", tgt="en", split="all", directory=folder), seed=0)["train"]


def read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as file:
        return [line.rstrip("\n") for line in file]


def plant(pairs: list[tuple[str, str]], multi30k: tuple[list[str], list[str]], n: int,
          rng: random.Random) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """``n`` good ``(source, suggestion)`` pairs and ``n`` bad ``(kind, source, suggestion)`` ones
    (``machine translation`` and ``repeated`` with an empty suggestion, filled in later)."""
    order = list(range(len(pairs)))
    rng.shuffle(order)
    good = [pairs[i] for i in order[:n]]
    rest = [pairs[i] for i in order[n:]]
    by_english: dict[str, list[str]] = defaultdict(list)
    for fr, en in pairs:
        by_english[en].append(fr)
    by_length: dict[int, list[str]] = defaultdict(list)
    for _, en in rest:
        by_length[len(en)].append(en)
    bad = []
    it = iter(rest)
    for k in range(n):
        kind = KINDS[k % len(KINDS)]
        fr, en = next(it)
        if kind == "wrong language (fr)":
            others = [f for f in by_english[en] if f != fr]
            suggestion = rng.choice(others) if others else rng.choice(rest)[0]
        elif kind == "wrong language (de)":
            j = rng.randrange(len(multi30k[0]))
            fr, suggestion = multi30k[0][j], multi30k[1][j]
        elif kind == "copy of source":
            suggestion = rng.choice([fr, fr.lower(), fr[:-1]])
        elif kind == "random string":
            suggestion = rng.choice(["".join(rng.choice("abcdefghijklmnopqrstuvwxyz     ") for _ in en),
                                     rng.choice("asdfjkl") * len(en)])
        elif kind == "truncation":
            while len(en.split()) < 4:
                fr, en = next(it)
            words = en.split()
            suggestion = " ".join(words[: max(1, round(len(words) * rng.uniform(1 / 3, 2 / 3)))])
        elif kind == "other sentence":
            near = [e for d in range(-len(en) // 5, len(en) // 5 + 1) for e in by_length.get(len(en) + d, ())
                    if e != en]
            suggestion = rng.choice(near) if near else rng.choice(rest)[1]
        else:  # machine translation, repeated: made once the model and the good ones are known
            suggestion = ""
        bad.append((kind, fr, suggestion))
    return good, bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a trained French -> English run directory")
    parser.add_argument("--from", dest="data", type=Path, default=ROOT.parent / "shared" / "data",
                        help="the folder holding tatoeba/ and multi30k/ (default: ../shared/data)")
    parser.add_argument("--limit", type=int, default=500, help="good suggestions, and as many bad (default 500)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args()
    if args.limit < len(KINDS):
        sys.exit(f"--limit must be at least {len(KINDS)} (one bad suggestion of each kind)")
    tatoeba = args.data / "tatoeba" / "eng-fra.txt"
    multi30k = args.data / "multi30k"
    for path in (tatoeba, multi30k / "val.fr.gz", multi30k / "val.de.gz"):
        if not path.is_file():
            sys.exit(f"{path} not found: --from names the folder holding tatoeba/ and multi30k/")

    from transformer.memory import TranslationMemory
    from transformer.translate.suggestion_checks import CONTRAST_SOURCES, Thresholds, check_suggestion, model_views
    from transformer.translate.translator import load_translator

    translator = load_translator(args.run_dir)
    if (translator.src_lang, translator.tgt_lang) != ("fr", "en"):
        sys.exit(f"{args.run_dir} translates {translator.src_lang} -> {translator.tgt_lang}; this benchmark needs fr -> en")
    rng = random.Random(args.seed)
    pairs = read_tatoeba(tatoeba.parent)
    good, bad = plant(pairs, (read_lines(multi30k / "val.fr.gz"), read_lines(multi30k / "val.de.gz")), args.limit, rng)
    mt = [i for i, (kind, _, _) in enumerate(bad) if kind == "machine translation"]
    for i, text in zip(mt, translator.translate([bad[i][1] for i in mt])):
        bad[i] = (bad[i][0], bad[i][1], text)
    for i, (kind, _, _) in enumerate(bad):
        if kind == "repeated":
            bad[i] = (kind, *good[rng.randrange(len(good))])
    thresholds = Thresholds()
    items = [("good", s, t) for s, t in good] + bad
    # the relevance check's other sentences: as a server's memory gives them, sources of other entries
    contrast = [fr for fr, _ in rng.sample(pairs[-10000:], CONTRAST_SOURCES)]
    verdicts = []
    start_cpu, start = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory() as folder, TranslationMemory(os.path.join(folder, "memory.db")) as memory:
        for kind, source, suggestion in items:
            refusal = check_suggestion(source, suggestion, "fr", "en", translator=translator, memory=memory,
                                       contrast=contrast, thresholds=thresholds)
            verdicts.append(refusal)
            if refusal is None and kind == "good":
                memory.add(source, suggestion, "fr", "en", origin="suggestion")
    cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start
    # the model checks' measures for every suggestion that reached the model (the cheap checks passed)
    model_reasons = ("machine_translation", "unfinished", "absurd", "unrelated")
    reached = [i for i, r in enumerate(verdicts) if r is None or r.reason.value in model_reasons]
    views = dict(zip(reached, model_views(translator, [items[i][1] for i in reached], [items[i][2] for i in reached],
                                          [contrast] * len(reached))))

    rows, refusals = {}, defaultdict(Counter)
    for (kind, _, _), refusal in zip(items, verdicts):
        row = rows.setdefault(kind, {"n": 0, "passed": 0})
        row["n"] += 1
        row["passed"] += refusal is None
        refusals["good" if kind == "good" else "bad"][refusal.reason.value if refusal else "passed"] += 1
    bad_n = sum(r["n"] for k, r in rows.items() if k != "good")
    bad_passed = sum(r["passed"] for k, r in rows.items() if k != "good")
    print(f"{args.run_dir}: {len(good)} good suggestions (Tatoeba references), {bad_n} bad; "
          f"checks {1000 * cpu / len(items):.1f} ms CPU a suggestion ({wall:.0f} s wall, load {os.getloadavg()[0]:.1f})")
    print(f"\n{'suggestions':24} {'n':>5} {'passed':>7} {'share':>7}")
    for kind in ("good", *KINDS):
        if kind in rows:
            r = rows[kind]
            print(f"{kind:24} {r['n']:>5} {r['passed']:>7} {r['passed'] / r['n']:>7.1%}")
    print(f"{'bad, all kinds':24} {bad_n:>5} {bad_passed:>7} {bad_passed / bad_n:>7.1%}")
    reasons = ["implausible_length", "copy_of_source", "near_duplicate_pending", "wrong_language", *model_reasons,
               "passed"]
    print(f"\n{'refused by':24} {'good':>6} {'bad':>6}")
    for reason in reasons:
        print(f"{reason:24} {refusals['good'][reason]:>6} {refusals['bad'][reason]:>6}")
    measures = {"end_log_prob": lambda v: v.end_log_prob, "gap": lambda v: v.gap, "relevance": lambda v: v.relevance}
    groups: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in measures}
    for i in reached:
        if views[i] is not None and items[i][0] not in ("machine translation", "repeated"):
            for name, get in measures.items():
                if get(views[i]) is not None:
                    groups[name][items[i][0]].append(get(views[i]))
    for name, limit in (("end_log_prob", f"refused below {thresholds.min_end_log_prob:g}"),
                        ("gap", f"refused above {thresholds.absurd_margin:g}"),
                        ("relevance", f"refused below {thresholds.min_relevance:g}")):
        print(f"\n{name} of the suggestions that reached the model (nats; {limit})")
        print(f"{'suggestions':24} {'n':>5} {'p5':>7} {'p50':>7} {'p95':>7}")
        for kind in ("good", *KINDS):
            if groups[name].get(kind):
                p5, p50, p95 = np.percentile(groups[name][kind], [5, 50, 95])
                print(f"{kind:24} {len(groups[name][kind]):>5} {p5:>7.2f} {p50:>7.2f} {p95:>7.2f}")

    def passes(i: int, t: Thresholds) -> bool:
        """Whether suggestion ``i`` passes every check with the model checks at ``t`` (they come
        last: a suggestion one of them refused, or none did, passed all the others)."""
        if verdicts[i] is not None and verdicts[i].reason.value not in ("unfinished", "absurd", "unrelated"):
            return False
        v = views.get(i)
        return v is None or ((v.end_log_prob is None or v.end_log_prob >= t.min_end_log_prob)
                             and v.gap <= t.absurd_margin and (v.relevance is None or v.relevance >= t.min_relevance))

    sweep = []
    print(f"\n{'min relevance':>13} {'absurd margin':>13} {'good pass':>10} {'bad pass':>9}  (every check; these two "
          f"at these values)")
    for relevance in RELEVANCES:
        for margin in MARGINS:
            t = Thresholds(absurd_margin=margin, min_relevance=relevance)
            good_pass = sum(passes(i, t) for i, item in enumerate(items) if item[0] == "good") / len(good)
            bad_pass = sum(passes(i, t) for i, item in enumerate(items) if item[0] != "good") / bad_n
            sweep.append({"min_relevance": relevance, "margin": margin, "good_passed": good_pass,
                          "bad_passed": bad_pass})
            print(f"{relevance:>13g} {margin:>13g} {good_pass:>10.1%} {bad_pass:>9.1%}")
    if args.out:
        args.out.write_text(json.dumps({
            "run_dir": str(args.run_dir), "good": len(good), "bad": bad_n, "seed": args.seed,
            "thresholds": vars(thresholds), "kinds": rows, "refusals": {k: dict(v) for k, v in refusals.items()},
            "measures": {name: dict(g) for name, g in groups.items()}, "sweep": sweep,
            "cpu_ms_per_suggestion": 1000 * cpu / len(items), "wall_s": wall,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "load_average": os.getloadavg()[0]}, indent=1) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
