"""The parsers of ``translate``, ``evaluate``, ``detect`` and ``calibrate``, and the decoding and
glossary options they share.

Building them imports nothing heavy (no torch, no numpy): ``transformer --help`` and every
command's ``--help`` stay fast, and each handler is a ``"module:function"`` reference that the
command line imports when the command runs (``translate/cli.py``, ``evaluate_cli.py``,
``detect_cli.py``, ``calibrate.py``). ``calibrate``'s description says chrF 50:
``transformer.translate.calibration.ADEQUATE_CHRF`` (a module with torch in it), which a test
holds it to.
"""

from __future__ import annotations

import argparse

from transformer.inference_precision import DEVICES, add_precision_option
from transformer.translate.files_cli import FILE_FORMATS
from transformer.translate.stream import CHUNK_CHARS

DEVICE_HELP = ("where to decode: auto (default) is the GPU where PyTorch sees one (the CPU with --precision int8, "
               "a CPU format), else the CPU")
DEFAULT_CHUNK_LINES = 2000
DEFAULT_MAX_LINE_CHARS = 1_000_000
AUTO = "auto"  # --src-lang auto: each line's language detected
# A detection at least this sure picks its line's sentence-splitting rules, and is worth a warning
# when it is not the run's source language; on the Multi30k and Tatoeba test sentences no wrong
# detection among all languages reached 0.51 (docs/translate.md#detecting-the-source-language).
DETECTION_CONFIDENCE = 0.8
MIN_CALIBRATION_SENTENCES = 50  # fewer translations say little about a calibration (calibrate)


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
                   "--beam hypotheses have finished (k_finished: faster, as fairseq and CTranslate2 do)")
    g.add_argument("--sample", action="store_true", help="sample instead of searching")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: 1.0)")
    g.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0 = all)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (default: 1.0 = off)")
    g.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same samples)")
    add_precision_option(g, what="decode")
    g.add_argument("--batch-tokens", type=int, default=None,
                   help="decoder rows (sentences x beams) x output positions (source length + 50) per batch, "
                   "at most 4096 rows (default: 50000 on a CPU, 160000 on a GPU)")
    g.add_argument("--device", choices=DEVICES, default="auto", help=DEVICE_HELP)


DECODING_ARGUMENTS = ("beam", "greedy", "n_best", "alpha", "length_penalty", "max_len_b", "stopping", "sample",
                      "temperature", "top_k", "top_p", "seed", "batch_tokens", "device")


GLOSSARY_HELP = ("terminology: a UTF-8 TSV file of 'source<TAB>target' lines; every source term found in a sentence "
                 "(whole words, case-insensitive) is translated as its target, exactly as written (constrained beam "
                 "search; greedy search and sampling refuse it). A term that cannot be placed within the sentence's "
                 "length limit is named in a warning (docs/translate.md#glossaries-terminology)")


def add_glossary_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--glossary", metavar="FILE", help=GLOSSARY_HELP)


# ---------------------------------------------------------------------------------------------- translate
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
    p.add_argument("--tm", metavar="PATH",
                   help="a translation memory (docs/memory.md; `transformer tm` fills it): a sentence (a line with "
                   "--segment lines) that has an accepted entry of the run's language pair, the same source once "
                   "whitespace is normalised, is translated as that entry, and the model runs only for the others. "
                   "--json marks it (memory: the entry's id and similarity 1.0) and gives the other sentences' fuzzy "
                   "matches as memory_alternatives; standard error says how many sentences came from the memory")
    p.add_argument("--tm-threshold", type=float, default=None, metavar="SIMILARITY",
                   help="the lowest similarity of a fuzzy match that --json shows (and --tm-constraints uses), above "
                   "0 and at most 1 (default: 0.75; 1: none)")
    p.add_argument("--tm-constraints", action="store_true",
                   help="with --tm: a sentence the model is unsure of (mean log-probability per token below -0.8) "
                   "is translated again, the words it shares with its best fuzzy match as that entry's translation "
                   "has them (aligned by the model's attention; glossary terms of beam search, after --glossary's); "
                   "--json lists them as memory_terms")
    add_glossary_argument(p)
    add_decoding_arguments(p)
    p.set_defaults(handler="transformer.translate.cli:translate_command")


def register_evaluate_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="translate a test set and print sacreBLEU and chrF with their signatures",
        description="Translate a test set and score it with sacreBLEU and chrF on detokenized, cased text (the "
        "way papers report it). Test set: --src FILE --ref FILE (plain or gzip), --corpus multi30k|tatoeba with "
        "--split, or --test-set NAME, a sacreBLEU test set such as wmt14/full (newstest2014) from sacreBLEU's cache "
        "($SACREBLEU, default ~/.sacrebleu; downloaded there when missing); without any, the run's data.test_set "
        "(languages default to the run's). Scoring is line by line: each source line is translated whole, "
        "as one segment, and scored against the same line of the references (as `translate --segment lines`).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--src", help="source sentences, one per line (plain or gzip)")
    p.add_argument("--ref", help="reference translations, one per line (plain or gzip)")
    p.add_argument("--corpus", choices=("multi30k", "tatoeba"), help="a registry corpus instead of files")
    p.add_argument("--split", default=None, help="corpus split (multi30k default: test_2016_flickr; tatoeba: test)")
    p.add_argument("--test-set", metavar="NAME", help="a sacreBLEU test set, e.g. wmt14/full (newstest2014 as the "
                   "paper scored it) or wmt13 (default: the run's data.test_set when no other test set is given)")
    p.add_argument("--src-lang", help="source language (default: the run's data.src_lang)")
    p.add_argument("--tgt-lang", help="target language (default: the run's data.tgt_lang)")
    p.add_argument("--from", dest="data_dir", metavar="DIR", help="local copy of registry corpora (e.g. ../shared/data)")
    p.add_argument("--output", "-o", help="also write the translations to this file (never over the test set)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument("--json", action="store_true", help="print the scores as one JSON object on the last line")
    add_glossary_argument(p)
    add_decoding_arguments(p)
    p.set_defaults(handler="transformer.translate.evaluate_cli:evaluate_command")


def register_detect_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "detect",
        help="detect the language of each line of a text (offline, py3langid)",
        description="Detect the language of each text given as an argument, or of each line of --input FILE (plain "
        "or gzip) or of standard input, among all the languages py3langid knows (--languages restricts them: "
        "fewer candidates, fewer mistakes on short lines). Prints one line per input line: the language's code "
        "and its probability, tab-separated; 'und' with probability 0 for a line without a letter. --json "
        "prints one JSON object per line instead.",
    )
    p.add_argument("sentences", nargs="*", metavar="TEXT", help="texts whose language to detect")
    p.add_argument("--input", "-i", help="file whose lines to detect, plain or gzip ('-' = standard input)")
    p.add_argument("--languages", metavar="CODES", default=None,
                   help="the candidate languages, comma-separated ISO 639-1 codes (such as en,de,fr; default: "
                   "every language py3langid knows)")
    p.add_argument("--json", action="store_true",
                   help="JSON lines: index, source, language, confidence, and the next two candidates as alternatives")
    p.set_defaults(handler="transformer.translate.detect_cli:detect_command")


def register_calibrate_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``calibrate`` without its handler: the command line gives it one that hands in how a run's
    validation pairs are read (training's code, which this layer does not import)."""
    p = sub.add_parser(
        "calibrate",
        help="fit the confidence of a run's translations on its validation data (writes RUN_DIR/confidence.json)",
        description="Translate held-out sentences with the run's model, score each translation with sentence-level "
        "chrF against its reference, and fit the probability that a translation reaches chrF 50 "
        "from what the model knows about it (its length-normalised log-probability, and how its attention covers "
        "the source): a logistic regression, written to RUN_DIR/confidence.json. The sentences: the run's "
        "validation set (read as training read it, from the run's data settings; --from DIR for a local copy of a registry corpus), or --src FILE --ref FILE. Prints "
        "what it fitted and how well it does on those sentences: the expected calibration error and the Spearman "
        "correlation of the confidence with chrF (and of the raw mean log-probability, for comparison). Decode "
        "with the settings you will translate with: a calibration holds for them.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--src", help="source sentences, one per line (plain or gzip), instead of the validation set")
    p.add_argument("--ref", help="their reference translations, one per line (plain or gzip)")
    p.add_argument("--from", dest="data_dir", metavar="DIR",
                   help="local copy of registry corpora (e.g. ../shared/data) for the run's validation set, in place "
                   "of the run's data.data_dir")
    p.add_argument("--sentences", type=int, metavar="N", help="use the first N sentences only (default: all; at "
                   f"least {MIN_CALIBRATION_SENTENCES})")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (shown only on a terminal)")
    p.add_argument("--json", action="store_true", help="print the fitted calibration as one JSON object on the last "
                   "line")
    add_decoding_arguments(p)
    return p
