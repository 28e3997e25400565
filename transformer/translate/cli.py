"""``transformer translate``: the command-line face of ``Translator`` (``evaluate`` is in ``evaluate_cli.py``).

``translate`` translates real text: each input line is cut into sentences, each sentence is
translated, and the translations are put back in the line (``translate_lines``): N lines in,
N lines out, blank lines, indentation, the gaps between sentences and CRLF line ends kept.
``--segment lines`` translates each line whole (pre-segmented test sets; what ``evaluate`` does).

This module runs the command and formats each translated line (text, n-best, JSON); its parser,
with the decoding and glossary options that ``evaluate`` and ``calibrate`` take too, is in
``cli_args.py``. How the input is read (plain or gzip, UTF-8 defects fixed with a warning
naming the line) is ``inputs.py``; how lines stream through in chunks, with ``--output`` kept
whole-chunk and resumable (``--resume``) and the progress shown, is ``stream.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Iterable

from transformer.errors import UserError
from transformer.decoding import DecodeConfig
from transformer.run.layout import WEIGHTS_FILE
from transformer.run_files import write_atomic
from transformer.translate.cli_args import AUTO, DECODING_ARGUMENTS, DETECTION_CONFIDENCE
from transformer.translate.files_cli import file_kind, read_document, sample_text, translate_document_file
from transformer.translate.inputs import InputText, Line, Reporter, count_lines
from transformer.translate.stream import (
    PROGRESS_EVERY, Progress, encode_output, open_output, same_file, write_chunks,
)
from transformer.translate.translator import TranslationWarning, Translator, load_translator
from transformer.translate.warning import TermWarning, TruncationWarning


def decode_config(args: argparse.Namespace) -> DecodeConfig:
    if args.sample:
        strategy = "sample"
    elif args.greedy or args.beam == 1:
        strategy = "greedy"
    else:
        strategy = "beam"
    return DecodeConfig(
        strategy=strategy, beam_size=args.beam if args.beam != 1 else 4, n_best=args.n_best,
        length_penalty=args.length_penalty, alpha=args.alpha, max_len_b=args.max_len_b, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, stopping=args.stopping,
    )


def glossary_from_args(args: argparse.Namespace):  # -> Glossary | None
    """The --glossary file, read and checked (GlossaryError, a UserError, names the line)."""
    if not getattr(args, "glossary", None):
        return None
    from transformer.translate.glossary import Glossary

    return Glossary.load(args.glossary)


def _file_stamp(path: str | None) -> list | None:
    """What identifies a file's version for --resume: its resolved path, size and modification time."""
    if not path:
        return None
    stat = Path(path).stat()
    return [str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns]


def translator_from_args(args: argparse.Namespace) -> Translator:
    if args.batch_tokens is not None and args.batch_tokens < 1:
        raise UserError(f"--batch-tokens must be >= 1, got {args.batch_tokens}")
    return load_translator(args.run_dir, decoding=decode_config(args), max_tokens=args.batch_tokens,
                           precision=args.precision, device=args.device)


def _settings(args: argparse.Namespace) -> dict:
    """What the output depends on, besides the input: --resume refuses to mix two runs' outputs."""
    run = Path(args.run_dir).resolve()
    model = run / WEIGHTS_FILE
    stat = model.stat() if model.is_file() else None
    return {"run_dir": str(run), "model": [stat.st_size, stat.st_mtime_ns] if stat else None,
            "segment": args.segment, "format": args.format, "src_lang": args.src_lang, "json": args.json,
            "chunk_lines": args.chunk_lines, "max_line_chars": args.max_line_chars,
            "precision": args.precision,
            "glossary": _file_stamp(args.glossary), "scores": args.scores,
            "tm": str(Path(args.tm).resolve()) if args.tm else None, "tm_threshold": args.tm_threshold,
            "tm_constraints": args.tm_constraints,
            **{name: getattr(args, name) for name in DECODING_ARGUMENTS}}


# ------------------------------------------------------------------------------------------------ translate
def translate_command(args: argparse.Namespace) -> int:
    if args.sentences and args.input:
        raise UserError("give texts as arguments or --input FILE, not both")
    if args.resume and args.overwrite:
        raise UserError("give --resume or --overwrite, not both")
    if args.chunk_lines < 1 or args.max_line_chars < 1:
        raise UserError("--chunk-lines and --max-line-chars must be >= 1")
    if not (args.sentences or args.input) and sys.stdin.isatty():
        raise UserError("nothing to translate: give texts, --input FILE, or pipe text into standard input")
    kind = file_kind(args)
    if kind is not None:
        return _translate_file(args, kind)
    args.format = args.format or "text"
    if args.format == "html":
        return _translate_html(args)
    if args.scores and (args.json or args.n_best > 1):
        raise UserError("--scores is for plain output: --json already holds each sentence's confidence")
    open_sink, done, offset = open_output(args, _settings)  # refusals come before the model is loaded
    reporter = Reporter()
    source: InputText | None = None
    try:
        args.glossary_terms = glossary_from_args(args)
        translator = _with_memory(translator_from_args(args), args)
        args.language_detector = _language_detector(args)
        if args.scores and translator.calibration is None:
            raise UserError(f"--scores prints each line's confidence, and {args.run_dir} has no calibration: run "
                            f"`transformer calibrate {args.run_dir}` first")
        if args.sentences:
            lines: Iterable[Line] = [Line(i + 1, text, "\n") for i, text in enumerate(args.sentences)]
            total = len(args.sentences)
        else:
            source = InputText(args.input or "-", reporter)
            if done:
                source.skip(done, offset)
            lines = source
            total = count_lines(args.input) if args.input and args.input != "-" else None
        show = not args.no_progress and not args.sentences
        progress = Progress(total, done, enabled=show and (args.output is not None or not sys.stdout.isatty()
                                                           or not sys.stderr.isatty()),
                            every=PROGRESS_EVERY)  # this module's, read now: it can be changed here (tests)
        sink = open_sink()
        start = time.perf_counter()
        # _translate_chunk looked up at each chunk, so that it can be replaced here (tests do)
        write_chunks(lines, args.chunk_lines, lambda chunk: _translate_chunk(translator, chunk, args, reporter),
                     sink, progress)
    finally:
        if source is not None:
            source.close()
    reporter.summary()
    elapsed = time.perf_counter() - start
    what = "segments" if args.segment == "lines" else "sentences"
    print(f"translated {progress.lines} lines ({progress.sentences} {what}) in {elapsed:.2f} s "
          f"({progress.sentences / max(elapsed, 1e-9):.1f} {what}/s)", file=sys.stderr)
    _memory_summary(translator)
    return 0


def _with_memory(translator: Translator, args: argparse.Namespace):  # -> Translator | MemoryTranslator
    """--tm: the translator behind the translation memory (translate/tm.py), kept as
    ``args.memory`` for the JSON records; the translator itself without it."""
    args.memory = None
    if not args.tm:
        for given, option in ((args.tm_threshold is not None, "--tm-threshold"), (args.tm_constraints, "--tm-constraints")):
            if given:
                raise UserError(f"{option} is for --tm PATH, a translation memory")
        return translator
    from transformer.translate.tm import memory_translator

    source = args.src_lang if args.src_lang != AUTO else None
    args.memory = memory_translator(translator, args.tm, source_lang=source, threshold=args.tm_threshold,
                                    fuzzy=args.json, constraints=args.tm_constraints)
    return args.memory


def _memory_summary(translator) -> None:
    """--tm: how many sentences the memory translated, on standard error."""
    summary = getattr(translator, "summary", None)
    if summary is not None:
        print(summary(), file=sys.stderr)
        translator.close()


def _memory_notes(args: argparse.Namespace, text: str) -> dict:
    """--tm: the JSON fields of a sentence (or line) given to the translator as ``text``."""
    memory = getattr(args, "memory", None)
    return memory.notes(text) if memory is not None else {}


def _translate_chunk(translator: Translator, chunk: list[Line], args: argparse.Namespace,
                     reporter: Reporter) -> tuple[str, int]:
    """The output of a chunk of lines (what gets written), and its number of sentences (segments)."""
    out: list[str] = []
    glossary, confidence = getattr(args, "glossary_terms", None), args.json or args.scores
    detected = _detect_lines(translator, chunk, args, reporter)
    if args.segment == "lines":
        texts = [line.text for line in chunk]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TranslationWarning)
            n_best = translator.translate_n_best(texts, glossary=glossary, confidence=confidence)
        for w in caught:
            warning = w.message
            message = warning.describe(f"line {chunk[warning.sentence - 1].number}") \
                if isinstance(warning, TruncationWarning) else str(warning)
            reporter.warn("long-sentence", f"{_name(args)}: {message}")
        terms = translator.glossary_terms(texts, glossary) if glossary is not None else None
        for i, (line, hyps) in enumerate(zip(chunk, n_best)):
            alternatives = [(_one_line(translator.detokenize(h)), h.score) for h in hyps]
            missing = tuple(terms[i][c] for c in hyps[0].unmet) if hyps and terms else ()
            if missing:
                reporter.warn("term", f"{_name(args)}: {TermWarning(missing, f'line {line.number}')}", line.number)
            notes = {"confidence": hyps[0].confidence if hyps else None, "missing_terms": missing}
            out.append(_format(args, line, alternatives[0][0] if alternatives else "", alternatives, notes=notes,
                               detected=detected[i] if detected else None))
        return "".join(out), sum(1 for hyps in n_best if hyps)

    from transformer.translate.document import translate_lines

    fits = [len(line.text) <= args.max_line_chars for line in chunk]
    for line, ok in zip(chunk, fits):
        if not ok:
            reporter.warn("long-line", f"{_name(args)}: line {line.number}: {len(line.text):,} characters, over "
                          f"--max-line-chars {args.max_line_chars:,}: copied to the output untranslated "
                          "(raise --max-line-chars to translate it)", line.number)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TranslationWarning)
        translated = translate_lines(translator, [line.text if ok else "" for line, ok in zip(chunk, fits)],
                                     lang=None if detected else args.src_lang, first_line=chunk[0].number,
                                     glossary=glossary, confidence=confidence,
                                     line_langs=_splitting_languages(detected) if detected else None)
    for w in caught:
        kind = "term" if isinstance(w.message, TermWarning) else "long-sentence"
        reporter.warn(kind, f"{_name(args)}: {w.message}")
    sentences = 0
    for i, (line, ok, result) in enumerate(zip(chunk, fits, translated)):
        found = detected[i] if detected else None
        if not ok:
            out.append(_format(args, line, line.text, [], untranslated=True, detected=found))
            continue
        sentences += len(result.sentences)
        out.append(_format(args, line, result.text, result.n_best, result, detected=found))
    return "".join(out), sentences


def _language_detector(args: argparse.Namespace):  # -> LanguageDetector | None
    """--src-lang auto: a detector over every language py3langid knows (a line in a language the
    run does not translate is what the warning is for; restricted to the run's two languages, it
    would be called one of them)."""
    if args.src_lang != AUTO:
        return None
    from transformer.translate.detect import LanguageDetector

    return LanguageDetector()


def _detect_lines(translator: Translator, chunk: list[Line], args: argparse.Namespace,
                  reporter: Reporter) -> list | None:
    """--src-lang auto: each line's ``Detection``, and a warning for each line detected with
    confidence >= DETECTION_CONFIDENCE as another language than the run's source; None otherwise."""
    detector = getattr(args, "language_detector", None)
    if detector is None:
        return None
    detected = [detector.best(line.text) for line in chunk]
    for line, found in zip(chunk, detected):
        if message := _language_warning(translator, found):
            reporter.warn("language", f"{_name(args)}: line {line.number}: {message}", line.number)
    return detected


def _language_warning(translator: Translator, found) -> str | None:
    """What to say about a text detected as ``found`` (a ``Detection``), None when nothing: it is
    the run's source language, the detection is unsure, or the run does not name its source."""
    source = _base_language(translator.src_lang)
    if source is None or found.confidence < DETECTION_CONFIDENCE or found.language == source:
        return None
    return (f"detected as {found.language} (confidence {found.confidence:.2f}), not {source} (the run's source "
            f"language); translated as {source} all the same: the run's model translates from {source} only")


def _splitting_languages(detected: list) -> list[str | None]:
    """The language whose sentence-splitting rules each line gets: its detected one where the
    detection is sure enough, else None (the run's source language)."""
    return [d.language if d.confidence >= DETECTION_CONFIDENCE else None for d in detected]


def _base_language(code: str | None) -> str | None:
    """'fr-FR', 'FR', 'fr_CA' -> 'fr' (how detections name languages); None stays None."""
    return re.split(r"[-_]", code.strip().lower())[0] if code and code.strip() else None


def _name(args: argparse.Namespace) -> str:
    if args.sentences:
        return "text"
    return "standard input" if not args.input or args.input == "-" else args.input


def _one_line(text: str) -> str:
    """A translation never adds a line to the output."""
    return re.sub(r"\s*[\r\n]+\s*", " ", text)


def _format(args: argparse.Namespace, line: Line, text: str, alternatives: list[tuple[str, float]],
            result=None, *, untranslated: bool = False, notes: dict | None = None, detected=None) -> str:
    """One input line's output: its translation, its n-best lines, or its JSON record
    (``result``: the line's ``TranslatedLine`` with --segment sentences; ``notes``: with
    --segment lines, the line's confidence and missing glossary terms; ``detected``: its
    ``Detection`` with --src-lang auto)."""
    newline = line.newline
    if args.json:
        record = {"index": line.number - 1, "source": line.text,
                  "translations": [{"text": t, "score": round(s, 4)} for t, s in alternatives]}
        if detected is not None:
            record["detected_language"] = {"language": detected.language, "confidence": round(detected.confidence, 4)}
        if args.segment == "sentences":
            record["translation"] = text
            record["sentences"] = [] if result is None else [
                {"source": list(a.source), "target": list(a.target), "score": round(s, 4), **_sentence_notes(
                    a.confidence, a.missing_terms), **_memory_notes(args, line.text[a.source[0]:a.source[1]])}
                for a, s in zip(result.sentences, result.scores)]
            if untranslated:
                record["untranslated"] = True
        elif notes is not None:
            record.update(_sentence_notes(notes["confidence"], notes["missing_terms"]))
            record.update(_memory_notes(args, line.text))
        return json.dumps(record, ensure_ascii=False) + newline
    if args.n_best > 1:
        return "".join(f"{line.number - 1} ||| {t} ||| {s:.4f}{newline}" for t, s in alternatives)
    if args.scores:
        found = [a.confidence for a in result.sentences if a.confidence is not None] if result is not None else \
            [notes["confidence"]] if notes is not None and notes["confidence"] is not None else []
        return f"{text}\t{min(found):.3f}{newline}" if found else f"{text}\t-{newline}"
    return text + newline


def _sentence_notes(confidence: float | None, missing_terms) -> dict:
    """A sentence's confidence (where the run is calibrated) and the glossary terms it lacks, for JSON."""
    notes = {} if confidence is None else {"confidence": round(confidence, 4)}
    if missing_terms:
        notes["missing_terms"] = [{"source": t.source, "target": t.target} for t in missing_terms]
    return notes


def _translate_file(args: argparse.Namespace, kind: str) -> int:
    """A file format (``files_cli.py``): the input read whole (refusals before the model loads),
    translated through the registry of ``translate/files``, written whole."""
    reporter = Reporter()
    document, name = read_document(args, kind, reporter)
    glossary = glossary_from_args(args)
    translator = _with_memory(translator_from_args(args), args)
    lang = args.src_lang or translator.src_lang
    detector = _language_detector(args)
    if detector is not None:
        found = detector.best(sample_text(document))
        if message := _language_warning(translator, found):
            reporter.warn("language", f"{name}: {message}")
        lang = found.language if found.confidence >= DETECTION_CONFIDENCE else translator.src_lang
    status = translate_document_file(args, document, name, translator, glossary=glossary, lang=lang, reporter=reporter)
    _memory_summary(translator)
    return status


def _translate_html(args: argparse.Namespace) -> int:
    """--format html: the whole input is one document (each argument one, when given as arguments)."""
    if args.resume:
        raise UserError("--resume is for --format text (an HTML document is translated whole)")
    if args.n_best > 1 or args.json or args.scores or args.segment == "lines":
        raise UserError("--n-best, --json, --scores and --segment lines are for --format text")
    try:
        from transformer.translate.html import translate_html
    except ImportError as err:
        raise UserError(f"--format html needs transformer.translate.html, which this installation lacks ({err})") \
            from None
    if args.output:
        if args.input and args.input != "-" and same_file(args.input, args.output):
            raise UserError(f"--output {args.output} is the --input file: write the translation to another file")
        if Path(args.output).exists() and not args.overwrite:
            raise UserError(f"{args.output} exists: give --overwrite to replace it")
    reporter = Reporter()
    if args.sentences:
        documents = list(args.sentences)
    else:
        source = InputText(args.input or "-", reporter)
        try:
            documents = ["".join(line.text + line.ending for line in source)]
        finally:
            source.close()
    from transformer.translate.document import translate_sentences

    glossary = glossary_from_args(args)
    translator = _with_memory(translator_from_args(args), args)
    detector = _language_detector(args)
    langs = [args.src_lang or translator.src_lang] * len(documents) if detector is None else \
        _detect_documents(translator, documents, detector, args, reporter)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TranslationWarning)
        texts = [translate_html(document, lambda sentences: translate_sentences(translator, sentences,
                                                                                 glossary=glossary), lang=lang)
                 for document, lang in zip(documents, langs)]
    for w in caught:
        reporter.warn("long-sentence", f"{_name(args)}: {w.message}")
    output = "".join(t + ("\n" if args.sentences else "") for t in texts)
    if args.output:
        write_atomic(args.output, encode_output(output))
    else:
        sys.stdout.write(output)
    reporter.summary()
    print(f"translated {len(documents)} HTML document{'s' if len(documents) != 1 else ''} in "
          f"{time.perf_counter() - start:.2f} s", file=sys.stderr)
    _memory_summary(translator)
    return 0


def _detect_documents(translator: Translator, documents: list[str], detector, args: argparse.Namespace,
                      reporter: Reporter) -> list[str | None]:
    """--format html --src-lang auto: each page's language, detected on the text it gives to
    translate (the markup left out), for its sentence splitting; a warning as for text lines."""
    from transformer.translate.html import html_sentences

    langs = []
    for i, document in enumerate(documents):
        found = detector.best(" ".join(html_sentences(document, lang=translator.src_lang)))
        where = f"document {i + 1}" if args.sentences else "the document"
        if message := _language_warning(translator, found):
            reporter.warn("language", f"{_name(args)}: {where}: {message}")
        langs.append(found.language if found.confidence >= DETECTION_CONFIDENCE else translator.src_lang)
    return langs
