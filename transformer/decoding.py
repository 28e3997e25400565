"""Decoding: turning a trained model into output sequences (paper sections 3 and 6.1).

Inference is autoregressive: start from ``<s>``, feed each predicted token back in, stop at
``</s>`` or at the maximum length. Paper 6.1: "we used beam search with a beam size of 4 and
length penalty alpha = 0.6 ... We set the maximum output length during inference to input
length + 50, but terminate early when possible." The decoders here live outside the model and
use only ``model.encode`` and ``model.decode`` with the decoder cache:

* ``greedy_search``: the most probable token at every step.
* ``beam_search``: batched over sentences and beams, GNMT length penalty, exact early stopping.
* ``sample``: ancestral sampling with temperature, top-k and nucleus (top-p) filtering.
* ``decode``: dispatch on a ``DecodeConfig``, optionally attaching encoder-decoder attention.

All of them run sentences that are finished out of the batch (rows are dropped from the cache),
accumulate scores in float32 (float64 for a float64 model) and work with bf16 weights or
under bf16 autocast.

Letters: B batch, K beam size, N rows (sentences x beams or samples), S source length,
T output length, V vocabulary, L decoder layers, H heads.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from transformer.model import Transformer

STRATEGIES = ("greedy", "beam", "sample")
LENGTH_PENALTIES = ("gnmt", "exponent", "none")
STOPPING = ("exact", "k_finished")
# Small first cache buffers: a reorder copies the whole buffer, so capacity should track the length
# (buffers double as needed). Measured faster than 32+ for beam search on CPU.
_CACHE_CAPACITY = 8


def _inference(fn: Callable) -> Callable:
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
    encoder-decoder attention when requested (``T = len(tokens) + 1``).
    """

    tokens: list[int]
    score: float
    log_prob: float | None = None
    attention: Tensor | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.log_prob is None:
            self.log_prob = float(self.score)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_number(name: str, value: object, ok: Callable[[float], bool], what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{name} must be {what}, got {value!r}")


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
            raise ValueError(f"unknown strategy {self.strategy!r}; choose one of {list(STRATEGIES)}")
        _check_int("beam_size", self.beam_size, 1)
        _check_int("n_best", self.n_best, 1)
        if self.strategy == "beam" and self.n_best > self.beam_size:
            raise ValueError(f"n_best ({self.n_best}) cannot exceed beam_size ({self.beam_size})")
        if self.strategy == "greedy" and self.n_best != 1:
            raise ValueError(f"greedy decoding gives one hypothesis per sentence; n_best must be 1, got {self.n_best}")
        if self.length_penalty not in LENGTH_PENALTIES:
            raise ValueError(f"unknown length_penalty {self.length_penalty!r}; choose one of {list(LENGTH_PENALTIES)}")
        # alpha >= 0 keeps lp non-decreasing in |Y|, which the early-stopping bound relies on.
        _check_number("alpha", self.alpha, lambda x: x >= 0, "a finite number >= 0")
        _check_number("max_len_a", self.max_len_a, lambda x: x >= 0, "a finite number >= 0")
        _check_int("max_len_b", self.max_len_b, 0)
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise ValueError("max_len_a and max_len_b are both 0: no output token could be produced")
        _check_number("temperature", self.temperature, lambda x: x > 0, "a finite number > 0")
        _check_int("top_k", self.top_k, 0)
        _check_number("top_p", self.top_p, lambda x: 0 < x <= 1, "in (0, 1]")
        if self.seed is not None:
            _check_int("seed", self.seed, 0)
        if self.stopping not in STOPPING:
            raise ValueError(f"unknown stopping {self.stopping!r}; choose one of {list(STOPPING)}")
        if not isinstance(self.return_attention, bool):
            raise ValueError(f"return_attention must be a bool, got {self.return_attention!r}")


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
    raise ValueError(f"unknown length_penalty {kind!r}; choose one of {list(LENGTH_PENALTIES)}")


def _log_probs(logits: Tensor) -> Tensor:
    """log_softmax in float32 (float64 stays float64), whatever the autocast dtype of the logits.

    Low-precision logits are widened inside the kernel (no float32 copy is made first).
    """
    return logits.log_softmax(-1, dtype=_score_dtype(logits))


def _score_dtype(logits: Tensor) -> torch.dtype:
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


# Rows of logits turned into log-probabilities at a time by ``_best_tokens``: a chunk's float32
# log-probabilities (64 x V) stay in the CPU's cache instead of a fresh (N, V) matrix per step.
_ROWS_PER_CHUNK = 64


def _best_tokens(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` most probable tokens of each row of ``(N, V)`` logits: ``(log-probs (N, k), ids (N, k))``.

    ``k == 1`` takes ``argmax`` (the first of equal maxima). Computed a few rows at a time.
    """
    values, ids = [], []
    for chunk in logits.split(_ROWS_PER_CHUNK):
        log_probs = _log_probs(chunk)
        if k == 1:
            best = log_probs.argmax(dim=-1, keepdim=True)
            values.append(log_probs.gather(1, best))
            ids.append(best)
        else:
            top = log_probs.topk(k, dim=-1)
            values.append(top.values)
            ids.append(top.indices)
    return torch.cat(values), torch.cat(ids)


def _hypotheses(tokens: list[list[int]], steps: list[int], scores: list[float], log_probs: list[float],
                eos_id: int) -> list[Hypothesis]:
    """Rows of a token buffer cut to their length, a final ``</s>`` dropped."""
    out = []
    for row, n, s, lp in zip(tokens, steps, scores, log_probs):
        row = row[:n]
        if row and row[-1] == eos_id:
            row = row[:-1]
        out.append(Hypothesis(row, s, lp))
    return out


# ---------------------------------------------------------------------------------------------
# Greedy search and sampling: one token per row and step.


def _ancestral(model: Transformer, memory: Tensor, src_mask: Tensor, limits: Tensor, *, bos_id: int, eos_id: int,
               pick: Callable[[Tensor], Tensor] | None) -> list[Hypothesis]:
    """Extend every row by ``pick(log_probs (N, V)) -> (N,)`` (None: the most probable token) until
    ``</s>`` or its limit; finished rows leave."""
    N, dev = memory.shape[0], memory.device
    T = int(limits.max())
    cache = model.new_cache(initial_capacity=_CACHE_CAPACITY)
    rows = torch.arange(N, device=dev)  # (n,) original row of each active row
    lim, mem, mask = limits, memory, src_mask
    out_tok = torch.full((N, T), eos_id, dtype=torch.long, device=dev)  # (N, T)
    out_steps = torch.zeros(N, dtype=torch.long, device=dev)
    token = torch.full((N, 1), bos_id, dtype=torch.long, device=dev)
    out_lp = score = None
    for t in range(T):
        logits = model.decode(token, mem, mask, cache=cache)[:, -1]  # (n, V)
        if pick is None:  # greedy
            step_lp, nxt = (x.squeeze(1) for x in _best_tokens(logits, 1))  # (n,)
        else:
            log_probs = _log_probs(logits)
            nxt = pick(log_probs)  # (n,)
            step_lp = log_probs.gather(1, nxt.unsqueeze(1)).squeeze(1)  # (n,)
        if score is None:
            score, out_lp = step_lp, torch.zeros(N, dtype=step_lp.dtype, device=dev)
        else:
            score = score + step_lp
        out_tok[rows, t] = nxt
        fin = (nxt == eos_id) | (t + 1 >= lim)  # (n,)
        if bool(fin.any()):  # the one host sync per step
            out_lp[rows[fin]] = score[fin]
            out_steps[rows[fin]] = t + 1
            keep = (~fin).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            rows, lim, score, nxt = rows[keep], lim[keep], score[keep], nxt[keep]
            cache.reorder(keep)
            mem, mask = mem.index_select(0, keep), mask.index_select(0, keep)
        token = nxt.unsqueeze(1)
    lps = out_lp.tolist() if out_lp is not None else [0.0] * N
    return _hypotheses(out_tok.tolist(), out_steps.tolist(), lps, lps, eos_id)


def _limits(model: Transformer, src_mask: Tensor, max_len_a: float, max_len_b: int) -> Tensor:
    """``max_lengths`` (at least 1), capped by a learned position table: step t reads position t."""
    cfg = getattr(model, "config", None)
    cap = cfg.max_positions if cfg is not None and getattr(cfg, "positional", None) == "learned" else None
    return max_lengths(src_mask, max_len_a=max_len_a, max_len_b=max_len_b, cap=cap).clamp(min=1)


@_inference
def greedy_search(model: Transformer, src: Tensor, src_mask: Tensor, *, bos_id: int, eos_id: int,
                  max_len_a: float = 1.0, max_len_b: int = 50) -> list[Hypothesis]:
    """Pick the most probable token at every step, for a whole batch at once.

    Args:
        src: ``(B, S)`` source ids; src_mask: ``(B, S)`` bool, True = real token.
        bos_id / eos_id: the tokenizer's start and end ids.
        max_len_a, max_len_b: a sentence stops after ``a * source_length + b`` tokens.

    Returns:
        one ``Hypothesis`` per sentence, in input order; ``score == log_prob``.
    """
    DecodeConfig("greedy", max_len_a=max_len_a, max_len_b=max_len_b)
    limits = _limits(model, src_mask, max_len_a, max_len_b)  # (B,)
    return _ancestral(model, model.encode(src, src_mask), src_mask, limits, bos_id=bos_id, eos_id=eos_id, pick=None)


@_inference
def sample(model: Transformer, src: Tensor, src_mask: Tensor, *, bos_id: int, eos_id: int,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, n: int = 1, seed: int | None = None,
           max_len_a: float = 1.0, max_len_b: int = 50) -> list[list[Hypothesis]]:
    """Ancestral sampling: ``n`` independent samples per sentence, drawn in one batch.

    Each step samples from ``softmax(log_probs / temperature)`` restricted to the ``top_k`` most
    probable tokens (0 = all) and to the smallest set whose probability reaches ``top_p``
    (nucleus sampling, Holtzman et al. 2020). Randomness comes from a private
    ``torch.Generator`` seeded with ``seed`` (None: a fresh random seed); the global RNG is
    never used. ``score`` and ``log_prob`` are the model's log-probability of the sample
    (temperature 1, unfiltered). Samples are returned best score first.
    """
    DecodeConfig("sample", n_best=n, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                 max_len_a=max_len_a, max_len_b=max_len_b)
    B = src.shape[0]
    gen = torch.Generator(device=src.device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)

    def pick(log_probs: Tensor) -> Tensor:  # (n, V) -> (n,)
        x = log_probs / temperature
        if top_k and top_k < x.shape[-1]:
            kth = x.topk(top_k, dim=-1).values[:, -1:]  # (n, 1)
            x = x.masked_fill(x < kth, -math.inf)
        if top_p < 1.0:
            sorted_x, order = x.sort(dim=-1, descending=True)
            p = sorted_x.softmax(-1)
            before = p.cumsum(-1) - p  # probability mass of the more probable tokens; 0 for the first
            x = torch.full_like(x, -math.inf).scatter(1, order, sorted_x.masked_fill(before >= top_p, -math.inf))
        return torch.multinomial(x.softmax(-1), 1, generator=gen).squeeze(1)

    rows = torch.arange(B, device=src.device).repeat_interleave(n)  # (B*n,)
    memory = model.encode(src, src_mask).index_select(0, rows)  # (B*n, S, E)
    mask = src_mask.index_select(0, rows)
    hyps = _ancestral(model, memory, mask, _limits(model, mask, max_len_a, max_len_b), bos_id=bos_id, eos_id=eos_id,
                      pick=pick)
    return [sorted(hyps[b * n : (b + 1) * n], key=lambda h: -h.score) for b in range(B)]


# ---------------------------------------------------------------------------------------------
# Beam search.


def _merge(store: list[Tensor], new: list[Tensor], n_best: int) -> list[Tensor]:
    """Keep the ``n_best`` best of kept + new finished hypotheses; on ties the kept ones win.

    ``store``/``new``: [normalised score (n, m), log-prob (n, m), steps (n, m), tokens (n, m, T)].
    """
    scores = torch.cat([store[0], new[0]], dim=1)  # (n, n_best + K)
    order = scores.sort(dim=1, descending=True, stable=True).indices[:, :n_best]  # (n, n_best)
    out = []
    for kept, add in zip(store, new):
        both = torch.cat([kept, add], dim=1)
        index = order if both.dim() == 2 else order.unsqueeze(2).expand(-1, -1, both.shape[2])
        out.append(both.gather(1, index))
    return out


@_inference
def beam_search(model: Transformer, src: Tensor, src_mask: Tensor, *, bos_id: int, eos_id: int,
                beam_size: int = 4, n_best: int = 1, length_penalty: str = "gnmt", alpha: float = 0.6,
                max_len_a: float = 1.0, max_len_b: int = 50, stopping: str = "exact",
                _early_stop: bool = True) -> list[list[Hypothesis]]:
    """Beam search over all sentences and beams at once (paper 6.1: beam 4, alpha 0.6).

    Each step scores the ``N = n * K`` open beams of the ``n`` unfinished sentences in one
    ``decode`` call, adds each beam's running log-probability, and takes the top ``2K`` of the
    ``K * V`` candidates per sentence. Candidates ending in ``</s>`` among the first ``K``
    finish (all first ``K`` do at the sentence's maximum length); the best ``K`` others stay
    open, and the cache follows them with one ``reorder(index)``.

    Ranking: ``score = log P(Y) / lp(|Y|)``, with ``|Y|`` the number of predicted tokens
    including ``</s>`` (equal to the token count for a hypothesis cut at the maximum length).
    Each sentence keeps its ``n_best`` best finished hypotheses.

    Early stopping ("terminate early when possible") is exact: a continuation of an open beam
    with log-prob ``s`` has log-prob ``<= s <= 0`` and length ``<= max_len``, and lp is
    non-decreasing (alpha >= 0), so its score is ``<= s / lp(max_len)``. A sentence stops
    when it holds ``n_best`` finished hypotheses and the worst of them is ``>=`` that bound
    for its best open beam (ties keep the earlier hypothesis, so results never change).
    ``stopping="k_finished"`` instead stops a sentence as soon as ``beam_size`` hypotheses have
    finished (counted over all steps), the common cheaper rule.

    Returns:
        per sentence, ``n_best`` hypotheses, best first; ``score`` normalised, ``log_prob`` raw.
    """
    DecodeConfig("beam", beam_size=beam_size, n_best=n_best, length_penalty=length_penalty, alpha=alpha,
                 max_len_a=max_len_a, max_len_b=max_len_b, stopping=stopping)
    K, dev = beam_size, src.device
    B = src.shape[0]
    memory = model.encode(src, src_mask)  # (B, S, E)
    limits = _limits(model, src_mask, max_len_a, max_len_b)  # (B,)
    T = int(limits.max())
    cache = model.new_cache(initial_capacity=_CACHE_CAPACITY)
    sent = torch.arange(B, device=dev)  # (n,) original index of each open sentence
    lim, mem, mask = limits, memory, src_mask
    token = torch.full((B, 1), bos_id, dtype=torch.long, device=dev)  # (N, 1)
    hist = torch.full((B, T), eos_id, dtype=torch.long, device=dev)  # (N, T) tokens of the open beams
    arange_2k = torch.arange(2 * K, device=dev)
    grouped = getattr(model, "supports_grouped_memory", False)  # beams can share their sentence's memory row
    for t in range(T):
        logits = model.decode(token, mem, mask, cache=cache)[:, -1]  # (N, V)
        n, V = sent.numel(), logits.shape[-1]
        if t == 0:
            if V <= K:
                raise ValueError(f"beam_size ({K}) must be smaller than the vocabulary ({V})")
            dt = _score_dtype(logits)
            alive = torch.zeros(B, 1, dtype=dt, device=dev)  # (n, k) running log-probs; one beam at first
            lp = length_penalty_factor(torch.arange(T + 1, device=dev), length_penalty, alpha).to(dt)  # (T + 1,)
            lp_max = lp[lim]  # (n,) lp(max_len), the denominator of the early-stopping bound
            store = [torch.full((B, n_best), -math.inf, dtype=dt, device=dev),
                     torch.zeros(B, n_best, dtype=dt, device=dev),
                     torch.zeros(B, n_best, dtype=torch.long, device=dev),
                     torch.full((B, n_best, T), eos_id, dtype=torch.long, device=dev)]
            out = [x.clone() for x in store]  # results by original sentence index
            n_finished = torch.zeros(B, dtype=torch.long, device=dev)  # hypotheses finished so far
        k = alive.shape[1]
        # A sentence's 2K best candidates are among the 2K best tokens of each of its beams, so
        # only those are added to the beams' scores: (n, k * w) candidates instead of (n, k * V).
        w = min(2 * K, V)
        row_s, row_tok = _best_tokens(logits, w)  # (N, w)
        cand = (alive.unsqueeze(2) + row_s.view(n, k, w)).view(n, k * w)
        top_s, top_i = cand.topk(min(2 * K, k * w), dim=1)  # (n, 2K), best first
        top_tok = row_tok.view(n, k * w).gather(1, top_i)  # (n, 2K)
        parents = top_i // w + (torch.arange(n, device=dev) * k).unsqueeze(1)  # (n, 2K) rows of the cache
        is_eos = top_tok == eos_id
        last = t + 1 >= lim  # (n,) reached the maximum length
        fin = is_eos[:, :K] | last.unsqueeze(1)  # (n, K)
        if dev.type != "cpu" or bool(fin.any()):  # skip the bookkeeping on CPU, the sync on accelerators
            fin_tok = hist.index_select(0, parents[:, :K].flatten()).view(n, K, T)  # (n, K, T)
            fin_tok[:, :, t] = top_tok[:, :K]
            norm = (top_s[:, :K] / lp[t + 1]).masked_fill(~fin, -math.inf)  # (n, K)
            steps = torch.full((n, K), t + 1, dtype=torch.long, device=dev)
            store = _merge(store, [norm, top_s[:, :K], steps, fin_tok], n_best)
        # Open beams: the K best candidates that did not emit </s> (stable rank order).
        order = (is_eos.long() * is_eos.shape[1] + arange_2k[: is_eos.shape[1]]).argsort(dim=1)[:, :K]  # (n, K)
        alive = top_s.gather(1, order)  # (n, K), best first
        index = parents.gather(1, order).flatten()  # (N,)
        nxt = top_tok.gather(1, order).flatten()  # (N,)
        done = last
        if stopping == "k_finished":
            n_finished = n_finished + fin.sum(dim=1)
            done = done | (n_finished >= K)
        elif _early_stop:
            done = done | (store[0][:, -1] >= alive[:, 0] / lp_max)
        keep = None
        if bool(done.any()):  # the stopping check: one host sync per step
            finished = done.nonzero().squeeze(1)
            for o, s in zip(out, store):
                o[sent[finished]] = s[finished]
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            sent, lim, lp_max, alive, n_finished = sent[keep], lim[keep], lp_max[keep], alive[keep], n_finished[keep]
            store = [s[keep] for s in store]
            index, nxt = index.view(n, K)[keep].flatten(), nxt.view(n, K)[keep].flatten()
        if grouped and keep is not None:  # one memory row per open sentence, shared by its K beams
            mem, mask = memory.index_select(0, sent), src_mask.index_select(0, sent)
            cache.reorder(index, memory_index=keep)
        elif not grouped and (t == 0 or keep is not None):  # rows now belong to other sentences
            rows = sent.repeat_interleave(K)  # (N,)
            mem, mask = memory.index_select(0, rows), src_mask.index_select(0, rows)
            cache.reorder(index)
        else:  # beams move only within their sentence, whose cross-attention keys/values are shared
            _reorder_self_attention(cache, index)
        hist = hist.index_select(0, index)
        hist[:, t] = nxt
        token = nxt.unsqueeze(1)
    scores, log_p, steps, tokens = (x.tolist() for x in out)
    return [_hypotheses(tokens[b], steps[b], scores[b], log_p[b], eos_id) for b in range(B)]


def _reorder_self_attention(cache, index: Tensor) -> None:
    """``cache.reorder(index)`` for the growing self-attention caches only (falls back to all)."""
    layers = getattr(cache, "self_attn", None)
    if layers is None:
        cache.reorder(index)
        return
    for layer in layers:
        layer.reorder(index)


# ---------------------------------------------------------------------------------------------


@_inference
def decode(model: Transformer, src: Tensor, src_mask: Tensor, cfg: DecodeConfig, *, bos_id: int,
           eos_id: int) -> list[list[Hypothesis]]:
    """Decode a batch with ``cfg``: per sentence a best-first list of hypotheses (1 for greedy)."""
    lengths = dict(max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b)
    if cfg.strategy == "greedy":
        results = [[h] for h in greedy_search(model, src, src_mask, bos_id=bos_id, eos_id=eos_id, **lengths)]
    elif cfg.strategy == "beam":
        results = beam_search(model, src, src_mask, bos_id=bos_id, eos_id=eos_id, beam_size=cfg.beam_size,
                              n_best=cfg.n_best, length_penalty=cfg.length_penalty, alpha=cfg.alpha,
                              stopping=cfg.stopping, **lengths)
    else:
        results = sample(model, src, src_mask, bos_id=bos_id, eos_id=eos_id, temperature=cfg.temperature,
                         top_k=cfg.top_k, top_p=cfg.top_p, n=cfg.n_best, seed=cfg.seed, **lengths)
    if cfg.return_attention:
        attach_attention(model, src, src_mask, results, bos_id=bos_id)
    return results


@_inference
def attach_attention(model: Transformer, src: Tensor, src_mask: Tensor, results: list[list[Hypothesis]], *,
                     bos_id: int) -> None:
    """Set ``h.attention`` ``(L, H, len(tokens) + 1, S_real)`` for every hypothesis, padding cut away.

    One teacher-forced pass over ``<s> + tokens`` for all hypotheses together; position ``t``'s
    row is the cross-attention of the step that predicted token ``t`` (the last, ``</s>``).
    """
    flat = [(b, h) for b, hyps in enumerate(results) for h in hyps]
    if not flat:
        return
    width = max(len(h.tokens) for _, h in flat) + 1
    tgt = torch.full((len(flat), width), bos_id, dtype=torch.long)  # (M, T); padding after a row is causal-safe
    for i, (_, h) in enumerate(flat):
        tgt[i, 1 : len(h.tokens) + 1] = torch.tensor(h.tokens, dtype=torch.long)
    rows = torch.tensor([b for b, _ in flat], device=src.device)
    mask = src_mask.index_select(0, rows)  # (M, S)
    maps = model.attention_maps(src.index_select(0, rows), tgt.to(src.device), mask)
    cross = torch.stack(maps.cross, dim=1)  # (M, L, H, T, S)
    for i, (_, h) in enumerate(flat):
        h.attention = cross[i, :, :, : len(h.tokens) + 1][..., mask[i]]
