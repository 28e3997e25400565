"""Fuzzy matches as glossary terms (``--tm-constraints``): BLEU of the sentences that have a fuzzy
match in the translation memory, translated by the model alone, by the model with the terms they
share with their best match where it is unsure of its own translation (as ``--tm-constraints``
does), by the model with the terms always (``--always``), and given the match's translation as
it is (what a CAT tool shows a translator to edit).

For a French -> English run (the Multi30k recipe of docs/quality.md), two memories:

* Tatoeba: its train split (``tatoeba/eng-fra.txt`` under ``--from``, split as ``transformer
  evaluate --corpus tatoeba`` splits it, seed 0: no French sentence in two splits) is the
  memory; its valid and test splits are translated (settings are chosen on valid; test is
  reported).
* Multi30k: its train pairs are the memory; its val and test_2016 are translated (the run's
  own domain: captions seldom repeat, so few sentences have a match).

Each memory is imported into a fresh SQLite file under ``--out``; a sentence counts when its best
match has a similarity from ``--threshold`` up and below 1 (an exact match is the memory's own
translation, with or without terms). The decoding is the run's (beam search). Printed per set:
sentences with a match, those translated with terms and terms per sentence, the share of terms
the translations hold, BLEU and chrF of each output, and the time to translate.

    python benchmarks/tm_constraints.py runs/fr-en --from ../shared/data --out /tmp/tm-constraints
    python benchmarks/tm_constraints.py runs/fr-en --from ../shared/data --out /tmp/tm-constraints --json tm.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import sacrebleu

from transformer.corpus.registry import corpus_pairs, tatoeba_splits
from transformer.memory import TranslationMemory
from transformer.translate.tm import DEFAULT_THRESHOLD, MemoryTranslator
from transformer.translate.tm_terms import UNSURE_LOG_PROB
from transformer.translate.translator import load_translator

# each output: whether the memory's terms are used, and under which mean log-probability per token
OUTPUTS = {"model": (False, UNSURE_LOG_PROB), "model + memory terms where unsure": (True, UNSURE_LOG_PROB),
           "model + memory terms always": (True, math.inf)}


def memory_of(path: Path, pairs: list[tuple[str, str]]) -> Path:
    """A fresh memory at ``path`` holding ``pairs`` (French -> English), accepted."""
    for stale in path.parent.glob(path.name + "*"):
        stale.unlink()
    with TranslationMemory(path) as memory:
        memory.import_pairs(pairs, "fr", "en", name=path.stem)
    return path


def measure(translator, memory_path: Path, pairs: list[tuple[str, str]], threshold: float) -> dict:
    """The three outputs' scores on the ``pairs`` whose best match is fuzzy (see the module doc)."""
    with TranslationMemory(memory_path) as memory:
        rows = []
        for source, reference in pairs:
            found = memory.search(source, "fr", "en", min_similarity=threshold, limit=1)
            if found and found[0].similarity < 1:
                rows.append((source, reference, found[0]))
    if not rows:
        return {"sentences": len(pairs), "matched": 0}
    sources, references = [r[0] for r in rows], [[r[1] for r in rows]]
    outputs, seconds, given = {}, {}, {}
    for name, (constraints, below) in OUTPUTS.items():
        with TranslationMemory(memory_path) as memory, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a term the search could not place is counted below
            translating = MemoryTranslator(translator, memory, "fr", "en", threshold=threshold,
                                           constraints=constraints, unsure_below=below)
            started = time.perf_counter()
            outputs[name] = [translating.detokenize(hyps[0]) if hyps else "" for hyps in translating.translate_n_best(sources)]
            seconds[name] = round(time.perf_counter() - started, 2)
            given[name] = [[term for term, _ in translating.terms.get(source, [])] for source in sources]
    outputs["the match's translation"] = [r[2].entry.target for r in rows]
    terms = given["model + memory terms where unsure"]
    held = sum(term.target in output for found, output in zip(terms, outputs["model + memory terms where unsure"])
               for term in found)
    count = sum(map(len, terms))
    return {
        "sentences": len(pairs), "matched": len(rows),
        "similarity_mean": round(sum(r[2].similarity for r in rows) / len(rows), 3),
        "with_terms": sum(1 for found in terms if found),
        "with_terms_always": sum(1 for found in given["model + memory terms always"] if found),
        "terms_per_sentence": round(count / max(sum(1 for found in terms if found), 1), 2),
        "terms_held": round(held / max(count, 1), 4),
        "bleu": {name: round(sacrebleu.corpus_bleu(out, references).score, 2) for name, out in outputs.items()},
        "chrf": {name: round(sacrebleu.corpus_chrf(out, references).score, 2) for name, out in outputs.items()},
        "translate_s": seconds,
        "examples": [{"source": s, "reference": ref, "match": m.entry.source, "match_translation": m.entry.target,
                      "terms": [[t.source, t.target] for t in found], "model": a, "with_terms": b}
                     for (s, ref, m), found, a, b in list(zip(rows, terms, outputs["model"],
                                                               outputs["model + memory terms where unsure"]))
                     if found][:5],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a French -> English run")
    parser.add_argument("--from", dest="data", required=True, metavar="DIR",
                        help="the directory holding tatoeba/eng-fra.txt and multi30k/")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the memories are written")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help=f"the lowest similarity of a match (default {DEFAULT_THRESHOLD})")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args()
    data, out = Path(args.data), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    translator = load_translator(args.run_dir)
    print(f"run {args.run_dir}: {translator.decoding.strategy} search, beam {translator.decoding.beam_size}", flush=True)

    tatoeba = tatoeba_splits(corpus_pairs("tatoeba", src="fr", tgt="en", split="all", directory=data / "tatoeba"), seed=0)
    multi30k = {split: corpus_pairs("multi30k", src="fr", tgt="en", split=split, directory=data / "multi30k")
                for split in ("train", "val", "test_2016_flickr")}
    sets = {}
    started = time.perf_counter()
    memory = memory_of(out / "tatoeba-train.tm", tatoeba["train"])
    print(f"memory: Tatoeba train, {len(tatoeba['train'])} pairs ({time.perf_counter() - started:.0f} s)", flush=True)
    for split in ("valid", "test"):
        sets[f"tatoeba {split}"] = measure(translator, memory, tatoeba[split], args.threshold)
        print(f"tatoeba {split}: {json.dumps({k: v for k, v in sets[f'tatoeba {split}'].items() if k != 'examples'})}", flush=True)
    memory = memory_of(out / "multi30k-train.tm", multi30k["train"])
    for split in ("val", "test_2016_flickr"):
        sets[f"multi30k {split}"] = measure(translator, memory, multi30k[split], args.threshold)
        print(f"multi30k {split}: {json.dumps({k: v for k, v in sets[f'multi30k {split}'].items() if k != 'examples'})}", flush=True)

    names = (*OUTPUTS, "the match's translation")
    print("\n| set | sentences with a fuzzy match | translated with terms, where unsure / always | terms held | "
          + " | ".join(f"BLEU {n}" for n in names) + " | seconds, model / where unsure |")
    print("|---|---|---|---|" + "---|" * len(names) + "---|")
    for name, found in sets.items():
        if not found["matched"]:
            print(f"| {name} | 0 of {found['sentences']} | | | " + " | " * len(names))
            continue
        print(f"| {name} | {found['matched']} of {found['sentences']} (mean similarity {found['similarity_mean']}) | "
              f"{found['with_terms']} / {found['with_terms_always']} ({found['terms_per_sentence']} terms) | "
              f"{found['terms_held']:.1%} | " + " | ".join(f"{found['bleu'][n]:.2f}" for n in names)
              + f" | {found['translate_s']['model']} / {found['translate_s']['model + memory terms where unsure']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(sets, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
