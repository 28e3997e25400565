"""Alignment snapshots: the cross-attention of a few fixed validation sentences at each evaluation.

The sentences are chosen once, deterministically, from the validation data
(:func:`choose_sentences`), so they are the same at every evaluation and after a resume; their
snapshots go to the run's ``alignments.jsonl`` (its format: :mod:`transformer.run.alignments`).

The weights come from one teacher-forced pass on the *reference* translation (the model's
explicit attention path, ``attention_maps``, in eval mode without gradients), so every snapshot
has the same rows and columns and a slider over steps compares like with like: attention going
from uniform to the word alignment as the model learns. ``transformer report`` draws them;
the same weights feed the TensorBoard images (:mod:`transformer.training.tensorboard_log`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from transformer.data import make_batch
from transformer.data.filtering import Example
from transformer.run.alignments import DECIMALS, append_alignments, truncate_alignments
from transformer.run.layout import ALIGNMENTS_FILE
from transformer.text import Vocabularies
from transformer.text.pieces import TokenAxis

# Tokens on each side of a chosen pair: long enough to show an alignment, short enough to read as a heatmap.
SHORTEST, LONGEST = 5, 20


@dataclass
class Alignment:
    """The cross-attention of one validation pair, teacher-forced on its reference."""

    index: int  # position among the run's validation pairs
    source: str  # the pair as text (figure titles)
    reference: str
    src_tokens: TokenAxis
    tgt_tokens: TokenAxis  # the reference pieces, then </s>
    weights: np.ndarray  # float32 (decoder layers, heads, len(tgt_tokens), len(src_tokens))

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "src_tokens": self.src_tokens.labels, "tgt_tokens": self.tgt_tokens.labels,
                "layers": np.round(self.weights.astype(np.float64), DECIMALS).tolist()}


def choose_sentences(valid: Sequence[Example], n: int) -> list[int]:
    """Indices of ``n`` validation pairs to follow through training, the same for the same data.

    Evenly spread over the pairs whose sides both have ``SHORTEST..LONGEST`` tokens (so they vary
    in length and content); when fewer than ``n`` pairs qualify, the ``n`` shortest pairs.
    """
    if n <= 0 or not valid:
        return []
    fits = [i for i, (src, tgt) in enumerate(valid) if SHORTEST <= len(src) <= LONGEST and SHORTEST <= len(tgt) <= LONGEST]
    if len(fits) < n:
        return sorted(sorted(range(len(valid)), key=lambda i: (max(len(valid[i][0]), len(valid[i][1])), i))[:n])
    return [fits[(2 * k + 1) * len(fits) // (2 * n)] for k in range(n)]


class AlignmentLog:
    """Computes the snapshots of the chosen sentences and appends them to ``alignments.jsonl``.

    ``examples`` are the run's validation pairs as token ids and ``texts`` the same pairs as text.
    With ``n == 0``, no validation pairs, or ``write=False`` (a DDP rank other than 0) it writes
    nothing; :meth:`snapshot` still works where sentences were chosen.
    """

    def __init__(self, path: str | os.PathLike[str], examples: Sequence[Example], texts: Sequence[tuple[str, str]],
                 vocab: Vocabularies, n: int, *, write: bool = True) -> None:
        self.path = Path(path)
        self.vocab = vocab
        self.write_enabled = write
        self.indices = choose_sentences(examples, n)
        # plain ints: the pairs may be views of a memory-mapped corpus
        self.examples = [([int(t) for t in examples[i][0]], [int(t) for t in examples[i][1]]) for i in self.indices]
        self.texts = [texts[i] if i < len(texts) else ("", "") for i in self.indices]
        self.logged_steps: set[int] = set()

    @classmethod
    def for_run(cls, run_dir: str | os.PathLike[str], data: Any, n: int, *, after_step: int,
                write: bool = True) -> AlignmentLog:
        """The log of a run directory, resumed at ``after_step``: lines past it (work the resumed run
        redoes) and a line cut short by a crash are dropped first."""
        log = cls(Path(run_dir) / ALIGNMENTS_FILE, data.valid, data.valid_text, data.vocab, n, write=write)
        if write:
            log.truncate_after(after_step)
        return log

    @property
    def enabled(self) -> bool:
        return bool(self.indices)

    # ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def snapshot(self, model: torch.nn.Module) -> list[Alignment]:
        """The chosen pairs' cross-attention now, from one teacher-forced pass in eval mode."""
        if not self.indices:
            return []
        v = self.vocab
        batch = make_batch(self.examples, pad_id=v.src.pad_id, bos_id=v.tgt.bos_id, eos_id=v.tgt.eos_id)
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()  # no dropout: the weights the model would use to translate
        try:
            maps = model.attention_maps(batch.src.to(device), batch.tgt_in.to(device),  # type: ignore[operator]
                                        batch.src_mask.to(device))
        finally:
            model.train(was_training)
        cross = torch.stack([w.float() for w in maps.cross], dim=1).cpu().numpy()  # (B, layers, heads, T, S)
        out = []
        for row, (index, (src, tgt), (source, reference)) in enumerate(zip(self.indices, self.examples, self.texts)):
            tgt_out = [*tgt, v.tgt.eos_id]
            out.append(Alignment(
                index=index, source=source, reference=reference,
                src_tokens=TokenAxis.from_pieces(v.src.pieces(list(src))),
                tgt_tokens=TokenAxis.from_pieces(v.tgt.pieces(tgt_out)),
                weights=cross[row, :, :, : len(tgt_out), : len(src)],  # padding cut off (its columns hold 0)
            ))
        return out

    def write(self, step: int, epoch: int, alignments: list[Alignment]) -> bool:
        """Append the snapshot of ``step`` as one line (once per step); False when nothing was written."""
        if not (self.write_enabled and alignments) or step in self.logged_steps:
            return False
        append_alignments(self.path, {"step": step, "epoch": epoch, "sentences": [a.to_dict() for a in alignments]})
        self.logged_steps.add(step)
        return True

    # ------------------------------------------------------------------------------------------
    def truncate_after(self, step: int) -> None:
        """Keep the complete lines of steps up to ``step`` (rewritten through a temporary file)."""
        if self.path.exists():
            self.logged_steps = truncate_alignments(self.path, step)
