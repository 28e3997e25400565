"""``transformer adapt``: a run fine-tuned on a translation memory's accepted entries, kept only if better.

The command is the existing fine-tuning (``train.init_from``) with the memory as the in-domain
corpus of a ``data.mix`` whose second corpus replays the run's own training pairs; the run's
validation pairs stay its validation set. The run and the new model translate a held-back slice
of the memory and that validation set, and the new run reaches ``--out`` only through the gate
(:func:`gate`); it is trained in a temporary directory beside ``--out``. The new model is the
weights of the last of ``--steps`` (of ``train.ema`` or ``train.average_last`` where given), not
the epoch of lowest loss on the run's validation set, which a model moved towards the memory has
at its start.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

from transformer.decoding import DecodeConfig
from transformer.errors import UserError
from transformer.memory import TranslationMemory
from transformer.run.config import RunConfig
from transformer.run.layout import RUN_CONFIG_FILE, WEIGHTS_FILE
from transformer.run_files import write_atomic
from transformer.training.cli_args import EXIT_NOT_BETTER
from transformer.training.data_setup import Pair, load_text_splits
from transformer.training.averaging import average_last
from transformer.training.trainer import Trainer
from transformer.translate.evaluation import score
from transformer.translate.translator import load_translator

DATA_DIR = "adapt-data"  # the adapted run's training files, kept in it so its run_config.json stays true
REPLAY_POOL = 100_000  # the most training pairs of the run written out for the replay to draw from
_PAGE = 1000  # entries read from the memory per call


def _flat(text: str) -> str:
    """One line of text: the training files are line- and tab-separated."""
    return " ".join(text.split())


def accepted_pairs(tm_path: str, src: str, tgt: str, *, timeout: float) -> list[tuple[int, Pair]]:
    """The accepted entries of the pair ``src``-``tgt``, as (id, (source, target)), in the order added."""
    if not Path(tm_path).is_file():  # opening a missing memory would create an empty one
        raise UserError(f"--tm {tm_path}: no such translation memory")
    found: list[tuple[int, Pair]] = []
    with TranslationMemory(tm_path, timeout=timeout) as tm:
        while page := tm.entries(status="accepted", source_lang=src, target_lang=tgt, limit=_PAGE, offset=len(found)):
            found += [(entry.id, (_flat(entry.source), _flat(entry.target))) for entry in page]
    return [(i, pair) for i, pair in found if all(pair)]


def _share(entry_id: int) -> float:
    """Where an entry's id falls in [0, 1), by its hash: the same for that entry in every run."""
    return int.from_bytes(hashlib.sha256(str(entry_id).encode()).digest()[:8], "big") / 2**64


def split_held_out(entries: list[tuple[int, Pair]], fraction: float) -> tuple[list[Pair], list[Pair]]:
    """(to train on, held out): the entries whose id hashes below ``fraction`` (about that share), or
    the lowest one when none does; an entry held out once stays held out as the memory grows."""
    held = {i for i, _ in entries if _share(i) < fraction} or {min((i for i, _ in entries), key=_share)}
    return [pair for i, pair in entries if i not in held], [pair for i, pair in entries if i in held]


def gate(held: tuple[float, float], valid: tuple[float, float], *, min_gain: float,
         max_drop: float) -> str | None:
    """Why the new model is not kept, or None when it is: ``held`` and ``valid`` are (before, after) BLEU."""
    if not held[1] - held[0] > min_gain:
        return (f"held-out BLEU {held[0]:.2f} -> {held[1]:.2f} did not rise by more than {min_gain:g} (--min-gain)")
    if valid[0] - valid[1] > max_drop:
        return (f"validation BLEU {valid[0]:.2f} -> {valid[1]:.2f} fell by more than {max_drop:g} "
                "(--max-validation-drop)")
    return None


def _check(args: argparse.Namespace) -> Path:
    for name, ok, rule in (("--steps", args.steps >= 1, ">= 1"), ("--min-entries", args.min_entries >= 2, ">= 2"),
                           ("--valid-sentences", args.valid_sentences >= 1, ">= 1"), ("--beam", args.beam >= 1, ">= 1"),
                           ("--held-out", 0 < args.held_out < 1, "between 0 and 1"),
                           ("--replay", math.isfinite(args.replay) and args.replay >= 0, ">= 0"),
                           ("--timeout", args.timeout >= 0, ">= 0")):
        if not ok:
            value = getattr(args, name[2:].replace("-", "_"))
            raise UserError(f"{name} must be {rule}, got {value}")
    for name in ("min_gain", "max_validation_drop"):
        if not math.isfinite(getattr(args, name)):
            raise UserError(f"--{name.replace('_', '-')} must be a finite number of BLEU points")
    out = Path(args.out)
    if out.exists() or out.is_symlink():
        raise UserError(f"--out {out} already exists: name a new directory for the adapted run")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: its folder {out.parent} does not exist")
    return out


def _run_data(run_dir: str):  # -> DataConfig
    """The data settings RUN was trained with (its languages, corpus and validation set)."""
    path = Path(run_dir) / RUN_CONFIG_FILE
    if not Path(run_dir).is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    try:
        data = RunConfig.read(path).data
    except FileNotFoundError:
        raise UserError(f"{run_dir} has no {RUN_CONFIG_FILE}: adapting needs the run's languages and training "
                        "data (a run of transformer train)") from None
    except ValueError as err:  # a run_config.json that cannot be read: the message names it
        raise UserError(str(err)) from None
    if not (data.src_lang and data.tgt_lang):
        raise UserError(f"{path} does not name the run's languages (data.src_lang, data.tgt_lang)")
    return data


def _write_tsv(path: Path, pairs: list[Pair]) -> str:
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return str(path.resolve())


def _write_lines(path: Path, pairs: list[Pair], side: int) -> str:
    path.write_text("".join(pair[side] + "\n" for pair in pairs), encoding="utf-8")
    return str(path.resolve())


def _bleu(run_dir: Path | str, pairs: list[Pair], beam: int) -> float:
    decoding = DecodeConfig(strategy="greedy") if beam == 1 else DecodeConfig(beam_size=beam)
    translator = load_translator(run_dir, decoding=decoding)
    return score(translator.translate([s for s, _ in pairs]), [t for _, t in pairs]).bleu


def _relocate(run_dir: Path, old: Path, new: Path) -> None:
    """Point the data paths of ``run_dir``'s run_config.json from ``old`` to ``new``, where the run moves."""
    path = run_dir / RUN_CONFIG_FILE
    saved = json.loads(path.read_text(encoding="utf-8"))
    data = saved.get("data", {})
    for key in ("mix", "tsv", "valid_src", "valid_tgt"):
        if isinstance(data.get(key), str):
            data[key] = data[key].replace(str(old), str(new))
    write_atomic(path, json.dumps(saved, indent=2, ensure_ascii=False) + "\n")


def adapt_command(args: argparse.Namespace) -> int:
    out = _check(args)
    data = _run_data(args.run_dir)
    src, tgt = data.src_lang, data.tgt_lang
    entries = accepted_pairs(args.tm, src, tgt, timeout=args.timeout)
    if len(entries) < args.min_entries:
        raise UserError(f"{args.tm} has {len(entries)} accepted {src}-{tgt} entries; adapting needs at least "
                        f"{args.min_entries} (--min-entries; `transformer tm stats` counts them by pair)")
    train_pairs, held_pairs = split_held_out(entries, args.held_out)
    if not train_pairs:
        raise UserError(f"--held-out {args.held_out:g} holds back all {len(entries)} entries: give a smaller share")
    splits, _ = load_text_splits(data)
    valid_pairs = [(_flat(s), _flat(t)) for s, t in splits.get("valid", [])][:args.valid_sentences]
    if not valid_pairs:
        raise UserError(f"{args.run_dir}'s data settings give no validation pairs to check what it keeps")
    replay = [(_flat(s), _flat(t)) for s, t in splits.get("train", [])]
    if len(replay) > REPLAY_POOL:
        replay = random.Random(data.seed).sample(replay, REPLAY_POOL)
    print(f"memory: {len(entries)} accepted {src}-{tgt} entries, {len(train_pairs)} to train on, "
          f"{len(held_pairs)} held out; replay: {args.replay:g} pair of the run's training data "
          f"({len(replay):,} pairs) per memory pair")

    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.adapting-", dir=out.parent)).resolve()
    try:
        run = work / "run"
        files = run / DATA_DIR
        files.mkdir(parents=True)
        memory_tsv = _write_tsv(files / "memory.tsv", train_pairs)
        valid_src, valid_tgt = (_write_lines(files / f"valid.{side}", valid_pairs, i)
                                for i, side in enumerate(("src", "tgt")))
        settings = [f"data.src_lang={src}", f"data.tgt_lang={tgt}", f"data.max_tokens={data.max_tokens}",
                    f"data.max_len={data.max_len}", f"data.valid_src={valid_src}", f"data.valid_tgt={valid_tgt}",
                    f"train.init_from={Path(args.run_dir).resolve()}", f"train.max_steps={args.steps}",
                    # an epoch is a step at least: --steps decides, however few entries there are
                    f"train.epochs={args.steps}", "train.eval_sentences=0"]
        if args.replay > 0 and replay:
            settings.append(f"data.mix={memory_tsv}:1,{_write_tsv(files / 'replay.tsv', replay)}:{args.replay:g}")
        else:
            settings += ["data.corpus=tsv", f"data.tsv={memory_tsv}"]
        cfg = RunConfig().with_overrides(settings + list(args.overrides))
        before = (_bleu(args.run_dir, held_pairs, args.beam), _bleu(args.run_dir, valid_pairs, args.beam))
        result = Trainer(cfg, run, show_progress=not args.quiet).train()
        if not (cfg.train.ema or cfg.train.average_last):
            # The model --steps trained: the trainer keeps the one of lowest loss on the run's
            # validation set, which for a model moved towards the memory is its first epoch's.
            average_last(run, 1, run / WEIGHTS_FILE)
        after = (_bleu(run, held_pairs, args.beam), _bleu(run, valid_pairs, args.beam))
        print(f"trained {result.steps} steps in {result.seconds:.0f} s")
        for what, n, b, a in (("held-out memory", len(held_pairs), before[0], after[0]),
                              ("validation", len(valid_pairs), before[1], after[1])):
            print(f"{what} ({n} sentences): BLEU {b:.2f} -> {a:.2f} ({a - b:+.2f})")
        reason = gate((before[0], after[0]), (before[1], after[1]), min_gain=args.min_gain,
                      max_drop=args.max_validation_drop)
        if reason:
            print(f"transformer adapt: not adapted: {reason}; nothing written", file=sys.stderr)
            return EXIT_NOT_BETTER
        _relocate(run, run, out.resolve())
        os.rename(run, out)
        print(f"adapted run in {out}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
