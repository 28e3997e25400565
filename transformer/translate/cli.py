"""``transformer translate``: the command-line face of ``Translator`` (``evaluate`` is in ``evaluate_cli.py``).

``translate`` translates real text: each input line is cut into sentences, each sentence is
translated, and the translations are put back in the line (``translate_lines``): N lines in,
N lines out, blank lines, indentation, the gaps between sentences and CRLF line ends kept.
``--segment lines`` translates each line whole (pre-segmented test sets; what ``evaluate`` does).

This module holds the decoding and glossary options (``evaluate`` and ``calibrate`` take them
too), the command and the formatting of each translated line
(text, n-best, JSON). How the input is read (plain or gzip, UTF-8 defects fixed with a warning
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

from transformer.decoding import DecodeConfig
from transformer.run.layout import WEIGHTS_FILE
from transformer.run_files import write_atomic
from transformer.translate.files_cli import FILE_FORMATS, file_kind, read_document, sample_text, translate_document_file
from transformer.translate.inputs import InputText, Line, Reporter, count_lines
from transformer.translate.stream import (
    CHUNK_CHARS, PROGRESS_EVERY, Progress, encode_output, open_output, same_file, write_chunks,
)
from transformer.precision import DEVICES, add_precision_option, precision_option
from transformer.translate.translator import TranslationWarning, Translator, load_translator
from transformer.translate.warning import TermWarning, TruncationWarning


DEVICE_HELP = ("where to decode: auto (default) is the GPU where PyTorch sees one (the CPU with --precision int8, "
               "a CPU format), else the CPU")
DEFAULT_CHUNK_LINES = 2000
DEFAULT_MAX_LINE_CHARS = 1_000_000
AUTO = "auto"  # --src-lang auto: each line's language detected
# A detection at least this sure picks its line's sentence-splitting rules, and is worth a warning
# when it is not the run's source language; on the Multi30k and Tatoeba test sentences no wrong
# detection among all languages reached 0.51 (docs/translate.md#detecting-the-source-language).
DETECTION_CONFIDENCE = 0.8


def add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding (defaults: the paper's beam 4, length penalty 0.6, max length source + 50)")
    g.add_argument("--beam", type=int, default=4, help="beam size (default: 4; 1 = greedy)")
    g.add_argument("--greedy", action="store_true", help="greedy search")
    g.add_argument("--n-best", type=int, default=1, help="hypotheses per sentence (default: 1)")
    g.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent (default: 0.6)")
    g.add_argument("--length-penalty", choices=("gnmt", "exponent", "none"), default="gnmt",
                   help="gnmt: ((5+|Y|)/6)^alpha (default); exponent: |Y|^alpha; none")
    g.add_argument("--max-len-b", type=int, default=50, help="output limit = source length + this (default: 50)")
    g.add_argument("--stopping", default="exact", choices=["exact", "k_finished"],
                   help="beam search: stop a sentence when no open beam can win (exact, default) or once "
                   "beam-size hypotheses have finished (k_finished: faster, as fairseq and CTranslate2 do)")
    g.add_argument("--sample", action="store_true", help="sample instead of searching")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: 1.0)")
    g.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0 = all)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (default: 1.0 = off)")
    g.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same samples)")
    add_precision_option(g, what="decode")
    g.add_argument("--batch-tokens", type=int, default=None,
                   help="padded source tokens x beams per batch (default: 12000 on a CPU, 160000 on a GPU)")
    g.add_argument("--device", choices=DEVICES, default="auto", help=DEVICE_HELP)


DECODING_ARGUMENTS = ("beam", "greedy", "n_best", "alpha", "length_penalty", "max_len_b", "stopping", "sample",
                      "temperature", "top_k", "top_p", "seed", "batch_tokens", "device")


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


GLOSSARY_HELP = ("terminology: a UTF-8 TSV file of 'source<TAB>target' lines; every source term found in a sentence "
                 "(whole words, case-insensitive) is translated as its target, exactly as written (constrained beam "
                 "search; greedy search and sampling refuse it). A term that cannot be placed within the sentence's "
                 "length limit is named in a warning (docs/translate.md#glossaries-terminology)")


def add_glossary_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--glossary", metavar="FILE", help=GLOSSARY_HELP)


def glossary_from_args(args: argparse.Namespace):  # -> Glossary | None
    """The --glossary file, read and checked (GlossaryError, a ValueError, names the line)."""
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
        raise ValueError(f"--batch-tokens must be >= 1, got {args.batch_tokens}")
    return load_translator(args.run_dir, decoding=decode_config(args), max_tokens=args.batch_tokens,
                           precision=precision_option(args), device=args.device)


def _settings(args: argparse.Namespace) -> dict:
    """What the output depends on, besides the input: --resume refuses to mix two runs' outputs."""
    run = Path(args.run_dir).resolve()
    model = run / WEIGHTS_FILE
    stat = model.stat() if model.is_file() else None
    return {"run_dir": str(run), "model": [stat.st_size, stat.st_mtime_ns] if stat else None,
            "segment": args.segment, "format": args.format, "src_lang": args.src_lang, "json": args.json,
            "chunk_lines": args.chunk_lines, "max_line_chars": args.max_line_chars,
            "precision": precision_option(args),  # one value, however it was spelled (--int8, --precision int8)
            "glossary": _file_stamp(args.glossary), "scores": args.scores,
            **{name: getattr(args, name) for name in DECODING_ARGUMENTS}}


# ------------------------------------------------------------------------------------------------ translate
SEGMENT_HELP = (
    "sentences (default): cut each line into sentences, translate each, put the translations back in the "
    "line (N lines in, N lines out; blank lines, indentation and the spaces between sentences kept; a "
    "sentence longer than the model's input limit is translated in pieces, with a warning naming the line). "
    "lines: translate each line whole, as one segment, as it is: for test sets that are already one sentence a "
    "line (what `transformer evaluate` does); a line over the input limit is cut, with a warning")


def register_translate_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "translate",
        help="translate text (sentences, paragraphs, files, HTML) with a trained run directory",
        description="Translate text given as arguments, from --input FILE (plain or gzip), or from standard input. "
        "Each line is cut into sentences, each sentence translated, and the translations put back where the "
        "sentences were: one output line per input line, in order; blank lines, indentation, the spaces between "
        "sentences and CRLF line ends are kept (--segment lines translates each line whole instead). Files of "
        "any length stream: lines are translated in chunks (--chunk-lines) and written as each chunk is done, "
        "with a progress bar on a terminal. With --output, an interrupted run leaves only complete lines and "
        "--resume continues it. Input is UTF-8: invalid bytes are replaced and NUL bytes removed, with a warning "
        "naming the line. With --n-best N, lines 'INDEX ||| TRANSLATION ||| SCORE'. --json prints one JSON "
        "object per input line.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("sentences", nargs="*", metavar="TEXT", help="texts to translate (each may hold several sentences)")
    p.add_argument("--input", "-i", help="file to translate, plain or gzip ('-' = standard input); a Markdown, "
                   "subtitle, gettext, HTML, Word, PowerPoint, OpenDocument or EPUB file by its extension (--format)")
    p.add_argument("--output", "-o", help="write the translation here instead of standard output (whole chunks, "
                   "synced to disk, with the progress in OUTPUT.resume until the run completes; a file format is "
                   "written whole, '-' = standard output)")
    p.add_argument("--segment", choices=("sentences", "lines"), default="sentences", help=SEGMENT_HELP)
    p.add_argument("--format", choices=("text", "html", *FILE_FORMATS), default=None,
                   help="text (the default, streamed line by line), or html: translate the text of an HTML page "
                   "or fragment and keep its markup (the whole input is one document), or a file format, read "
                   f"whole and written whole ({', '.join(FILE_FORMATS)}). Without it, an --input file ending in "
                   ".md, .markdown, .srt, .po, .pot, .html, .htm, .docx, .pptx, .odt or .epub is translated as that "
                   "format (the output the same format: a binary one needs --output), any other as text "
                   "(docs/translate.md#translating-files)")
    p.add_argument("--src-lang", default=None, metavar="CODE",
                   help="the source language, for sentence splitting (default: the run's data.src_lang; "
                   "English rules when it does not say). auto: detect each line's language (each document's with "
                   f"--format html) among all that py3langid knows; a detection with confidence >= "
                   f"{DETECTION_CONFIDENCE} picks the line's splitting rules, and warns when it is not the run's "
                   "source language (the line is translated all the same); --json gives each line's "
                   "detected_language")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted --input FILE --output FILE run where it stopped (refused when "
                   "the input or the settings changed); starts afresh when OUTPUT does not exist yet")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument("--chunk-lines", type=int, default=DEFAULT_CHUNK_LINES, metavar="N",
                   help=f"lines read, translated together and written at a time (default: {DEFAULT_CHUNK_LINES}; a "
                   f"chunk also ends at {CHUNK_CHARS:,} characters): memory stays bounded whatever the file's length")
    p.add_argument("--max-line-chars", type=int, default=DEFAULT_MAX_LINE_CHARS, metavar="N",
                   help=f"a line longer than this (default: {DEFAULT_MAX_LINE_CHARS:,} characters) is copied to the "
                   "output untranslated, with a warning naming it (--segment sentences)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--json", action="store_true", help="JSON lines, one per input line: index, source, translations "
                   "with scores; with --segment sentences also the translated line and each sentence's source and "
                   "target spans and score; its confidence where the run is calibrated (`transformer calibrate`), and "
                   "the glossary terms it could not place")
    p.add_argument("--scores", action="store_true", help="after each translated line a tab and its confidence: the "
                   "probability that it is adequate, the lowest of its sentences' (needs a calibrated run: "
                   "`transformer calibrate RUN_DIR`)")
    add_glossary_argument(p)
    add_decoding_arguments(p)
    p.set_defaults(handler=translate_command)


def translate_command(args: argparse.Namespace) -> int:
    if args.sentences and args.input:
        raise ValueError("give texts as arguments or --input FILE, not both")
    if args.resume and args.overwrite:
        raise ValueError("give --resume or --overwrite, not both")
    if args.chunk_lines < 1 or args.max_line_chars < 1:
        raise ValueError("--chunk-lines and --max-line-chars must be >= 1")
    if not (args.sentences or args.input) and sys.stdin.isatty():
        raise ValueError("nothing to translate: give texts, --input FILE, or pipe text into standard input")
    kind = file_kind(args)
    if kind is not None:
        return _translate_file(args, kind)
    args.format = args.format or "text"
    if args.format == "html":
        return _translate_html(args)
    if args.scores and (args.json or args.n_best > 1):
        raise ValueError("--scores is for plain output: --json already holds each sentence's confidence")
    open_sink, done, offset = open_output(args, _settings)  # refusals come before the model is loaded
    reporter = Reporter()
    source: InputText | None = None
    try:
        args.glossary_terms = glossary_from_args(args)
        translator = translator_from_args(args)
        args.language_detector = _language_detector(args)
        if args.scores and translator.calibration is None:
            raise ValueError(f"--scores prints each line's confidence, and {args.run_dir} has no calibration: run "
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
    return 0


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
                    a.confidence, a.missing_terms)} for a, s in zip(result.sentences, result.scores)]
            if untranslated:
                record["untranslated"] = True
        elif notes is not None:
            record.update(_sentence_notes(notes["confidence"], notes["missing_terms"]))
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
    translator = translator_from_args(args)
    lang = args.src_lang or translator.src_lang
    detector = _language_detector(args)
    if detector is not None:
        found = detector.best(sample_text(document))
        if message := _language_warning(translator, found):
            reporter.warn("language", f"{name}: {message}")
        lang = found.language if found.confidence >= DETECTION_CONFIDENCE else translator.src_lang
    return translate_document_file(args, document, name, translator, glossary=glossary, lang=lang, reporter=reporter)


def _translate_html(args: argparse.Namespace) -> int:
    """--format html: the whole input is one document (each argument one, when given as arguments)."""
    if args.resume:
        raise ValueError("--resume is for --format text (an HTML document is translated whole)")
    if args.n_best > 1 or args.json or args.scores or args.segment == "lines":
        raise ValueError("--n-best, --json, --scores and --segment lines are for --format text")
    try:
        from transformer.translate.html import translate_html
    except ImportError as err:
        raise ValueError(f"--format html needs transformer.translate.html, which this installation lacks ({err})") \
            from None
    if args.output:
        if args.input and args.input != "-" and same_file(args.input, args.output):
            raise ValueError(f"--output {args.output} is the --input file: write the translation to another file")
        if Path(args.output).exists() and not args.overwrite:
            raise ValueError(f"{args.output} exists: give --overwrite to replace it")
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
    translator = translator_from_args(args)
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
