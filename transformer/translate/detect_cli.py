"""``transformer detect``: the language of each line of a text, with ``LanguageDetector``.

One output line per input line: its language and the probability of it, tab-separated
(``de<TAB>0.9991``), or with ``--json`` one JSON object per line. A line without a letter (blank,
digits, punctuation) is ``und`` with confidence 0. The command's parser is in ``cli_args.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Iterable

from transformer.errors import UserError
from transformer.translate.inputs import InputText, Line, Reporter


def detect_command(args: argparse.Namespace) -> int:
    from transformer.translate.detect import LanguageDetector

    if args.sentences and args.input:
        raise UserError("give texts as arguments or --input FILE, not both")
    if not (args.sentences or args.input) and sys.stdin.isatty():
        raise UserError("nothing to detect: give texts, --input FILE, or pipe text into standard input")
    languages = None
    if args.languages is not None:
        languages = [code for code in args.languages.split(",") if code.strip()]
        if not languages:
            raise UserError(f"--languages {args.languages!r} names no language: give codes such as en,de,fr")
    detector = LanguageDetector(languages)
    reporter = Reporter()
    source: InputText | None = None
    try:
        if args.sentences:
            lines: Iterable[Line] = [Line(i + 1, text, "\n") for i, text in enumerate(args.sentences)]
        else:
            lines = source = InputText(args.input or "-", reporter)
        for line in lines:
            if args.json:
                ranked = detector.detect(line.text)
                record = {"index": line.number - 1, "source": line.text, "language": ranked[0].language,
                          "confidence": round(ranked[0].confidence, 4),
                          "alternatives": [{"language": d.language, "confidence": round(d.confidence, 4)}
                                           for d in ranked[1:3]]}
                sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
            else:
                found = detector.best(line.text)
                sys.stdout.write(f"{found.language}\t{found.confidence:.4f}\n")
    except BrokenPipeError:  # `transformer detect ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141
    finally:
        if source is not None:
            source.close()
    reporter.summary()
    return 0
