"""``transformer translate`` and ``transformer evaluate``: the command-line face of ``Translator``."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import TextIO

from transformer.decoding import DecodeConfig
from transformer.translate.evaluation import score
from transformer.translate.translator import TranslationWarning, Translator, load_translator


INT8_HELP = ("decode with int8 copies of the linear layers' weights (one scale per output feature) in the "
             "CPU engine's kernels, activations and sums in float32: a quarter of the weights' memory traffic "
             "(Transformer models on CPU)")

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
    g.add_argument("--bf16", action="store_true", help="decode with a bfloat16 copy of the weights (fast on CPUs with AVX-512 bf16 or AMX)")
    g.add_argument("--int8", action="store_true", help=INT8_HELP)
    g.add_argument("--batch-tokens", type=int, default=12000, help="source tokens x beams per batch (default: 12000)")


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


def translator_from_args(args: argparse.Namespace) -> Translator:
    if args.batch_tokens < 1:
        raise ValueError(f"--batch-tokens must be >= 1, got {args.batch_tokens}")
    return load_translator(args.run_dir, decoding=decode_config(args), max_tokens=args.batch_tokens, bf16=args.bf16,
                           int8=args.int8)


def read_lines(path: str, stream: TextIO | None = None) -> list[str]:
    """Lines of a file (or stdin for "-"); invalid UTF-8 in a line is replaced, with a warning naming the line."""
    raw = (sys.stdin.buffer.read() if stream is None else stream.buffer.read()) if path == "-" else _read_bytes(path)
    lines = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError as err:
            print(f"warning: {path}: line {number}: invalid UTF-8 ({err.reason} at byte {err.start}); "
                  "undecodable bytes replaced by U+FFFD", file=sys.stderr)
            lines.append(line.decode("utf-8", errors="replace"))
    if lines and lines[-1] == "" and raw.endswith(b"\n"):
        lines.pop()
    return lines


def _read_bytes(path: str) -> bytes:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"input file not found: {path}")
    return p.read_bytes()


# ------------------------------------------------------------------------------------------------ translate
def register_translate_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "translate",
        help="translate sentences with a trained run directory",
        description="Translate sentences given as arguments, from --input FILE, or from standard input (one per "
        "line). Output: one translation per input line, in order; an empty line stays empty. With --n-best N, "
        "lines 'INDEX ||| TRANSLATION ||| SCORE'. --json prints one JSON object per input line.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("sentences", nargs="*", metavar="SENTENCE")
    p.add_argument("--input", "-i", help="file of sentences, one per line ('-' = standard input)")
    p.add_argument("--output", "-o", help="write translations here instead of standard output")
    p.add_argument("--json", action="store_true", help="JSON lines: source, translations with scores, timing")
    add_decoding_arguments(p)
    p.set_defaults(handler=translate_command)


def translate_command(args: argparse.Namespace) -> int:
    if args.sentences and args.input:
        raise ValueError("give sentences as arguments or --input FILE, not both")
    if args.sentences:
        texts = list(args.sentences)
    elif args.input:
        texts = read_lines(args.input)
    elif not sys.stdin.isatty():
        texts = read_lines("-")
    else:
        raise ValueError("nothing to translate: give sentences, --input FILE, or pipe text into standard input")
    translator = translator_from_args(args)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TranslationWarning)
        n_best = translator.translate_n_best(texts)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    elapsed = time.perf_counter() - start
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for i, (text, hyps) in enumerate(zip(texts, n_best)):
            if args.json:
                record = {"index": i, "source": text, "translations": [
                    {"text": translator.detokenize(h), "score": round(h.score, 4)} for h in hyps]}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            elif args.n_best > 1:
                for h in hyps:
                    out.write(f"{i} ||| {translator.detokenize(h)} ||| {h.score:.4f}\n")
            else:
                out.write((translator.detokenize(hyps[0]) if hyps else "") + "\n")
    finally:
        if args.output:
            out.close()
    print(f"translated {len(texts)} sentences in {elapsed:.2f} s", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------------ evaluate
def register_evaluate_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="translate a test set and print sacreBLEU and chrF with their signatures",
        description="Translate a test set and score it with sacreBLEU and chrF on detokenized, cased text (the "
        "way papers report it). Test set: --src FILE --ref FILE, or --corpus multi30k|tatoeba with --split "
        "(languages default to the run's).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--src", help="source sentences, one per line")
    p.add_argument("--ref", help="reference translations, one per line")
    p.add_argument("--corpus", choices=("multi30k", "tatoeba"), help="a registry corpus instead of files")
    p.add_argument("--split", default=None, help="corpus split (multi30k default: test_2016_flickr; tatoeba: test)")
    p.add_argument("--src-lang", help="source language (default: the run's data.src_lang)")
    p.add_argument("--tgt-lang", help="target language (default: the run's data.tgt_lang)")
    p.add_argument("--from", dest="data_dir", metavar="DIR", help="local copy of registry corpora (e.g. ../shared/data)")
    p.add_argument("--output", "-o", help="also write the translations to this file")
    p.add_argument("--json", action="store_true", help="print the scores as one JSON object on the last line")
    add_decoding_arguments(p)
    p.set_defaults(handler=evaluate_command)


def evaluate_command(args: argparse.Namespace) -> int:
    sources, references = _test_set(args)
    translator = translator_from_args(args)
    start = time.perf_counter()
    hypotheses = translator.translate(sources)
    elapsed = time.perf_counter() - start
    if args.output:
        Path(args.output).write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    s = score(hypotheses, references)
    print(f"BLEU = {s.bleu:.2f}  {s.bleu_signature}")
    print(f"chrF = {s.chrf:.2f}  {s.chrf_signature}")
    print(f"exact match = {s.exact_match:.1%}; {s.n} sentences translated in {elapsed:.1f} s "
          f"({translator.decoding.strategy}, beam {translator.decoding.beam_size})")
    if args.json:
        print(json.dumps({**s.as_dict(), "seconds": round(elapsed, 2)}))
    return 0


def _test_set(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if args.corpus:
        if args.src or args.ref:
            raise ValueError("give --corpus or --src/--ref files, not both")
        return _corpus_test_set(args)
    if not (args.src and args.ref):
        raise ValueError("give --src FILE and --ref FILE, or --corpus NAME")
    sources, references = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(references):
        raise ValueError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}")
    if not sources:
        raise ValueError(f"{args.src} is empty")
    return sources, references


def _corpus_test_set(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    from transformer.corpus.registry import corpus_pairs, fetch, tatoeba_splits
    from transformer.training.config import RunConfig

    run_config = Path(args.run_dir) / "run_config.json"
    data = RunConfig.from_dict(json.loads(run_config.read_text())).data if run_config.exists() else None
    src = args.src_lang or (data.src_lang if data else None)
    tgt = args.tgt_lang or (data.tgt_lang if data else None)
    if not (src and tgt):
        raise ValueError("give --src-lang and --tgt-lang (the run directory does not say)")
    directory = fetch(args.corpus, local_dir=args.data_dir)
    if args.corpus == "multi30k":
        pairs = corpus_pairs("multi30k", src=src, tgt=tgt, split=args.split or "test_2016_flickr", directory=directory)
    else:
        pairs = corpus_pairs("tatoeba", src=src, tgt=tgt, split="all", directory=directory)
        split = args.split or "test"
        splits = tatoeba_splits(pairs, seed=data.seed if data else 0)
        if split not in splits:
            raise ValueError(f"tatoeba has splits {sorted(splits)}, not {split!r}")
        pairs = splits[split]
    return [s for s, _ in pairs], [t for _, t in pairs]
