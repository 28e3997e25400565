"""Beam search (paper 6.1: beam size 4, length penalty alpha = 0.6), batched over sentences and beams.

Letters: B batch, K beam size, N rows (sentences x beams), S source length, T output length,
V vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from transformer.decoding.common import (
    _CACHE_CAPACITY,
    DecodeConfig,
    Hypothesis,
    _best_tokens,
    _hypotheses,
    _inference,
    _limits,
    _score_dtype,
    length_penalty_factor,
)
from transformer.model import Transformer


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
                memory: Tensor | None = None, sync_every: int = 1, _early_stop: bool = True) -> list[list[Hypothesis]]:
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

    ``memory``: ``model.encode(src, src_mask)`` when the caller has it already.

    ``sync_every``: finished sentences leave the batch at a check every ``sync_every`` steps (a
    check reads a value back from the device: on a GPU the host waits there for every queued
    step); between checks they run on with their results frozen, so the results are the same.

    Returns:
        per sentence, ``n_best`` hypotheses, best first; ``score`` normalised, ``log_prob`` raw.
    """
    DecodeConfig("beam", beam_size=beam_size, n_best=n_best, length_penalty=length_penalty, alpha=alpha,
                 max_len_a=max_len_a, max_len_b=max_len_b, stopping=stopping)
    if not isinstance(sync_every, int) or sync_every < 1:
        raise ValueError(f"sync_every must be an integer >= 1, got {sync_every!r}")
    K, dev = beam_size, src.device
    B = src.shape[0]
    memory = model.encode(src, src_mask) if memory is None else memory  # (B, S, E)
    limits = _limits(model, src_mask, max_len_a, max_len_b)  # (B,)
    T = int(limits.max())
    cache = model.new_cache(initial_capacity=_CACHE_CAPACITY)
    sent = torch.arange(B, device=dev)  # (n,) original index of each open sentence
    lim, mem, mask = limits, memory, src_mask
    token = torch.full((B, 1), bos_id, dtype=torch.long, device=dev)  # (N, 1)
    hist = torch.full((B, T), eos_id, dtype=torch.long, device=dev)  # (N, T) tokens of the open beams
    arange_2k = torch.arange(2 * K, device=dev)
    grouped = getattr(model, "supports_grouped_memory", False)  # beams can share their sentence's memory row
    closed = torch.zeros(B, dtype=torch.bool, device=dev)  # (n,) sentences done, not yet out of the batch
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
        row_s, row_tok = _best_tokens(model, logits, w)  # (N, w)
        cand = (alive.unsqueeze(2) + row_s.view(n, k, w)).view(n, k * w)
        top_s, top_i = cand.topk(min(2 * K, k * w), dim=1)  # (n, 2K), best first
        top_tok = row_tok.view(n, k * w).gather(1, top_i)  # (n, 2K)
        parents = top_i // w + (torch.arange(n, device=dev) * k).unsqueeze(1)  # (n, 2K) rows of the cache
        is_eos = top_tok == eos_id
        last = t + 1 >= lim  # (n,) reached the maximum length
        fin = is_eos[:, :K] | last.unsqueeze(1)  # (n, K)
        if sync_every > 1:  # a closed sentence's results stay (at every-step checks none is left open)
            fin = fin & ~closed.unsqueeze(1)
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
        closed = closed | done if sync_every > 1 else done
        keep = None
        if ((t + 1) % sync_every == 0 or t + 1 == T) and bool(closed.any()):  # the stopping check: one host sync
            finished = closed.nonzero().squeeze(1)
            for o, s in zip(out, store):
                o[sent[finished]] = s[finished]
            keep = (~closed).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            sent, lim, lp_max, alive, n_finished = sent[keep], lim[keep], lp_max[keep], alive[keep], n_finished[keep]
            closed = closed[keep]
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
