"""Decoding: turning a trained model into output sequences (paper section 3 and 6.1).

Inference is autoregressive: start from ``<s>``, feed each predicted token back in, stop at
``</s>`` or at the maximum length (the paper uses source length + 50). Decoders live outside
the model and use only ``model.encode`` and ``model.decode`` with the decoder cache.

Letters: B batch, S source length, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from transformer.model import Transformer


@dataclass
class Hypothesis:
    """One output sequence: token ids (no ``<s>``/``</s>``) and its total log-probability."""

    tokens: list[int]
    score: float


def max_lengths(src_mask: Tensor, *, max_len_a: float = 1.0, max_len_b: int = 50, cap: int | None = None) -> Tensor:
    """Per-sentence output limits ``a * source_length + b`` (paper 6.1: input length + 50) as ``(B,)``."""
    lengths = (src_mask.sum(dim=1).float() * max_len_a + max_len_b).long()
    return lengths.clamp(max=cap) if cap is not None else lengths


@torch.inference_mode()
def greedy_search(
    model: Transformer,
    src: Tensor,
    src_mask: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> list[Hypothesis]:
    """Pick the most probable token at every step, for a whole batch at once.

    Args:
        src: ``(B, S)`` source ids; src_mask: ``(B, S)`` bool, True = real token.
        bos_id / eos_id: the tokenizer's start and end ids.
        max_len_a, max_len_b: a sentence stops after ``a * source_length + b`` tokens.

    Returns:
        one ``Hypothesis`` per sentence, in input order.
    """
    B = src.shape[0]
    memory = model.encode(src, src_mask)  # (B, S, E)
    limits = max_lengths(src_mask, max_len_a=max_len_a, max_len_b=max_len_b)  # (B,)
    cache = model.new_cache(initial_capacity=min(int(limits.max()) + 1, 256))
    token = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    scores = torch.zeros(B, dtype=torch.float32, device=src.device)
    steps: list[Tensor] = []
    for t in range(int(limits.max())):
        log_probs = model.decode(token, memory, src_mask, cache=cache)[:, -1].float().log_softmax(-1)  # (B, V)
        best_lp, best = log_probs.max(dim=-1)  # (B,)
        best = best.masked_fill(finished, eos_id)
        scores += best_lp.masked_fill(finished, 0.0)
        steps.append(best)
        finished |= (best == eos_id) | (t + 1 >= limits)
        if bool(finished.all()):
            break
        token = best.unsqueeze(1)
    out = torch.stack(steps, dim=1).tolist() if steps else [[] for _ in range(B)]
    return [Hypothesis(_until_eos(row, eos_id), float(s)) for row, s in zip(out, scores.tolist())]


def _until_eos(tokens: list[int], eos_id: int) -> list[int]:
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens
