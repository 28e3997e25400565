"""What the decoders share: ``DecodeConfig``, ``Hypothesis``, length limits and penalties, and
the per-step helpers (``inference``, ``token_log_probs``, ``best_tokens``, ``hypotheses``), used by
greedy search and sampling (``__init__.py``) and beam search (``beam.py``).

Letters: B batch, K beam size, N rows, S source length, T output length, V vocabulary.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from transformer.model import Transformer
from transformer.errors import UserError

STRATEGIES = ("greedy", "beam", "sample")
LENGTH_PENALTIES = ("gnmt", "exponent", "none")
STOPPING = ("exact", "k_finished")
# Small first cache buffers: a reorder copies the whole buffer, so capacity should track the length
# (buffers double as needed). Measured faster than 32+ for beam search on CPU.
CACHE_CAPACITY = 8


def inference(fn: Callable) -> Callable:
    """``torch.inference_mode()``, or ``torch.no_grad()`` when autocast is on.

    Autocast keeps one low-precision copy of each weight for as long as its context lasts, but
    not under inference mode, where every linear layer would cast its fp32 weight again at every
    decoding step (measured: about a sixth of a bf16 beam-search step on CPU). The casts are the
    same either way, so the outputs are too.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        autocast = torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")
        with torch.no_grad() if autocast else torch.inference_mode():
            return fn(*args, **kwargs)

    return wrapper


@dataclass
class Hypothesis:
    """One output sequence.

    ``tokens``: ids without ``<s>``/``</s>``. ``score``: the value hypotheses are ranked by (the
    length-normalised log-probability for beam search, the plain log-probability otherwise).
    ``log_prob``: the model's total log-probability of the tokens, including ``</s>`` when the
    sequence ended with it (defaults to ``score``). ``attention``: ``(L, H, T, S_real)``
    encoder-decoder attention when requested (``T = len(tokens) + 1``). ``unmet``: with
    constraints, the indices of those the tokens do not contain (a sentence that reached its
    length limit first).
    """

    tokens: list[int]
    score: float
    log_prob: float | None = None
    attention: Tensor | None = field(default=None, compare=False, repr=False)
    confidence: float | None = field(default=None, compare=False)  # P(adequate): transformer.translate.calibration
    unmet: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.log_prob is None:
            self.log_prob = float(self.score)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_number(name: str, value: object, ok: Callable[[float], bool], what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
        raise UserError(f"{name} must be {what}, got {value!r}")


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode; defaults are the paper's (6.1): beam 4, alpha 0.6, max length input + 50.

    strategy: "greedy" | "beam" | "sample". n_best: hypotheses returned per sentence (at most
    ``beam_size`` for beam search; independent samples for sampling; 1 for greedy).
    length_penalty: "gnmt" ``((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016), "exponent"
    ``|Y| ** alpha`` or "none"; beam hypotheses are ranked by ``log P(Y) / lp(|Y|)``.
    max_len_a, max_len_b: a sentence stops after ``a * source_length + b`` tokens (never more than
    a learned position table holds).
    temperature, top_k (0 = off), top_p (1 = off), seed: sampling only.
    return_attention: attach the encoder-decoder attention to every hypothesis.
    stopping (beam only): "exact" (default) stops a sentence when no open beam can beat its
    finished hypotheses; "k_finished" stops it once ``beam_size`` hypotheses have finished (the
    rule of fairseq, CTranslate2's default patience 1 and ``generate(early_stopping=True)``):
    faster, and it may miss a longer, better-scoring hypothesis.
    """

    strategy: str = "beam"
    beam_size: int = 4
    n_best: int = 1
    length_penalty: str = "gnmt"
    alpha: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    return_attention: bool = False
    stopping: str = "exact"

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise UserError(f"unknown strategy {self.strategy!r}; choose one of {list(STRATEGIES)}")
        _check_int("beam_size", self.beam_size, 1)
        _check_int("n_best", self.n_best, 1)
        if self.strategy == "beam" and self.n_best > self.beam_size:
            raise UserError(f"n_best ({self.n_best}) cannot exceed beam_size ({self.beam_size})")
        if self.strategy == "greedy" and self.n_best != 1:
            raise UserError(f"greedy decoding gives one hypothesis per sentence; n_best must be 1, got {self.n_best}")
        if self.length_penalty not in LENGTH_PENALTIES:
            raise UserError(f"unknown length_penalty {self.length_penalty!r}; choose one of {list(LENGTH_PENALTIES)}")
        # alpha >= 0 keeps lp non-decreasing in |Y|, which the early-stopping bound relies on.
        _check_number("alpha", self.alpha, lambda x: x >= 0, "a finite number >= 0")
        _check_number("max_len_a", self.max_len_a, lambda x: x >= 0, "a finite number >= 0")
        _check_int("max_len_b", self.max_len_b, 0)
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise UserError("max_len_a and max_len_b are both 0: no output token could be produced")
        _check_number("temperature", self.temperature, lambda x: x > 0, "a finite number > 0")
        _check_int("top_k", self.top_k, 0)
        _check_number("top_p", self.top_p, lambda x: 0 < x <= 1, "in (0, 1]")
        if self.seed is not None:
            _check_int("seed", self.seed, 0)
        if self.stopping not in STOPPING:
            raise UserError(f"unknown stopping {self.stopping!r}; choose one of {list(STOPPING)}")
        if not isinstance(self.return_attention, bool):
            raise UserError(f"return_attention must be a bool, got {self.return_attention!r}")


def max_lengths(src_mask: Tensor, *, max_len_a: float = 1.0, max_len_b: int = 50, cap: int | None = None) -> Tensor:
    """Per-sentence output limits ``a * source_length + b`` (paper 6.1: input length + 50) as ``(B,)``."""
    lengths = (src_mask.sum(dim=1).float() * max_len_a + max_len_b).long()
    return lengths.clamp(max=cap) if cap is not None else lengths


def length_penalty_factor(lengths: Tensor, kind: str = "gnmt", alpha: float = 0.6) -> Tensor:
    """lp(|Y|): GNMT ``((5 + |Y|) / 6) ** alpha``, ``|Y| ** alpha`` ("exponent") or 1 ("none")."""
    lengths = lengths.double()
    if kind == "gnmt":
        return ((5.0 + lengths) / 6.0) ** alpha
    if kind == "exponent":
        return lengths**alpha
    if kind == "none":
        return torch.ones_like(lengths)
    raise UserError(f"unknown length_penalty {kind!r}; choose one of {list(LENGTH_PENALTIES)}")


def token_log_probs(logits: Tensor) -> Tensor:
    """log_softmax in float32 (float64 stays float64), whatever the autocast dtype of the logits.

    Low-precision logits are widened inside the kernel (no float32 copy is made first).
    """
    return logits.log_softmax(-1, dtype=score_dtype(logits))


def score_dtype(logits: Tensor) -> torch.dtype:
    """The dtype scores accumulate in: float64 for float64 logits, float32 for any other."""
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


# Rows of CPU logits turned into log-probabilities at a time by ``best_tokens``: a chunk's float32
# log-probabilities (64 x V) stay in the CPU's cache instead of a fresh (N, V) matrix per step. Other
# devices take all rows at once: there each chunk would cost kernel launches, not cache misses.
_ROWS_PER_CHUNK = 64


def best_tokens(model: Transformer, logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` most probable tokens of each row of ``(N, V)`` logits: ``(log-probs (N, k), ids (N, k))``.

    ``k == 1`` takes ``argmax`` (the first of equal maxima). Computed a few rows at a time, or by
    the model's own ``best_tokens`` where it has one that applies (a model prepared by
    ``transformer.cpu.prepare_for_decoding``: one compiled pass per row).
    """
    fast = getattr(model, "best_tokens", None)
    if fast is not None and (found := fast(logits, k)) is not None:
        return found
    values, ids = [], []
    for chunk in logits.split(_ROWS_PER_CHUNK) if logits.device.type == "cpu" else (logits,):
        log_probs = token_log_probs(chunk)
        if k == 1:
            best = log_probs.argmax(dim=-1, keepdim=True)
            values.append(log_probs.gather(1, best))
            ids.append(best)
        else:
            top = log_probs.topk(k, dim=-1)
            values.append(top.values)
            ids.append(top.indices)
    return torch.cat(values), torch.cat(ids)


def hypotheses(tokens: list[list[int]], steps: list[int], scores: list[float], log_probs: list[float],
               eos_id: int) -> list[Hypothesis]:
    """Rows of a token buffer cut to their length, a final ``</s>`` dropped.

    Args:
        tokens: one row of token ids per hypothesis (``</s>`` as padding after its end).
        steps: each row's length, ``</s>`` included when it ended with it.
        scores, log_probs: each row's ``Hypothesis.score`` and ``Hypothesis.log_prob``.
        eos_id: the id of ``</s>``.

    Returns:
        one ``Hypothesis`` per row.
    """
    out = []
    for row, n, s, lp in zip(tokens, steps, scores, log_probs):
        row = row[:n]
        if row and row[-1] == eos_id:
            row = row[:-1]
        out.append(Hypothesis(row, s, lp))
    return out


def output_limits(model: Transformer, src_mask: Tensor, max_len_a: float, max_len_b: int) -> Tensor:
    """``max_lengths`` (at least 1), capped by a learned position table: step t reads position t."""
    cfg = getattr(model, "config", None)
    cap = cfg.max_positions if cfg is not None and getattr(cfg, "positional", None) == "learned" else None
    return max_lengths(src_mask, max_len_a=max_len_a, max_len_b=max_len_b, cap=cap).clamp(min=1)
