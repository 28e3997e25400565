"""Forced decoding: how probable the model finds a given translation of a source.

One teacher-forced pass of the decoder over ``<s> + target`` reads the log-probability the model
gives each of the target's tokens and the ``</s>`` after them: the same numbers the decoder
adds up while it searches, so a given translation's score and the model's own translation's score
are in the same units (``Translator.score_translations`` turns them into a hypothesis's
``score``). A translation a person suggests can then be compared with the model's: a fluent
translation of the source scores near the model's own, a random string or another sentence's
translation far below it.

Scores do not depend on the other pairs of a batch: the source's padding is masked and the
decoder is causal, so the positions after a short target never reach its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from transformer.decoding.common import inference, token_log_probs
from transformer.model import RNNSeq2Seq, Transformer

# Logits of at most this many elements are held at a time (rows x positions x vocabulary): 64 MB in float32.
LOGIT_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class ForcedScore:
    """The model's log-probability of one given target.

    ``log_prob``: the sum over the target's tokens and the ``</s>`` after them (natural log), as
    ``Hypothesis.log_prob``; ``end_log_prob`` is the ``</s>``'s part: how sure the model is that
    the translation ends there (None when it was not scored: see ``complete``). ``steps``: how many were scored (the tokens + 1). ``score``: the value
    the translator ranks its own hypotheses by (``log_prob / lp(steps)`` for beam search, the
    plain ``log_prob`` for greedy search and sampling). ``complete``: False when the target was
    longer than the model's learned positions hold: only its first ``steps`` tokens were scored,
    without ``</s>`` (as the decoder's own output would have been cut there).
    """

    log_prob: float
    steps: int
    score: float
    complete: bool = True
    end_log_prob: float | None = None

    @property
    def mean_log_prob(self) -> float:
        """The log-probability per scored token: comparable across targets of any length."""
        return self.log_prob / self.steps


@inference
def forced_log_probs(model: Transformer | RNNSeq2Seq, sources: Sequence[Sequence[int]],
                     targets: Sequence[Sequence[int]], *, src_pad_id: int, bos_id: int, eos_id: int,
                     device: torch.device | str = "cpu") -> list[tuple[float, int, bool, float | None]]:
    """``(log_prob, steps, complete, end_log_prob)`` of each target given its source (see :class:`ForcedScore`).

    ``sources``: token ids, each with a token the model can read; ``targets``: token ids without
    ``<s>``/``</s>``. Pairs are sorted by length and scored a bounded number of logits at a time."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
    limit = model.config.max_positions if getattr(model.config, "positional", None) == "learned" else None
    order = sorted(range(len(sources)), key=lambda i: (len(targets[i]), len(sources[i])))
    vocab = model.config.tgt_vocab_size
    out: list[tuple[float, int, bool, float | None]] = [(0.0, 0, True, None)] * len(sources)
    start = 0
    while start < len(order):
        # the longest target of a chunk is its last (sorted): as many rows as the logits' budget allows
        end = start + 1
        while end < len(order):
            width = _width(len(targets[order[end]]), limit)
            if (end - start + 1) * width * vocab > LOGIT_ELEMENTS:
                break
            end += 1
        chunk = order[start:end]
        for i, found in zip(chunk, _score_chunk(model, [sources[i] for i in chunk], [targets[i] for i in chunk],
                                                limit, src_pad_id, bos_id, eos_id, torch.device(device))):
            out[i] = found
        start = end
    return out


def _width(tokens: int, limit: int | None) -> int:
    """The positions a target of ``tokens`` tokens is scored at: its tokens and ``</s>``, within ``limit``."""
    return tokens + 1 if limit is None else min(tokens + 1, limit)


def _score_chunk(model, sources: list[Sequence[int]], targets: list[Sequence[int]], limit: int | None,
                 src_pad_id: int, bos_id: int, eos_id: int,
                 device: torch.device) -> list[tuple[float, int, bool, float | None]]:
    rows = len(sources)
    src = torch.full((rows, max(len(s) for s in sources)), src_pad_id, dtype=torch.long)
    mask = torch.zeros_like(src, dtype=torch.bool)
    width = max(_width(len(t), limit) for t in targets)
    tgt = torch.full((rows, width), bos_id, dtype=torch.long)  # <s> + tokens; padding after them (causal)
    gold = torch.full((rows, width), eos_id, dtype=torch.long)  # tokens + </s>
    for row, (s, t) in enumerate(zip(sources, targets)):
        src[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[row, : len(s)] = True
        t = torch.tensor(list(t), dtype=torch.long)[:width]
        tgt[row, 1 : len(t) + 1] = t[: width - 1]
        gold[row, : len(t)] = t
    src, mask, tgt, gold = src.to(device), mask.to(device), tgt.to(device), gold.to(device)
    logits = model.decode(tgt, model.encode(src, mask), mask)  # (rows, width, V)
    picked = token_log_probs(logits).gather(-1, gold.unsqueeze(-1)).squeeze(-1).double().cpu()  # (rows, width)
    found = []
    for row, t in enumerate(targets):
        steps = _width(len(t), limit)
        complete = steps == len(t) + 1
        found.append((float(picked[row, :steps].sum()), steps, complete,
                      float(picked[row, steps - 1]) if complete else None))
    return found
