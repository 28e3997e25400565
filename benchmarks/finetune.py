"""Domain adaptation, French -> English: fine-tuning a general model on in-domain data, with and without mixing.

Four models, trained with the recipe of ``benchmarks/multi30k.py`` (d_model 256, 3 + 3 layers, joint BPE
of 8,000, batches of about 5,000 padded tokens, checkpoints every 100 steps):

* general: trained on Tatoeba for ``--general-minutes`` (20), or given (``--general DIR``, e.g. a run of
  ``benchmarks/multi30k.py --corpus tatoeba --src-lang fr --tgt-lang en``), or an imported Marian model
  (``--init-from DIR``, a run directory made by ``transformer import-hf``, used as it is);
* fine-tuned: ``train.init_from`` the general model, Multi30k train for ``--finetune-minutes`` (10), a
  fresh Adam, schedule ``inverse_sqrt`` (warmup ``--warmup`` steps to ``--lr``, then decaying);
* fine-tuned + mix: the same with ``data.mix`` (``--mix``, default ``multi30k:0.8,tatoeba:0.2``: each
  epoch all of Multi30k train and a fresh draw of Tatoeba's training split, a fifth of the pairs);
* in-domain: trained on Multi30k alone for ``--in-domain-minutes`` (30), or given (``--in-domain DIR``).

Each model is the average of its run's last 5 checkpoints (paper 6.1, as ``benchmarks/multi30k.py``
reports it), written with a copy of the run's config and tokenizer into ``OUT/<model>-averaged``; the
fine-tuning starts from the general model's average. Every model is scored on the Multi30k test_2016_flickr split and on the Tatoeba test split (held out by
French source sentence with ``--seed``, as the Trainer's ``tatoeba_splits`` makes it: the general
model never saw it, the mix draws only from Tatoeba's training split), beam 4, length penalty 0.6,
sacreBLEU and chrF. The table gives each model's steps and minutes, and the share of the general
model's Tatoeba BLEU it keeps (how much it forgot). Phases whose run directory holds a finished
phase (``phase.json``) are not trained again. Results go to ``OUT/finetune.json``.

    python benchmarks/finetune.py --from ../shared/data --out runs/adapt-fr-en
    python benchmarks/finetune.py --from ../shared/data --general /tmp/adapt/general --out /tmp/adapt
    python benchmarks/finetune.py --from ../shared/data --init-from runs/opus-fr-en --out runs/adapt-opus
    python benchmarks/finetune.py --from ../shared/data --general-minutes 0.2 --finetune-minutes 0.2 --in-domain-minutes 0.2 --test-sentences 20 --out /tmp/adapt-check
                                                                    # a check of the script, not a result
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from pathlib import Path

from multi30k import FIRST_RECIPE, decode_in_bf16, recipe, score_run

from transformer.training.averaging import average_last
from transformer.run.model import CONFIG_FILE, WEIGHTS_FILE
from transformer.run.config import DataConfig, RunConfig
from transformer.training.data_setup import load_text_splits
from transformer.run.checkpoints import latest_checkpoint, list_checkpoints
from transformer.run.layout import TRAINER_STATE_FILE as STATE_FILE
from transformer.run.directory import RUN_CONFIG_FILE
from transformer.training.trainer import Trainer
from transformer.text.tokenizer import JOINT_FILE, SRC_FILE, TGT_FILE

PHASE_FILE = "phase.json"


def train_phase(cfg: RunConfig, run_dir: Path) -> dict:
    """Train ``cfg`` into ``run_dir`` unless a finished phase is there; steps and minutes of training."""
    done = run_dir / PHASE_FILE
    if done.is_file():
        print(f"{run_dir}: trained before, not again ({done})")
        return json.loads(done.read_text())
    trainer = Trainer(cfg, run_dir)
    result = trainer.train()
    record = {"run_dir": str(run_dir), "steps": result.steps, "minutes": round(result.seconds / 60, 1),
              "precision": trainer.precision}
    done.write_text(json.dumps(record, indent=2) + "\n")
    return record


def given_run(run_dir: Path) -> dict:
    """A run trained elsewhere: its steps and minutes as far as known."""
    record: dict = {"run_dir": str(run_dir), "steps": None, "minutes": None}
    if (run_dir / "benchmark.json").is_file():  # written by benchmarks/multi30k.py
        bench = json.loads((run_dir / "benchmark.json").read_text())
        record.update(steps=bench.get("train_steps"), minutes=round(bench.get("train_seconds", 0) / 60, 1))
    elif (latest := latest_checkpoint(run_dir)) is not None:
        record["steps"] = json.loads((latest / STATE_FILE).read_text())["trainer"]["step"]
    return record


def averaged_run(run_dir: Path, out: Path, record: dict) -> Path:
    """A run directory ``out`` whose model is the average of ``run_dir``'s last 5 checkpoints (all of them when
    it has fewer), with a copy of its config and tokenizer; ``run_dir`` itself when it has no checkpoints (an
    imported model). ``record`` gets which weights those are."""
    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        record["weights"] = str(run_dir / WEIGHTS_FILE)
        return run_dir
    out.mkdir(parents=True, exist_ok=True)
    for name in (CONFIG_FILE, RUN_CONFIG_FILE, JOINT_FILE, SRC_FILE, TGT_FILE):
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, out / name)
    used = average_last(run_dir, min(5, len(checkpoints)), out / WEIGHTS_FILE)
    record["weights"] = f"average of {used[0].name}..{used[-1].name}"
    return out


def test_sets(args: argparse.Namespace) -> dict[str, list[tuple[str, str]]]:
    """Multi30k test_2016_flickr and Tatoeba's held-out test split (as the Trainer splits it with the seed)."""
    sets = {}
    for corpus in ("multi30k", "tatoeba"):
        cfg = DataConfig(corpus=corpus, src_lang=args.src, tgt_lang=args.tgt, data_dir=args.data_dir, seed=args.seed)
        sets[corpus] = load_text_splits(cfg)[0]["test"][: args.test_sentences or None]
    return sets


def finetune_recipe(args: argparse.Namespace, init_dir: Path, *, mix: str | None) -> RunConfig:
    """The recipe on Multi30k, starting from ``init_dir``: its architecture and tokenizer, a fine-tuning schedule."""
    base = recipe(corpus="multi30k", src=args.src, tgt=args.tgt, data_dir=args.data_dir, minutes=args.finetune_minutes,
                  seed=args.seed, overrides=FIRST_RECIPE)
    train = dataclasses.replace(base.train, init_from=str(init_dir), schedule="inverse_sqrt", lr=args.lr,
                                warmup=args.warmup)
    return RunConfig(data=dataclasses.replace(base.data, mix=mix), model={"preset": "small"}, train=train)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of the corpora (Multi30k, Tatoeba)")
    parser.add_argument("--out", default="runs/adapt-fr-en", help="where the runs and finetune.json go")
    parser.add_argument("--src-lang", dest="src", default="fr")
    parser.add_argument("--tgt-lang", dest="tgt", default="en")
    parser.add_argument("--general", metavar="DIR", help="a general (Tatoeba) run trained before: not trained again")
    parser.add_argument("--init-from", metavar="DIR",
                        help="start the adaptation from this run instead (e.g. an opus-mt model imported with import-hf)")
    parser.add_argument("--in-domain", metavar="DIR", help="a Multi30k run trained before: not trained again")
    parser.add_argument("--general-minutes", type=float, default=20.0)
    parser.add_argument("--finetune-minutes", type=float, default=10.0)
    parser.add_argument("--in-domain-minutes", type=float, default=30.0)
    parser.add_argument("--mix", default="multi30k:0.8,tatoeba:0.2", help="data.mix of the mixed fine-tuning")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate of the fine-tuning (default: 1e-3, chosen on "
                        "Multi30k validation against 5e-4; see docs/finetuning.md)")
    parser.add_argument("--warmup", type=int, default=100, help="warmup steps of the fine-tuning (default: 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-sentences", type=int, default=0,
                        help="score only the first N sentences of each test set (0: all; fewer are a check, not a result)")
    args = parser.parse_args()
    if args.general and args.init_from:
        parser.error("give --general or --init-from, not both")
    out = Path(args.out)
    start = time.perf_counter()

    phases: dict[str, tuple[Path, dict]] = {}  # model -> (the run directory scored, its record)
    given = args.init_from or args.general
    if given:
        record = given_run(Path(given))
    else:
        cfg = recipe(corpus="tatoeba", src=args.src, tgt=args.tgt, data_dir=args.data_dir, minutes=args.general_minutes,
                     seed=args.seed, overrides=FIRST_RECIPE)
        given, record = out / "general", train_phase(cfg, out / "general")
    general = averaged_run(Path(given), out / "general-averaged", record)
    phases["general"] = (general, record)
    for label, name, mix in (("fine-tuned", "finetuned", None), ("fine-tuned + mix", "finetuned-mix", args.mix)):
        record = train_phase(finetune_recipe(args, general, mix=mix), out / name)
        phases[label] = (averaged_run(out / name, out / f"{name}-averaged", record), record)
    if args.in_domain:
        in_domain, record = Path(args.in_domain), given_run(Path(args.in_domain))
    else:
        cfg = recipe(corpus="multi30k", src=args.src, tgt=args.tgt, data_dir=args.data_dir,
                     minutes=args.in_domain_minutes, seed=args.seed, overrides=FIRST_RECIPE)
        in_domain, record = out / "in-domain", train_phase(cfg, out / "in-domain")
    phases["in-domain"] = (averaged_run(in_domain, out / "in-domain-averaged", record), record)

    sets = test_sets(args)
    rows = []
    for label, (run_dir, record) in phases.items():
        row = {"model": label, **record, "scored": str(run_dir)}
        for corpus, pairs in sets.items():
            scores = score_run(run_dir, pairs)
            row[corpus] = {k: scores[k] for k in ("bleu", "chrf", "decode_seconds")}
            row["signature"] = scores["signature"]
        rows.append(row)
    general_tatoeba = rows[0]["tatoeba"]["bleu"]
    for row in rows:
        row["tatoeba_bleu_kept"] = round(row["tatoeba"]["bleu"] / general_tatoeba, 3) if general_tatoeba else None
    summary = {"direction": f"{args.src}-{args.tgt}", "test_sentences": {k: len(v) for k, v in sets.items()},
               "lr": args.lr, "warmup": args.warmup, "mix": args.mix, "decode": "bf16" if decode_in_bf16() else "fp32",
               "wall_seconds": round(time.perf_counter() - start), "results": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "finetune.json").write_text(json.dumps(summary, indent=2) + "\n")

    print(f"\ndomain adaptation {args.src}->{args.tgt}: Multi30k test_2016_flickr ({len(sets['multi30k'])} sentences), "
          f"Tatoeba test ({len(sets['tatoeba'])}), beam 4, alpha 0.6; fine-tuning inverse_sqrt lr {args.lr:g}, "
          f"warmup {args.warmup}, mix {args.mix}")
    print(f"{'model':<18} {'steps':>6} {'min':>6} {'M30k BLEU':>10} {'chrF':>6} {'Tatoeba BLEU':>13} {'chrF':>6} "
          f"{'kept':>6}")
    for r in rows:
        steps = "-" if r["steps"] is None else f"{r['steps']:,}"
        minutes = "-" if r["minutes"] is None else f"{r['minutes']:.1f}"
        kept = "-" if r["tatoeba_bleu_kept"] is None else f"{r['tatoeba_bleu_kept']:.0%}"
        print(f"{r['model']:<18} {steps:>6} {minutes:>6} {r['multi30k']['bleu']:>10.2f} {r['multi30k']['chrf']:>6.2f} "
              f"{r['tatoeba']['bleu']:>13.2f} {r['tatoeba']['chrf']:>6.2f} {kept:>6}")
    print("fine-tuned runs start from the general model: their minutes come on top of its minutes")
    print(f"signature: {rows[0]['signature']}")
    print(f"results: {out / 'finetune.json'}")


if __name__ == "__main__":
    main()
