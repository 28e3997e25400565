"""A run's alignment snapshots: ``alignments.jsonl``, one line per evaluation.

At every evaluation the trainer appends one JSON line to ``RUN_DIR/alignments.jsonl``::

    {"step": 600, "epoch": 2, "sentences": [
        {"index": 17, "src_tokens": ["je", "suis", ...], "tgt_tokens": ["I", "am", ..., "</s>"],
         "layers": [[[[0.912, 0.041, ...], ...], ...], ...]}, ...]}

* ``index``: the pair's position in the run's validation pairs (after filtering), the same at
  every evaluation and after a resume: the sentences are chosen once, deterministically, from the
  validation data (:func:`transformer.training.alignment_log.choose_sentences`).
* ``src_tokens``: the source pieces the encoder reads (no ``<s>``/``</s>``), ``tgt_tokens``: the
  reference pieces the decoder predicts, ending with ``</s>``; both as the attention page labels
  them (``▁`` removed, ``·`` before a piece that continues a word).
* ``layers``: one entry per decoder layer, ``[heads][tgt][src]``: row ``i`` is where the decoder
  looked while predicting ``tgt_tokens[i]``; each row sums to 1 (weights rounded to 3 decimals).

Each line is written whole in one ``write`` (a reader never sees half of one); a line cut short
by a crash is skipped when read, and a resumed run first drops the lines past its checkpoint.
How the sentences are chosen and their weights computed is the trainer's
(:mod:`transformer.training.alignment_log`); ``transformer report`` draws them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from transformer.run_files import RunFileError, parse_json, read_text, write_atomic

DECIMALS = 3  # the weights are rounded to this many decimals


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def append_alignments(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Append ``record`` (``{"step", "epoch", "sentences"}``) to ``path`` as one line."""
    with Path(path).open("a", encoding="utf-8") as f:  # one write of a whole line: a reader never sees half
        f.write(_line(record))
        f.flush()


def read_alignments(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The snapshots of an ``alignments.jsonl``, in order; a line cut short by a crash is skipped."""
    records = []
    for line in read_text(path, errors="replace").splitlines():  # a regular file under a size cap
        try:
            record = parse_json(line, where=str(path))
        except RunFileError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
    return records


def truncate_alignments(path: str | os.PathLike[str], step: int) -> set[int]:
    """Keep the complete lines of steps up to ``step`` (rewritten through a temporary file);
    returns their steps (none when ``path`` does not exist)."""
    path = Path(path)
    if not path.exists():
        return set()
    kept = [r for r in read_alignments(path) if r["step"] <= step]
    write_atomic(path, "".join(_line(r) for r in kept))
    return {r["step"] for r in kept}
