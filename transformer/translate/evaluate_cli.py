"""``transformer evaluate``: translate a test set and score it with sacreBLEU and chrF.

The test set comes from files, a registry corpus or a sacreBLEU test set (``_test_set``); each
source line is translated whole, as ``translate --segment lines`` does, with the decoding and
glossary options of ``translate`` (``transformer.translate.cli_args``, which holds the parser).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

from transformer.errors import UserError
from transformer.decoding import DecodeConfig
from transformer.run.layout import RUN_CONFIG_FILE
from transformer.run_files import write_atomic
from transformer.translate.cli import glossary_from_args, translator_from_args
from transformer.translate.evaluation import score
from transformer.translate.inputs import read_lines
from transformer.translate.stream import same_file
from transformer.translate.warning import TermWarning


def evaluate_command(args: argparse.Namespace) -> int:
    if args.output:
        for name in ("src", "ref"):
            if getattr(args, name) and same_file(getattr(args, name), args.output):
                raise UserError(f"--output {args.output} is the --{name} file: write the translations to another file")
        if Path(args.output).exists() and not args.overwrite:
            raise UserError(f"{args.output} exists: give --overwrite to replace it")
    sources, references = _test_set(args)
    glossary = glossary_from_args(args)
    translator = translator_from_args(args)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TermWarning)
        hypotheses = translator.translate(sources, glossary=glossary)
    elapsed = time.perf_counter() - start
    for w in caught[:5]:
        print(f"warning: {w.message}", file=sys.stderr)
    if len(caught) > 5:
        print(f"warning: {len(caught)} sentences in all lack a glossary term", file=sys.stderr)
    if args.output:
        write_atomic(args.output, "".join(h + "\n" for h in hypotheses).encode("utf-8"))
    s = score(hypotheses, references)
    print(f"BLEU = {s.bleu:.2f}  {s.bleu_signature}")
    print(f"chrF = {s.chrf:.2f}  {s.chrf_signature}")
    print(f"exact match = {s.exact_match:.1%}; {s.n} sentences translated in {elapsed:.1f} s "
          f"({_strategy(translator.decoding)})")
    if args.json:
        print(json.dumps({**s.as_dict(), "seconds": round(elapsed, 2)}))
    return 0


def _test_set(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    given = [name for name, on in (("--corpus", args.corpus), ("--src/--ref", args.src or args.ref),
                                   ("--test-set", args.test_set)) if on]
    if len(given) > 1:
        raise UserError(f"give one test set: {' or '.join(given)}, not both")
    if args.corpus:
        return _corpus_test_set(args)
    if args.test_set or not given:
        data = _run_data(args.run_dir)
        name = args.test_set or (data.test_set if data else None)
        if name:
            return _sacrebleu_test_set(args, name, data)
    if not (args.src and args.ref):
        raise UserError("give --src FILE and --ref FILE, --corpus NAME or --test-set NAME (the run names no "
                        "data.test_set)")
    sources, references = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(references):
        raise UserError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}")
    if not sources:
        raise UserError(f"{args.src} is empty")
    return sources, references


def _run_data(run_dir: str):  # -> DataConfig | None
    """The run's data settings, or None when the directory holds no run configuration."""
    from transformer.run.config import RunConfig

    run_config = Path(run_dir) / RUN_CONFIG_FILE
    return RunConfig.read(run_config).data if run_config.exists() or run_config.is_symlink() else None


def _sacrebleu_test_set(args: argparse.Namespace, name: str, data) -> tuple[list[str], list[str]]:
    from transformer.corpus.testsets import sacrebleu_pairs

    src = args.src_lang or (data.src_lang if data else None)
    tgt = args.tgt_lang or (data.tgt_lang if data else None)
    if not (src and tgt):
        raise UserError("give --src-lang and --tgt-lang (the run directory does not say)")
    pairs = sacrebleu_pairs(name, src=src, tgt=tgt)
    return [s for s, _ in pairs], [t for _, t in pairs]


def _corpus_test_set(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    from transformer.corpus.registry import corpus_pairs, fetch, tatoeba_splits

    data = _run_data(args.run_dir)
    src = args.src_lang or (data.src_lang if data else None)
    tgt = args.tgt_lang or (data.tgt_lang if data else None)
    if not (src and tgt):
        raise UserError("give --src-lang and --tgt-lang (the run directory does not say)")
    directory = fetch(args.corpus, local_dir=args.data_dir)
    if args.corpus == "multi30k":
        pairs = corpus_pairs("multi30k", src=src, tgt=tgt, split=args.split or "test_2016_flickr", directory=directory)
    else:
        pairs = corpus_pairs("tatoeba", src=src, tgt=tgt, split="all", directory=directory)
        split = args.split or "test"
        splits = tatoeba_splits(pairs, seed=data.seed if data else 0)
        if split not in splits:
            raise UserError(f"tatoeba has splits {sorted(splits)}, not {split!r}")
        pairs = splits[split]
    return [s for s, _ in pairs], [t for _, t in pairs]


def _strategy(decoding: DecodeConfig) -> str:
    """How the sentences were decoded, for the summary line."""
    if decoding.strategy == "beam":
        return f"beam {decoding.beam_size}"
    if decoding.strategy == "sample":
        return f"sampling, {decoding.n_best} per sentence" if decoding.n_best > 1 else "sampling"
    return "greedy"
