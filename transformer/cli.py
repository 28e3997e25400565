"""The ``transformer`` command: thin subcommands that call the library.

Building the parser imports nothing heavy (no torch, no optional extra), so ``transformer --help``
and every command's ``--help`` are quick and work on a base install. ``demo``, ``train``,
``average`` and ``info`` are defined here, their heavy imports inside their handlers; every other
command's parser is in the ``cli_args.py`` of its package (``translate``, ``serve``, ``visualize``,
``interop``, ``corpus``, ``memory``; ``training`` for ``adapt``), whose handler is a ``"module:function"``
reference imported when the command runs. A module of an optional extra missing then is one line naming the extra and the
command that installs it (:class:`transformer.errors.MissingExtraError`). A mistake of the user is printed as one line on stderr,
``transformer COMMAND: error: ...``, naming the problem and the fix, never as a stack trace; a bug
of this package is printed with its traceback and an ``internal error`` line.
Exit statuses (also in ``transformer --help``):

* 0: success.
* 1: an internal error, a bug of this package (any exception but the user's mistakes of
  :class:`transformer.errors.UserError` and the file system's errors): printed with its traceback.
* 2: a mistake in the command or its settings: an unknown option, a setting out of its range
  (``train.lr_scale=nan``), a missing input file, a path that is a directory, a run directory
  that holds another run or that another process is writing to (``train`` and ``average``
  lock it), a directory you may not write to.
* 3: the environment failed: a read-only file system, a full disk or exhausted quota, an
  input/output error, another process of a ``torchrun`` training lost. Nothing is left half-written; fix the cause and run the same command again
  (``train`` resumes from its last checkpoint).
* 4: ``adapt`` only: the adapted model was not better by its thresholds; nothing was written.
* 130: interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import math
import os
import sys
import textwrap
import time
import traceback
from typing import TYPE_CHECKING, Callable, Sequence

from transformer import __version__
from transformer.config import PRESETS, preset
from transformer.corpus.cli_args import register_data_command
from transformer.errors import MissingExtraError, UserError
from transformer.interop.cli_args import register_interop_commands
from transformer.memory.cli_args import register_tm_command
from transformer.inference_precision import add_precision_option, weight_dtype
from transformer.run.config import describe_ranges
from transformer.serve.cli_args import register_serve_command
from transformer.threads import MAX_THREADS, default_threads
from transformer.training.cli_args import register_adapt_command
from transformer.translate.cli_args import (
    register_calibrate_command, register_detect_command, register_evaluate_command, register_translate_command,
)
from transformer.visualize.cli_args import register_attend_command, register_report_command

if TYPE_CHECKING:
    import torch

    from transformer.model import Transformer

# A command's handler: the function itself (the commands of this module), or a "module:function"
# reference to it, imported when the command runs (the commands of the packages).
Handler = Callable[[argparse.Namespace], int]


EXIT_BUG = 1  # an internal error: a bug of this package, shown with its traceback
EXIT_USAGE = 2  # a mistake in the command or its settings
EXIT_ENVIRONMENT = 3  # the file system (or another part of the environment) failed
EXIT_STATUSES = (
    "exit status: 0 success; 1 an internal error (a bug: the traceback is shown, please report it); 2 a mistake in the command or its settings (a value out of range, a missing file, "
    "a run directory in use by another run, training that diverged); 3 the environment failed (read-only file "
    "system, full disk, I/O error, a lost torchrun process): fix it and run the same command again; 4 (adapt) the "
    "adapted model was not better: nothing written; 130 interrupted.")


# The commands that compute with torch; each takes --threads.
THREADED_COMMANDS = ("demo", "train", "adapt", "translate", "evaluate", "calibrate", "serve", "attend", "info")
THREADS_HELP = (f"CPU threads for PyTorch and the CPU engine's kernels, 1 to {MAX_THREADS} (default: the cores "
                "other processes leave idle when the command starts, at least 1; OMP_NUM_THREADS, where set, "
                "decides instead). Beside a busy process fewer threads are much faster: see docs/performance.md, "
                "Threads.")


def _add_threads_option(parser: argparse.ArgumentParser, command: str) -> None:
    extra = (" It takes the place of train.threads for this process only and is not recorded in the run's "
             "settings, so a run resumes with any --threads.") if command == "train" else ""
    # Read as text and checked in main(), so a bad value is one line like every other mistake.
    parser.add_argument("--threads", metavar="N", default=None, help=THREADS_HELP + extra)


# Options renamed so that one thing has one name in every command (a language is --src-lang, a beam
# size --beam, a precision --precision): each old spelling is refused with its new name, rather than
# read as an abbreviation of another option or as an unknown one.
_PRECISION_FLAGS = {"--int8": "--precision int8", "--bf16": "--precision bf16"}
RENAMED_OPTIONS: dict[str, dict[str, str]] = {
    "train": {"--src": "--src-lang", "--tgt": "--tgt-lang"},
    "translate": _PRECISION_FLAGS,
    "evaluate": _PRECISION_FLAGS,
    "calibrate": _PRECISION_FLAGS,
    "serve": {**_PRECISION_FLAGS, "--beam-size": "--beam"},
    "info": {"--bf16": "--precision bf16"},
    "attend": {"--beam": "--beam-search"},
    "average": {"--out": "--output"},
    "export": {"--quantization": "--precision", "--from-code": "--src-lang", "--to-code": "--tgt-lang"},
}


class RenamedOption(UserError):
    """An option given by its old name; the message names the new one, ``prog`` the command."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Renamed(argparse.Action):
    """An old option's name, hidden from the help: using it is a RenamedOption, whatever follows it."""

    def __init__(self, option_strings: list[str], dest: str, *, use: str) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs="?", help=argparse.SUPPRESS)
        self.use = use

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        raise RenamedOption(f"{option_string} was renamed: use {self.use}", parser.prog)


def _apply_threads(args: argparse.Namespace) -> None:
    """torch.set_num_threads before the command runs: --threads, else OMP_NUM_THREADS where set, else
    the idle cores (transformer/threads.py); UserError for a bad --threads."""
    if not hasattr(args, "threads"):  # a command that does not compute with torch
        return
    import torch

    value = args.threads
    if value is None:
        if "OMP_NUM_THREADS" not in os.environ:
            # torch's own count (one per physical core) caps it: idle hyperthreads add nothing
            torch.set_num_threads(min(torch.get_num_threads(), default_threads()))
        return
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if not 1 <= threads <= MAX_THREADS:
        raise UserError(f"--threads must be a whole number from 1 to {MAX_THREADS}, got {value!r}")
    args.threads = threads
    torch.set_num_threads(threads)


def _register_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="build a preset, print its parameter count and layer table, run one forward pass",
        description="Build a model preset, print its parameter count and a table of its layers, and time "
        "one forward pass on a random batch.",
    )
    p.add_argument("--preset", default="base", choices=sorted(PRESETS), help="model size (default: base, the paper's)")
    p.add_argument("--vocab", type=int, default=37000, help="shared vocabulary size (default: 37000, the paper's EN-DE BPE)")
    p.add_argument("--batch", type=int, default=8, help="sentences in the test batch (default: 8)")
    p.add_argument("--length", type=int, default=32, help="source and target length of the test batch (default: 32)")
    add_precision_option(p, choices=("fp32", "bf16"), what="run the forward pass")
    p.set_defaults(handler=_info)


def _info(args: argparse.Namespace) -> int:
    for name in ("vocab", "batch", "length"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be >= 1, got {getattr(args, name)}")
    import torch

    from transformer.model import Transformer
    from transformer.model.masks import padding_mask

    precision = args.precision
    cfg = preset(args.preset, src_vocab_size=args.vocab)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    print(f"transformer {__version__}: preset {args.preset!r}, shared vocabulary {args.vocab}")
    print(
        f"d_model={cfg.d_model} heads={cfg.n_heads} d_k={cfg.head_dim} d_ff={cfg.d_ff} "
        f"layers={cfg.n_encoder_layers}+{cfg.n_decoder_layers} dropout={cfg.dropout} "
        f"{'pre-LN' if cfg.norm_first else 'post-LN'} positions={cfg.positional}"
    )
    print()
    print(_layer_table(model))
    print()
    n = model.num_parameters()
    print(f"parameters: {n:,} ({n / 1e6:.1f}M; tied weights counted once)")

    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, args.vocab, (args.batch, args.length), generator=g) if args.vocab > 4 else torch.zeros(
        args.batch, args.length, dtype=torch.long
    )
    tgt = src.flip(1)
    mask = padding_mask(src, pad_id=-1)
    dtype = weight_dtype(precision)
    model.to(dtype)  # the weights in that format, as the translator holds them
    with torch.inference_mode():
        model(src, tgt, mask)  # warm-up
        start = time.perf_counter()
        logits = model(src, tgt, mask)
        elapsed = time.perf_counter() - start
    print(
        f"forward pass: batch {args.batch} x {args.length} -> logits {tuple(logits.shape)} "
        f"in {elapsed * 1000:.1f} ms ({str(dtype).replace('torch.', '')}, {torch.get_num_threads()} threads)"
    )
    return 0


def _layer_table(model: Transformer) -> str:
    """One row per top-level part and per layer: name, type, parameter count."""
    rows = [("part", "type", "parameters")]
    seen: set[int] = set()

    def count(module: torch.nn.Module) -> int:
        total = 0
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        return total

    for stack_name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        shared = " (shared with encoder)" if stack_name == "decoder" and model.config.share_embeddings else ""
        rows.append((f"{stack_name}.embed", f"embedding + positions{shared}", f"{count(stack.embed):,}"))
        for i, layer in enumerate(stack.layers):
            rows.append((f"{stack_name}.layers.{i}", type(layer).__name__, f"{count(layer):,}"))
        if stack.final_norm is not None:
            rows.append((f"{stack_name}.final_norm", "LayerNorm", f"{count(stack.final_norm):,}"))
    tied = " (tied to target embedding)" if model.config.tie_output else ""
    rows.append(("output", f"Linear{tied}", f"{count(model.output):,}"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}" for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _register_train(sub: argparse._SubParsersAction) -> None:
    description = (
        "Train with the paper's recipe. Settings come from --config (YAML or JSON with sections "
        "data/model/train) and key=value overrides, e.g. train.epochs=5 data.corpus=files "
        "data.train_src=train.fr data.train_tgt=train.en. Running again on the same --run-dir resumes "
        "from its latest checkpoint. One training at a time per --run-dir: a second is refused while the first "
        "runs (translate, evaluate and serve may read it meanwhile). For several processes: "
        "torchrun --nproc_per_node N -m transformer.cli train ...")
    p = sub.add_parser(
        "train",
        help="train a model on the built-in corpus or your parallel text",
        description=textwrap.fill(description, 100),
        epilog="valid values of the numeric settings (checked when the configuration is read):\n  "
        + "\n  ".join(describe_ranges()) + "\n\n" + textwrap.fill(EXIT_STATUSES, 100),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="settings, e.g. model.preset=small train.epochs=3")
    p.add_argument("--config", help="YAML or JSON run configuration (a recipe file is accepted too)")
    p.add_argument("--recipe", metavar="NAME",
                   help="one of the paper's experiments as shipped (wmt14-en-de-base, wmt14-en-de-big, wmt14-en-fr-base, "
                   "wmt14-en-fr-big), or a recipe file: its settings, with train.accumulate set for the number of "
                   "processes (the same command on 1 GPU or under torchrun); key=value overrides apply on top")
    p.add_argument("--corpus", help="shortcut for data.corpus: builtin, files, tsv, multi30k, tatoeba, wmt14-en-de or wmt14-en-fr")
    p.add_argument("--src-lang", metavar="CODE", help="shortcut for data.src_lang (e.g. de)")
    p.add_argument("--tgt-lang", metavar="CODE", help="shortcut for data.tgt_lang (e.g. en)")
    p.add_argument("--from", dest="data_dir", metavar="DIR",
                   help="shortcut for data.data_dir: a local copy of registry corpora (e.g. ../shared/data)")
    p.add_argument("--init-from", metavar="RUN_DIR",
                   help="shortcut for train.init_from: fine-tune, starting from this run's weights, architecture and "
                   "tokenizer (a run of train or import-hf, or its checkpoints/step-N); fresh optimizer, schedule "
                   "inverse_sqrt at train.lr unless train.schedule says otherwise; --run-dir must be another directory")
    p.add_argument("--run-dir", default="runs/train", help="where checkpoints, tokenizer and logs go (default: runs/train)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    import torch

    from transformer.cpu.allocator import retain_freed_memory
    from transformer.recipes import is_recipe_file, load_recipe
    from transformer.run.config import RunConfig
    from transformer.training.trainer import Trainer

    shortcuts = [f"data.{key}={value}" for key, value in
                 (("corpus", args.corpus), ("src_lang", args.src_lang), ("tgt_lang", args.tgt_lang),
                                   ("data_dir", args.data_dir))
                 if value is not None]
    if args.init_from is not None:
        shortcuts.append(f"train.init_from={args.init_from}")
    overrides = shortcuts + list(args.overrides)
    if args.recipe and args.config:
        raise UserError("give --recipe or --config, not both (key=value overrides go on top of either)")
    if args.recipe or (args.config and is_recipe_file(args.config)):
        cfg = load_recipe(args.recipe or args.config, overrides, run_dir=args.run_dir)
    elif args.config:
        cfg = RunConfig.load(args.config, overrides)
    else:
        cfg = RunConfig().with_overrides(overrides)
    retain_freed_memory()  # training reuses the same large temporaries each step (transformer/cpu/allocator.py)
    trainer = Trainer(cfg, args.run_dir, show_progress=not args.quiet)
    if args.threads is not None:  # the command line wins over the train.threads the trainer applied
        torch.set_num_threads(args.threads)
    result = trainer.train()
    if not trainer.dist.is_main:  # under torchrun the first process reports for all
        return 0
    summary = {"run_dir": str(result.run_dir), "steps": result.steps, "epochs": result.epochs_completed,
               "seconds": round(result.seconds, 1), "target_tokens": result.target_tokens, "valid": result.valid,
               "resumed_from": result.resumed_from}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"trained {result.steps} steps in {result.seconds:.0f} s; model in {result.run_dir}")
    return 0


def _register_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="train a small French->English model on the built-in corpus in minutes, then translate",
        description="Generate the built-in French->English corpus, train a small Transformer for 900 steps (about "
        "1 minute on a 2-core CPU with bf16 units, 3 in fp32 without; a slower or busier machine takes longer, "
        "the model comes out the same), report held-out sacreBLEU and exact match, and translate example "
        "sentences such as 'je suis étudiant'. Everything is written to a run directory. Interrupted or stopped "
        "by --time-limit, it says so and `transformer demo --resume --run-dir DIR` trains the rest.",
    )
    p.add_argument("--run-dir", default="runs/demo",
                   help="output directory (default: runs/demo; an existing one is never overwritten: -2, -3, ... is "
                        "used, except with --resume)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: 900, 1 to 3 minutes on 2 cores)")
    p.add_argument("--time-limit", type=float, default=None,
                   help="stop training after this many seconds in all, even if the steps are not done (default: no "
                        "limit); the summary then says how many were made and how to continue")
    p.add_argument("--resume", action="store_true",
                   help="continue the demo run in --run-dir where it stopped (its steps and seed), then evaluate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object on the last line")
    p.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from transformer.cpu.allocator import retain_freed_memory
    from transformer.demo import DEMO_STEPS, DemoError, continue_command, free_run_dir, resumable_config, run_demo

    if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise UserError(f"--time-limit must be > 0 seconds (and finite), got {args.time_limit}")
    if args.steps is not None and args.steps < 1:
        raise UserError(f"--steps must be >= 1, got {args.steps}")
    if not 0 <= args.seed < 2**32:
        raise UserError(f"--seed must be in [0, {2**32 - 1}], got {args.seed}")
    if args.resume:
        if args.steps is not None:
            raise UserError("--steps does not go with --resume: the run keeps the steps it started with")
        try:
            resumable_config(args.run_dir)
        except DemoError as err:
            raise UserError(str(err)) from None
        run_dir = args.run_dir
    else:
        run_dir = free_run_dir(args.run_dir)
    retain_freed_memory()  # as for training
    try:
        summary = run_demo(run_dir, max_steps=args.steps or DEMO_STEPS, time_limit=args.time_limit, seed=args.seed,
                           resume=args.resume)
    except KeyboardInterrupt:
        print(f"\ntransformer demo: stopped before its end; its last checkpoint (every 100 steps) is kept in {run_dir}. "
              f"Train the rest with: {continue_command(run_dir)}", file=sys.stderr)
        raise
    print(f"\nheld-out test ({summary['test_sentences']} sentences never seen in training): "
          f"sacreBLEU {summary['bleu']:.1f}, exact match {summary['exact_match']:.1%}")
    print(f"  {summary['bleu_signature']}")
    for src, hyp in summary["translations"].items():
        print(f"  {src}  ->  {hyp}")
    print(f"attention pictures: {summary['attention_page']}")
    threads = f"{summary['threads']} thread" + ("s" if summary["threads"] != 1 else "")
    print(f"trained {summary['train_steps']} of {summary['steps_planned']} steps in {summary['train_seconds']:.0f} s "
          f"({threads}); total {summary['wall_seconds']:.0f} s; run directory {summary['run_dir']}")
    if not summary["complete"]:
        print(f"NOT FINISHED: training stopped at {summary['stopped_by']} after {summary['train_steps']} of "
              f"{summary['steps_planned']} steps, so the scores and translations above are those of a model still "
              f"learning. Train the rest with: {summary['continue_with']}")
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
    return 0


def _register_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "average",
        help="average the weights of the last N checkpoints of a run (paper: 5)",
        description="Average the model weights of the newest N checkpoints of RUN_DIR and write them as the "
        "run's model (or to --output). Only the newest train.keep_last checkpoints count: the best checkpoint "
        "kept besides them is never averaged in.",
    )
    p.add_argument("run_dir")
    p.add_argument("--last", type=int, default=5, help="how many checkpoints (default: 5; at most the run's train.keep_last)")
    p.add_argument("--output", "-o", help="output file, which must not exist unless --overwrite is given (default: "
                   "RUN_DIR/model.safetensors, the run's model, which averaging replaces)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.set_defaults(handler=_average)


def _average(args: argparse.Namespace) -> int:
    import contextlib
    from pathlib import Path

    from transformer.run.layout import RUN_CONFIG_FILE, WEIGHTS_FILE
    from transformer.run.lock import RunLock, storage_errors
    from transformer.training.averaging import average_last

    model = Path(args.run_dir) / WEIGHTS_FILE
    out = Path(args.output) if args.output else model
    # --output never replaces a file (a file that is not a checkpoint was silently lost) unless told to;
    # the default output, the run's own model, is what averaging is for. The file is written through
    # a temporary name and renamed into place (averaging.average_last), so nothing is half-written.
    if out.is_dir():
        raise UserError(f"--output {out} is a directory; give a file name such as {out / 'averaged.safetensors'}")
    if (out.exists() or out.is_symlink()) and not args.overwrite and out.resolve() != model.resolve():
        raise UserError(f"--output {out} already exists; give a new file name, or --overwrite to replace it")
    target = out.parent
    # Writing into a run directory (its own by default) takes that run's lock: never while it trains.
    into_run = target.is_dir() and (target.resolve() == Path(args.run_dir).resolve()
                                    or (target / RUN_CONFIG_FILE).is_file())
    with storage_errors(target), (RunLock(target, command="average") if into_run else contextlib.nullcontext()):
        used = average_last(args.run_dir, args.last, out)
    print(f"averaged {len(used)} checkpoints ({', '.join(p.name for p in used)}) into {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer",
        description="Train, run and look inside the Transformer of 'Attention Is All You Need'.",
        epilog=EXIT_STATUSES,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _SUBCOMMANDS:
        register(sub)
    for command in THREADED_COMMANDS:
        _add_threads_option(sub.choices[command], command)
    for command, renamed in RENAMED_OPTIONS.items():
        for old, new in renamed.items():
            sub.choices[command].add_argument(old, action=_Renamed, use=new)
    return parser


def _register_calibrate(sub: argparse._SubParsersAction) -> None:
    register_calibrate_command(sub).set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from transformer.translate.calibrate import calibrate_command

    return calibrate_command(args, _validation_pairs)


def _validation_pairs(data):  # DataConfig -> list[tuple[str, str]]
    """A run's validation pairs, read from its data settings as its training read them (``calibrate``:
    reading them is training's, which the commands below this module do not import)."""
    from transformer.training.data_setup import load_text_splits

    return load_text_splits(data)[0].get("valid", [])


# The commands in the order ``transformer --help`` lists them.
_SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], object]] = [
    _register_demo, _register_train, register_translate_command, register_evaluate_command, register_detect_command,
    _register_calibrate, register_attend_command, register_report_command, _register_average, register_data_command,
    register_serve_command, _register_info, register_interop_commands, register_tm_command, register_adapt_command,
]


def _handler(reference: Handler | str) -> Handler:
    """The function that runs a command: ``reference`` itself, or the function a
    ``"module:function"`` reference names, its module imported now."""
    if callable(reference):
        return reference
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def _run(args: argparse.Namespace) -> int:
    """Import the command's code, set torch's threads, run it; a module of an optional extra that is
    missing, wherever the command imports it, becomes a MissingExtraError naming the extra."""
    try:
        handler = _handler(args.handler)
        _apply_threads(args)
        return handler(args)
    except ModuleNotFoundError as err:
        missing = MissingExtraError.of(err, f"transformer {args.command}")
        if missing is None:  # not an extra's: a bug of this package
            raise
        raise missing from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except RenamedOption as err:  # one line, as for every mistake, without the usage argparse prints
        print(f"{err.prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    # argparse binds a '*' positional (sentences, overrides) before the options that follow it;
    # words after those options still belong to it.
    late = next((name for name in ("sentences", "overrides") if hasattr(args, name)), None)
    if extra and late and not any(e.startswith("-") and e != "-" for e in extra):
        setattr(args, late, list(getattr(args, late)) + extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    try:
        return _run(args)
    except (UserError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
            PermissionError) as err:
        print(f"transformer {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:  # the environment: a read-only or full disk, an I/O error (RunStorageError names the fix)
        print(f"transformer {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE if err.errno in (errno.EACCES, errno.EPERM) else EXIT_ENVIRONMENT
    except KeyboardInterrupt:
        print(f"transformer {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception:  # anything else is a bug of this package, never the user's mistake: show where it is
        traceback.print_exc()
        print(f"transformer {args.command}: internal error (a bug, not a mistake in the command): please report it "
              f"with the traceback above", file=sys.stderr)
        return EXIT_BUG


def _one_line(err: BaseException) -> str:
    """The error's message on one line (a message may quote a multi-line value)."""
    return " ".join(str(err).split()) or type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
