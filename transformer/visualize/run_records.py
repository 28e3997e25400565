"""What a training run directory records, read for ``transformer report``.

* ``run_config.json``: the run's configuration (a directory without it is not a run);
  ``config.json``: the model it built.
* ``metrics.jsonl``: one record per log line (``kind: train``: loss, lr, tokens_per_s and, in
  newer runs, grad_norm) and per evaluation (``kind: valid``: loss, nll, ppl, bleu, chrf,
  exact_match). Only complete lines count: a run still training may be writing the last one.
* ``alignments.jsonl`` (runs made since the trainer records it): at each evaluation, the
  cross-attention of a few fixed validation sentences, teacher-forced on their references
  (:mod:`transformer.run.alignments`)::

      {"step": 600, "epoch": 2, "sentences": [{"index": 17, "src_tokens": [...], "tgt_tokens": [...],
       "layers": [[heads][tgt][src] weights rounded to 3 decimals, one per decoder layer]}]}

  :func:`read_timeline` turns it into one entry per sentence with its weights at every step.
* the machine: what the run wrote about it. The configured device, precision and threads
  (``run_config.json``), the throughput it logged, the lock file of a run in progress (host,
  pid, start time); and the other JSON summaries in the directory (``benchmark.json``,
  ``demo_summary.json``).

Every reader raises :class:`RunRecordsError`, one line naming the fix, for a directory that is
not a run or holds no metrics yet.
"""

from __future__ import annotations

import json
import math
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from transformer.errors import UserError
from transformer.run.layout import ALIGNMENTS_FILE, CONFIG_FILE, LOCK_FILE, METRICS_FILE, RUN_CONFIG_FILE, TOKENIZER_FILES
from transformer.run.metrics import MetricsLog

ALIGNMENT_SCALE = 1000  # alignments.jsonl holds 3 decimals: the page embeds them as integers in thousandths
# JSON files of a run directory that are not summaries of it
_NOT_SUMMARIES = {RUN_CONFIG_FILE, CONFIG_FILE, *TOKENIZER_FILES}


class RunRecordsError(UserError):
    """The directory is not a run, or the run has nothing to report yet (the message names the fix)."""


@dataclass
class RunRecords:
    """Everything ``transformer report`` shows about one run directory."""

    run_dir: Path
    config: dict[str, Any]  # run_config.json
    model: dict[str, Any] | None  # config.json, if written yet
    metrics: list[dict[str, Any]]
    timeline: dict[str, Any] | None  # read_timeline's result; None without alignments.jsonl
    timeline_notes: list[str] = field(default_factory=list)
    machine: list[tuple[str, str]] = field(default_factory=list)
    summaries: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    @property
    def last_step(self) -> int:
        return max(int(r.get("step", 0)) for r in self.metrics)


def read_run(run_dir: str | os.PathLike[str]) -> RunRecords:
    """Read a run directory; :class:`RunRecordsError` when it is not a run or has no metrics yet."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        what = "is not a directory" if run_dir.exists() else "does not exist"
        raise RunRecordsError(f"{run_dir} {what}; give the --run-dir of a `transformer train` run")
    config_path = run_dir / RUN_CONFIG_FILE
    if not config_path.is_file():
        raise RunRecordsError(f"{run_dir} is not a training run (no {RUN_CONFIG_FILE}); give the --run-dir "
                              "of a `transformer train` or `transformer demo` run")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise RunRecordsError(f"{config_path} cannot be read ({err}); give the directory of a complete run") from None
    if not isinstance(config, dict):
        raise RunRecordsError(f"{config_path} is not a run configuration; give the directory of a complete run")
    metrics = [r for r in MetricsLog(run_dir / METRICS_FILE).read()
               if isinstance(r, dict) and r.get("kind") in ("train", "valid") and isinstance(r.get("step"), int)]
    if not metrics:
        every = config.get("train", {}).get("log_every", "train.log_every")
        raise RunRecordsError(f"{run_dir} has no metrics yet ({METRICS_FILE} holds no complete record); the trainer "
                              f"writes one every {every} steps: run the report again after the first")
    model = _read_json(run_dir / CONFIG_FILE)
    timeline, notes = read_timeline(run_dir / ALIGNMENTS_FILE)
    return RunRecords(run_dir=run_dir, config=config, model=model if isinstance(model, dict) else None,
                      metrics=metrics, timeline=timeline, timeline_notes=notes,
                      machine=machine_facts(run_dir, config, metrics), summaries=summaries(run_dir))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------------------------
# The alignment timeline
def read_timeline(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, list[str]]:
    """The snapshots of ``alignments.jsonl`` as one timeline, and notes on what was left out.

    Returns ``(None, [])`` when the file does not exist. Otherwise ``({"scale": 1000, "steps":
    [{"step", "epoch"}, ...], "sentences": [{"index", "src_tokens", "tgt_tokens", "layers", "heads",
    "weights": [per step: [layer][head][tgt][src] integers in thousandths, or None]}]}, notes)``.
    Steps are sorted; a step logged twice keeps its last line. Lines that are not complete JSON
    (the one being written, one cut by a crash) and entries whose shape does not match their tokens
    are left out: the notes count them.
    """
    path = Path(path)
    if not path.is_file():
        return None, []
    by_step: dict[int, dict[str, Any]] = {}
    unreadable = 0
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")  # damaged bytes: a line left out
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines) - 1:  # the last line may be one being written now: not worth a note
                unreadable += 1
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and isinstance(record.get("sentences"), list):
            by_step[record["step"]] = record
        else:
            unreadable += 1
    steps = [by_step[s] for s in sorted(by_step)]
    sentences: dict[int, dict[str, Any]] = {}
    bad = 0
    for k, record in enumerate(steps):
        for entry in record["sentences"]:
            parsed = _sentence(entry)
            if parsed is None:
                bad += 1
                continue
            index, src, tgt, weights = parsed
            known = sentences.setdefault(index, {"index": index, "src_tokens": src, "tgt_tokens": tgt,
                                                 "layers": weights.shape[0], "heads": weights.shape[1],
                                                 "weights": [None] * len(steps)})
            if (known["src_tokens"], known["tgt_tokens"], known["layers"], known["heads"]) != \
                    (src, tgt, weights.shape[0], weights.shape[1]):
                bad += 1  # the same sentence must be followed with the same tokens and model
                continue
            known["weights"][k] = np.rint(weights * ALIGNMENT_SCALE).astype(np.int64).tolist()
    notes = []
    if unreadable:
        notes.append(f"{unreadable} line{'s' if unreadable > 1 else ''} of {path.name} could not be read "
                     "and were left out")
    if bad:
        notes.append(f"{bad} sentence snapshot{'s' if bad > 1 else ''} of {path.name} did not match "
                     "their tokens and were left out")
    if not sentences:
        notes.append(f"{path.name} holds no complete snapshot yet (one is written at each evaluation)")
        return None, notes
    timeline = {"scale": ALIGNMENT_SCALE,
                "steps": [{"step": r["step"], "epoch": r.get("epoch")} for r in steps],
                "sentences": [sentences[i] for i in sorted(sentences)]}
    return timeline, notes


def _sentence(entry: Any) -> tuple[int, list[str], list[str], np.ndarray] | None:
    """``(index, src_tokens, tgt_tokens, weights (layers, heads, tgt, src))`` of one snapshot entry,
    or None when it is not one."""
    if not isinstance(entry, dict) or not isinstance(entry.get("index"), int):
        return None
    src, tgt = entry.get("src_tokens"), entry.get("tgt_tokens")
    if not (_tokens(src) and _tokens(tgt)):
        return None
    try:
        weights = np.asarray(entry.get("layers"), dtype=np.float64)
    except (TypeError, ValueError):  # ragged lists, or not numbers
        return None
    if weights.ndim != 4 or weights.shape[0] < 1 or weights.shape[1] < 1 or weights.shape[2:] != (len(tgt), len(src)):
        return None
    if not np.all(np.isfinite(weights)) or weights.min() < 0 or weights.max() > 1.001:
        return None
    return entry["index"], list(src), list(tgt), weights


def _tokens(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0 and all(isinstance(t, str) for t in value)


# ------------------------------------------------------------------------------------------------
# The machine
def machine_facts(run_dir: Path, config: dict[str, Any], metrics: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(what, value)`` pairs of what the run recorded about where it ran."""
    train = config.get("train", {}) if isinstance(config.get("train"), dict) else {}
    facts = []
    device = train.get("device")
    if device is not None:
        facts.append(("device (configured)", "auto: CUDA when available, else the CPU" if device == "auto" else str(device)))
    if train.get("precision") is not None:
        facts.append(("precision (configured)", str(train["precision"])))
    if "threads" in train:
        facts.append(("CPU threads", "torch's default" if train["threads"] is None else str(train["threads"])))
    rates = sorted(r["tokens_per_s"] for r in metrics if r.get("kind") == "train"
                   and isinstance(r.get("tokens_per_s"), (int, float)) and math.isfinite(r["tokens_per_s"]))
    if rates:
        facts.append(("throughput (median of the log records)", f"{rates[len(rates) // 2]:,.0f} target tokens/s"))
    holder = _read_json(run_dir / LOCK_FILE)  # written by the trainer while it holds the run (transformer.run.lock)
    if isinstance(holder, dict) and {"pid", "host", "started"} <= holder.keys():
        alive = _alive(holder)
        state = {True: "training now", False: "not running (the lock file of a run that was killed)",
                 None: "on another host"}[alive]
        facts.append(("training process", f"pid {holder['pid']} on host {holder['host']}, started {holder['started']}"
                                          f" ({state})"))
    return facts


def summaries(run_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """The other JSON summaries in the run directory (``benchmark.json``, ``demo_summary.json``):
    ``{file name: [(key, value), ...]}``."""
    found = {}
    for path in sorted(run_dir.glob("*.json")):
        summary = _read_json(path) if path.name not in _NOT_SUMMARIES else None
        if isinstance(summary, dict) and (pairs := _scalars(summary)):
            found[path.name] = pairs
    return found


def _alive(holder: dict[str, Any]) -> bool | None:
    """Whether the process named by the lock file runs (None: it ran on another host)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return None
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but is another user's
        return True
    return True


def _scalars(summary: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """The numbers and short strings of a JSON summary, one level of nesting flattened (``precision.train``)."""
    out = []
    for key, value in summary.items():
        if isinstance(value, dict) and not prefix:
            out.extend(_scalars(value, f"{key}."))
        elif isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 120):
            out.append((prefix + str(key), str(value)))
    return out
