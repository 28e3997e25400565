"""Translating documents: paragraphs against pre-split lines, and streaming a large file.

Paragraphs (issue 24): the Multi30k test sentences (``test_2016_flickr``, read from the gzip
files of ``--data``) are joined into paragraphs of 3-8 sentences (seeded), and translated

- as pre-split lines: one call of ``Translator.translate`` on all the sentences (what
  ``transformer evaluate`` and ``translate --segment lines`` do);
- as paragraphs, batched: ``translate_lines`` on all the paragraphs at once (what
  ``transformer translate`` does with a file of paragraphs, one a line);
- as paragraphs, one at a time: ``Translator.translate_text`` per paragraph (the Python API).

The paragraph output is cut back into sentences with its sentence alignment (the target span of
each source sentence) and scored with sacreBLEU against the references, beside the line-by-line
score (the target: within 0.5). Where the segmenter does not find a paragraph's sentences as they
were joined (a caption without final punctuation runs into the next), the alignment of source
spans to the joined sentences says which sentences a segment covers: its translation counts for
the first of them and the others get "" (a loss the score shows). Also reported: sentences in
and out, paragraphs whose sentences were all found, BLEU with whole paragraphs as segments for
both outputs, and throughput.

``--stream-lines N [N ...]``: writes an N-line file (the test sentences repeated) and times
``transformer translate RUN --input FILE --output FILE`` on it in a child process: wall time,
sentences/s and the child's peak RSS (``os.wait4``'s rusage). Equal peaks for different N show
that memory does not grow with the file.

    python benchmarks/documents.py                                     # runs/multi30k-de-en, all 1,000 sentences
    python benchmarks/documents.py --sentences 200 --stream-lines 2000 20000 --stream-args=--greedy
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transformer.corpus.files import read_lines
from transformer.decoding import DecodeConfig
from transformer.translate.document import translate_lines
from transformer.translate.evaluation import score
from transformer.translate.translator import load_translator

ROOT = Path(__file__).resolve().parents[1]


def paragraphs_of(sentences: list[str], seed: int, low: int, high: int) -> list[list[int]]:
    """Consecutive sentence indices, low-high sentences a paragraph (the last may be shorter)."""
    rng = random.Random(seed)
    groups, i = [], 0
    while i < len(sentences):
        n = rng.randint(low, high)
        groups.append(list(range(i, min(i + n, len(sentences)))))
        i += n
    return groups


def resplit(paragraph_sentences: list[str], result) -> tuple[list[str], bool]:
    """The translation of each joined sentence from a paragraph's alignment, and whether the
    segmenter found exactly the joined sentences."""
    starts, position = [], 0
    for s in paragraph_sentences:
        starts.append(position)
        position += len(s) + 1
    out = [""] * len(paragraph_sentences)
    for alignment in result.sentences:
        a, b = alignment.source
        first = max(i for i, start in enumerate(starts) if start <= a)
        piece = result.text[alignment.target[0]:alignment.target[1]]
        out[first] = (out[first] + " " + piece).strip()
    exact = [s.source for s in result.sentences] == [(st, st + len(s)) for st, s in zip(starts, paragraph_sentences)]
    return out, exact


def cpu_model() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def paragraphs_benchmark(args: argparse.Namespace) -> dict:
    data = Path(args.data)
    sources, _ = read_lines(data / f"{args.split}.{args.src}.gz")
    references, _ = read_lines(data / f"{args.split}.{args.tgt}.gz")
    sources = [s.strip() for s in sources][: args.sentences or None]
    references = [r.strip() for r in references][: len(sources)]
    groups = paragraphs_of(sources, args.seed, args.min, args.max)
    paragraphs = [" ".join(sources[i] for i in g) for g in groups]
    decoding = DecodeConfig(strategy="greedy") if args.greedy else DecodeConfig(strategy="beam", beam_size=4, alpha=0.6)
    translator = load_translator(args.run_dir, decoding=decoding)
    lang = translator.src_lang or args.src
    translator.translate(sources[:8])  # warm up (first-call costs out of the timings)

    t = time.perf_counter()
    by_line = translator.translate(sources)
    line_seconds = time.perf_counter() - t

    t = time.perf_counter()
    results = translate_lines(translator, paragraphs, lang=lang)
    batched_seconds = time.perf_counter() - t

    t = time.perf_counter()
    one_by_one = [translator.translate_text(p) for p in paragraphs] if not args.skip_one_by_one else None
    one_by_one_seconds = time.perf_counter() - t

    resplit_hyps, exact = [], 0
    for g, result in zip(groups, results):
        hyps, ok = resplit([sources[i] for i in g], result)
        resplit_hyps += hyps
        exact += ok
    line_score = score(by_line, references)
    resplit_score = score(resplit_hyps, references)
    paragraph_refs = [" ".join(references[i] for i in g) for g in groups]
    by_line_joined = [" ".join(by_line[i] for i in g) for g in groups]
    report = {
        "run_dir": str(args.run_dir), "split": args.split, "decoding": "greedy" if args.greedy else "beam 4",
        "sentences_in": len(sources), "paragraphs": len(paragraphs),
        "sentences_found": sum(len(r.sentences) for r in results),
        "sentences_out_nonempty": sum(1 for r in results for s in r.sentences if s.target[1] > s.target[0]),
        "paragraphs_split_exactly": exact,
        "bleu_by_line": round(line_score.bleu, 2), "bleu_resplit_paragraphs": round(resplit_score.bleu, 2),
        "bleu_difference": round(resplit_score.bleu - line_score.bleu, 2),
        "chrf_by_line": round(line_score.chrf, 2), "chrf_resplit_paragraphs": round(resplit_score.chrf, 2),
        "bleu_paragraph_segments_by_line": round(score(by_line_joined, paragraph_refs).bleu, 2),
        "bleu_paragraph_segments_paragraphs": round(score([r.text for r in results], paragraph_refs).bleu, 2),
        "sentences_per_s_by_line": round(len(sources) / line_seconds, 1),
        "sentences_per_s_paragraphs_batched": round(len(sources) / batched_seconds, 1),
        "seconds_by_line": round(line_seconds, 2), "seconds_paragraphs_batched": round(batched_seconds, 2),
        "bleu_signature": line_score.bleu_signature,
    }
    if one_by_one is not None:
        report["sentences_per_s_paragraphs_one_by_one"] = round(len(sources) / one_by_one_seconds, 1)
        report["one_by_one_equals_batched"] = one_by_one == [r.text for r in results]
    translator.close()
    return report


def stream_benchmark(args: argparse.Namespace, n_lines: int) -> dict:
    sources, _ = read_lines(Path(args.data) / f"{args.split}.{args.src}.gz")
    sources = [s.strip() for s in sources]
    with tempfile.TemporaryDirectory(prefix="stream-") as tmp:
        source, output = Path(tmp) / f"{n_lines}.{args.src}", Path(tmp) / f"{n_lines}.out"
        with open(source, "w", encoding="utf-8") as f:
            for i in range(n_lines):
                f.write(sources[i % len(sources)] + "\n")
        command = [sys.executable, "-m", "transformer.cli", "translate", str(args.run_dir), "--input", str(source),
                   "--output", str(output), "--no-progress", *args.stream_args]
        start = time.perf_counter()
        child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        err = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise SystemExit(f"translate failed ({child.returncode}):\n{err}")
        lines_out = output.read_bytes().count(b"\n")
    m = re.search(r"translated (\d+) lines \((\d+) sentences\) in ([\d.]+) s", err)
    sentences, translate_seconds = (int(m.group(2)), float(m.group(3))) if m else (n_lines, wall)
    return {"lines": n_lines, "lines_out": lines_out, "sentences": sentences, "wall_s": round(wall, 1),
            "translate_s": round(translate_seconds, 1), "sentences_per_s": round(sentences / translate_seconds, 1),
            "sentences_per_s_wall": round(sentences / wall, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            "args": " ".join(args.stream_args)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", default="runs/multi30k-de-en", help="trained run directory")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"),
                        help="directory of the Multi30k gzip files")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--src-lang", dest="src", default="de")
    parser.add_argument("--tgt-lang", dest="tgt", default="en")
    parser.add_argument("--sentences", type=int, default=0, help="use the first N test sentences (0: all)")
    parser.add_argument("--min", type=int, default=3, help="fewest sentences a paragraph (default: 3)")
    parser.add_argument("--max", type=int, default=8, help="most sentences a paragraph (default: 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--greedy", action="store_true", help="greedy search (default: beam 4, alpha 0.6)")
    parser.add_argument("--skip-one-by-one", action="store_true", help="skip translate_text per paragraph")
    parser.add_argument("--skip-paragraphs", action="store_true", help="only the streaming runs")
    parser.add_argument("--stream-lines", type=int, nargs="*", default=[], metavar="N",
                        help="time `transformer translate --input --output` on files of N lines")
    parser.add_argument("--stream-args", nargs="*", default=[], metavar="ARG",
                        help="options for those runs, e.g. --stream-args=--greedy")
    parser.add_argument("--json", metavar="FILE", help="also write the results here")
    args = parser.parse_args()
    results = {"machine": cpu_model(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    if not args.skip_paragraphs:
        results["paragraphs"] = paragraphs_benchmark(args)
        print(json.dumps(results["paragraphs"], indent=1), flush=True)
    results["stream"] = []
    for n in args.stream_lines:
        results["stream"].append(stream_benchmark(args, n))
        print(json.dumps(results["stream"][-1]), flush=True)
    print(f"machine: {results['machine']} ({results['cpus']} CPUs), {results['date']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
