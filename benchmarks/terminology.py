"""Terminology constraints measured the way the terminology shared tasks do (Dinu et al. 2019).

On Multi30k test_2016_flickr (the run's language pair), with one trained run directory:

1. **A glossary from the training data.** Word pairs that align reliably: for every source word
   and target word (lowercased words of 3+ letters) the number of training sentence pairs holding
   both, and their Dice coefficient ``2 c(s, t) / (c(s) + c(t))``; a pair is kept when it occurs
   in at least ``--min-count`` pairs, its Dice is at least ``--min-dice``, and each word is the
   other's best partner (mutual best).
2. **Terms per test sentence.** A test sentence gets the (at most ``--terms``, the rarest in
   training first) glossary pairs whose source word it contains and whose target word its
   reference contains, the target written as the reference writes it (capitalised at the start
   of a sentence): what a term base gives a translator for that segment. Each sentence is
   translated with its own glossary (``translate(texts, glossary=[one Glossary per text])``);
   ``--union`` gives the union of all pairs to every sentence instead, as one file would.
3. **Decoding.** The test set is translated with beam ``--beam`` without the glossary, with it,
   and with a glossary of terms that never occur (invented source words): that one must change
   nothing, byte for byte. The runs take turns ``--rounds`` times; each time is the best of its
   rounds.
4. **Scores.** Term use: the share of (sentence, term) pairs whose target word is in the output
   (whole word, case-insensitive), with and without the glossary. sacreBLEU and chrF of each run.

    python benchmarks/terminology.py --run-dir /tmp/m30k-de-en --from ../shared/data
    python benchmarks/terminology.py --run-dir runs/multi30k-de-en --from ../shared/data --src-lang de --tgt-lang en --json out.json

Prints a markdown table (docs/decoding.md#terminology has the measured one) and, with --json,
writes every number.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from transformer.decoding import DecodeConfig
from transformer.translate.evaluation import score
from transformer.translate.glossary import Glossary
from transformer.translate.translator import load_translator

WORD = re.compile(r"[^\W\d_]{3,}")


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def reliable_pairs(sources: list[str], targets: list[str], *, min_count: int, min_dice: float) -> dict[str, tuple[str, int]]:
    """Mutually best word pairs by Dice coefficient: ``{source word: (target word, pairs holding both)}``."""
    src_count, tgt_count, both = Counter(), Counter(), Counter()
    for s, t in zip(sources, targets):
        ws, wt = words(s), words(t)
        src_count.update(ws)
        tgt_count.update(wt)
        both.update((a, b) for a in ws for b in wt)
    best_for_src: dict[str, tuple[float, str]] = {}
    best_for_tgt: dict[str, tuple[float, str]] = {}
    for (a, b), c in both.items():
        if c < min_count:
            continue
        dice = 2 * c / (src_count[a] + tgt_count[b])
        if dice > best_for_src.get(a, (0.0, ""))[0]:
            best_for_src[a] = (dice, b)
        if dice > best_for_tgt.get(b, (0.0, ""))[0]:
            best_for_tgt[b] = (dice, a)
    return {a: (b, both[(a, b)]) for a, (dice, b) in best_for_src.items()
            if dice >= min_dice and best_for_tgt[b][1] == a}


def find_word(text: str, word: str) -> str | None:
    """``word`` as ``text`` writes it (whole word, any case), or None."""
    found = re.search(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", text, flags=re.IGNORECASE)
    return found.group(0) if found else None


def has_word(text: str, word: str) -> bool:
    return find_word(text, word) is not None


def timed(translator, sources: list[str], glossary) -> tuple[list[str], float]:
    start = time.perf_counter()
    out = translator.translate(sources, glossary=glossary)
    return out, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--from", dest="data_dir", default="../shared/data", help="local copy of the corpora")
    p.add_argument("--src-lang", dest="src", default="de")
    p.add_argument("--tgt-lang", dest="tgt", default="en")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--terms", type=int, default=2, help="terms per test sentence at most (default: 2)")
    p.add_argument("--min-count", type=int, default=20)
    p.add_argument("--min-dice", type=float, default=0.6)
    p.add_argument("--sentences", type=int, default=None, help="the first N test sentences only")
    p.add_argument("--union", action="store_true", help="one glossary, the union of all terms, for every sentence")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", dest="json_out", help="write every number here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = Path(args.data_dir) / "multi30k"
    train_src, train_tgt = read(data / f"train.{args.src}.gz"), read(data / f"train.{args.tgt}.gz")
    test_src, test_ref = read(data / f"test_2016_flickr.{args.src}.gz"), read(data / f"test_2016_flickr.{args.tgt}.gz")
    if args.sentences:
        test_src, test_ref = test_src[: args.sentences], test_ref[: args.sentences]

    pairs = reliable_pairs(train_src, train_tgt, min_count=args.min_count, min_dice=args.min_dice)
    chosen: list[list[tuple[str, str]]] = []
    for s, r in zip(test_src, test_ref):
        found = sorted((pairs[w][1], w, pairs[w][0]) for w in words(s) if w in pairs and has_word(r, pairs[w][0]))
        chosen.append([(w, find_word(r, target)) for _, w, target in found[: args.terms]])
    union = Glossary.from_pairs(sorted({(w.lower(), t.lower()) for found in chosen for w, t in found}), name="terms")
    glossary = union if args.union else [Glossary.from_pairs(found, name=f"sentence {i + 1}")
                                         for i, found in enumerate(chosen)]
    never = Glossary.from_pairs([(f"zzq{i}wort", f"zzq{i}word") for i in range(len(union))], name="never")
    instances = [(i, target) for i, found in enumerate(chosen) for _, target in found]

    translator = load_translator(args.run_dir, decoding=DecodeConfig(beam_size=args.beam), device="cpu")
    translator.translate(test_src[:16])  # warm-up
    runs = {"unconstrained": None, "glossary": glossary, "never-occurring glossary": never}
    outputs: dict[str, list[str]] = {}
    seconds: dict[str, float] = {}
    for round_ in range(args.rounds):
        for name, g in runs.items():
            out, took = timed(translator, test_src, g)
            outputs[name] = out
            seconds[name] = min(seconds.get(name, float("inf")), took)
            print(f"round {round_ + 1} {name}: {took:.1f} s", file=sys.stderr)

    rows = []
    for name in runs:
        s = score(outputs[name], test_ref)
        used = sum(has_word(outputs[name][i], target) for i, target in instances)
        rows.append({"run": name, "bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2),
                     "term_use": round(100 * used / max(len(instances), 1), 2), "seconds": round(seconds[name], 2),
                     "time_ratio": round(seconds[name] / seconds["unconstrained"], 2)})
    identical = outputs["never-occurring glossary"] == outputs["unconstrained"]
    per_sentence = Counter(len(found) for found in chosen)
    facts = {"glossary_pairs_from_training": len(pairs), "glossary": "union" if args.union else "per sentence",
             "distinct_terms": len(union),
             "sentences": len(test_src), "sentences_with_terms": sum(1 for f in chosen if f),
             "terms_per_sentence": dict(sorted(per_sentence.items())), "term_instances": len(instances),
             "never_occurring_identical": identical, "beam": args.beam, "threads": torch.get_num_threads()}
    print(f"glossary: {len(pairs)} reliable pairs in training, {len(union)} distinct terms given "
          f"{facts['glossary']}; {facts['sentences_with_terms']} of "
          f"{len(test_src)} sentences with terms ({dict(sorted(per_sentence.items()))} terms per sentence), "
          f"{len(instances)} term instances; beam {args.beam}, {facts['threads']} threads")
    print("| run | BLEU | chrF | term use (%) | seconds | time vs unconstrained |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['run']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['term_use']:.1f} | {r['seconds']:.1f} | "
              f"{r['time_ratio']:.2f}x |")
    print(f"never-occurring glossary: outputs {'identical' if identical else 'DIFFERENT'} to the unconstrained ones")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, **facts}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
