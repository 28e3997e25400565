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

Greedy search, sampling and ``decode`` live here, beam search in ``beam.py``, and what they share
(``DecodeConfig``, ``Hypothesis``, length limits and penalties, per-step helpers) in ``common.py``;
``steps.py`` runs the decoder a step at a time over a batch's rows, with a cache allocated once
per batch (or an engine's steps: on CUDA, a step captured in a CUDA graph).

All of them run sentences that are finished out of the batch (rows are dropped from the cache),
accumulate scores in float32 (float64 for a float64 model) and work with bf16 weights or
under bf16 autocast.

Letters: B batch, K beam size, N rows (sentences x beams or samples), S source length,
T output length, V vocabulary, L decoder layers, H heads.
"""

from __future__ import annotations

import hashlib
import math
from typing import Callable

import torch
from torch import Tensor

from transformer.decoding.beam import beam_search
from transformer.decoding.cancel import check_cancelled
from transformer.decoding.constraints import Constraints
from transformer.decoding.common import (
    LENGTH_PENALTIES,
    STOPPING,
    STRATEGIES,
    DecodeConfig,
    Hypothesis,
    best_tokens,
    hypotheses,
    inference,
    output_limits,
    token_log_probs,
    length_penalty_factor,
    max_lengths,
)
from transformer.decoding.steps import decoder_steps
from transformer.model import Transformer
from transformer.errors import UserError

__all__ = ["LENGTH_PENALTIES", "STOPPING", "STRATEGIES", "DecodeConfig", "Hypothesis", "attach_attention",
           "beam_search", "decode", "greedy_search", "length_penalty_factor", "max_lengths", "sample"]


# ---------------------------------------------------------------------------------------------
# Greedy search and sampling: one token per row and step.


def _ancestral(model: Transformer, memory: Tensor, src_mask: Tensor, limits: Tensor, *, bos_id: int, eos_id: int,
               pick: Callable[[Tensor, Tensor, int], Tensor] | None, sync_every: int = 1,
               static_cache: bool = True) -> list[Hypothesis]:
    """Extend every row by ``pick(log_probs (n, V), rows (n,), step) -> (n,)`` (None: the most probable
    token; ``rows``: the original row of each active row) until ``</s>`` or its limit.

    Finished rows leave the batch at the next check, every ``sync_every`` steps: a check reads a
    value back from the device (on a GPU the host waits there for every queued step), so between
    checks finished rows run on, their results already recorded on the device and left unchanged."""
    if not isinstance(sync_every, int) or sync_every < 1:
        raise UserError(f"sync_every must be an integer >= 1, got {sync_every!r}")
    N, dev = memory.shape[0], memory.device
    T = int(limits.max())
    steps = decoder_steps(model, memory, src_mask, steps=T, rows=N, static=static_cache)
    rows = torch.arange(N, device=dev)  # (n,) original row of each active row
    lim = limits
    out_tok = torch.full((N, T), eos_id, dtype=torch.long, device=dev)  # (N, T)
    out_steps = torch.zeros(N, dtype=torch.long, device=dev)
    token = torch.full((N,), bos_id, dtype=torch.long, device=dev)
    finished = torch.zeros(N, dtype=torch.bool, device=dev)  # (n,) rows done but not yet out of the batch
    out_lp = score = None
    for t in range(T):
        check_cancelled()  # a server stops a search nobody waits for any more
        logits = steps.logits(token)  # (n, V)
        if pick is None:  # greedy
            step_lp, nxt = (x.squeeze(1) for x in best_tokens(model, logits, 1))  # (n,)
        else:
            log_probs = token_log_probs(logits)
            nxt = pick(log_probs, rows, t)  # (n,)
            step_lp = log_probs.gather(1, nxt.unsqueeze(1)).squeeze(1)  # (n,)
        if score is None:
            score, out_lp = step_lp, torch.zeros(N, dtype=step_lp.dtype, device=dev)
        else:
            score = score + step_lp
        nxt = nxt.masked_fill(finished, eos_id)  # a finished row's tokens stay </s>
        out_tok[rows, t] = nxt
        ends = ~finished & ((nxt == eos_id) | (t + 1 >= lim))  # (n,) rows finishing at this step
        out_lp.index_copy_(0, rows, torch.where(ends, score, out_lp.index_select(0, rows)))
        out_steps.index_copy_(0, rows, torch.where(ends, t + 1, out_steps.index_select(0, rows)))
        finished = finished | ends
        if (t + 1) % sync_every == 0 or t + 1 == T:
            if bool(finished.any()):  # the check: one host sync
                keep = (~finished).nonzero().squeeze(1)
                if keep.numel() == 0:
                    break
                rows, lim, score, nxt, finished = rows[keep], lim[keep], score[keep], nxt[keep], finished[keep]
                steps.reorder(keep, keep)
        token = nxt
    lps = out_lp.tolist() if out_lp is not None else [0.0] * N
    return hypotheses(out_tok.tolist(), out_steps.tolist(), lps, lps, eos_id)


@inference
def greedy_search(model: Transformer, src: Tensor, src_mask: Tensor, *, bos_id: int, eos_id: int,
                  max_len_a: float = 1.0, max_len_b: int = 50, memory: Tensor | None = None,
                  sync_every: int = 1, static_cache: bool = True) -> list[Hypothesis]:
    """Pick the most probable token at every step, for a whole batch at once.

    Args:
        src: ``(B, S)`` source ids; src_mask: ``(B, S)`` bool, True = real token.
        bos_id / eos_id: the tokenizer's start and end ids.
        max_len_a, max_len_b: a sentence stops after ``a * source_length + b`` tokens.
        memory: ``model.encode(src, src_mask)`` when the caller has it already.
        sync_every: finished sentences leave the batch every this many steps (the same results;
            fewer waits on a GPU).
        static_cache: the decoder's keys and values allocated once for the batch (or an
            engine's steps, see ``beam_search``); False: the model's growing cache. The same results.

    Returns:
        one ``Hypothesis`` per sentence, in input order; ``score == log_prob``.
    """
    DecodeConfig("greedy", max_len_a=max_len_a, max_len_b=max_len_b)
    limits = output_limits(model, src_mask, max_len_a, max_len_b)  # (B,)
    memory = model.encode(src, src_mask) if memory is None else memory
    return _ancestral(model, memory, src_mask, limits, bos_id=bos_id, eos_id=eos_id, pick=None, sync_every=sync_every,
                      static_cache=static_cache)


@inference
def sample(model: Transformer, src: Tensor, src_mask: Tensor, *, bos_id: int, eos_id: int,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, n: int = 1, seed: int | None = None,
           max_len_a: float = 1.0, max_len_b: int = 50, memory: Tensor | None = None,
           sync_every: int = 1, static_cache: bool = True) -> list[list[Hypothesis]]:
    """Ancestral sampling: ``n`` independent samples per sentence, drawn in one batch.

    Each step samples from ``softmax(log_probs / temperature)`` restricted to the ``top_k`` most
    probable tokens (0 = all) and to the smallest set whose probability reaches ``top_p``
    (nucleus sampling, Holtzman et al. 2020). ``score`` and ``log_prob`` are the model's
    log-probability of the sample (temperature 1, unfiltered). Samples are returned best score first.

    Randomness: each sentence has its own ``torch.Generator``, seeded from ``seed`` and the
    sentence's source tokens, which draws the uniform numbers of its ``n`` samples for every step
    up front (step-major, so a longer limit only adds numbers); a step picks the token where the
    number falls in the cumulative distribution. So with a fixed ``seed`` a sentence gets the same
    samples whatever else is in its batch and wherever it stands in it (identical sentences get
    identical samples). ``seed=None`` draws a fresh base seed; the global RNG is never used.
    """
    DecodeConfig("sample", n_best=n, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                 max_len_a=max_len_a, max_len_b=max_len_b)
    B, dev = src.shape[0], src.device
    base = torch.Generator().seed() if seed is None else seed
    sentence_limits = output_limits(model, src_mask, max_len_a, max_len_b).tolist()  # (B,)
    T = max(sentence_limits, default=1)
    uniform = torch.full((B * n, T), 0.5, dtype=torch.float64)  # (B*n, T); past a row's limit: never read
    src_cpu, mask_cpu = src.cpu(), src_mask.cpu()
    for b, limit in enumerate(sentence_limits):
        tokens = src_cpu[b][mask_cpu[b]].to(torch.int64).numpy().astype("<i8").tobytes()
        digest = hashlib.blake2b(b"%d:" % base + tokens, digest_size=8).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
        uniform[b * n : (b + 1) * n, :limit] = torch.rand(limit, n, generator=gen, dtype=torch.float64).T
    uniform = uniform.to(dev)

    def pick(log_probs: Tensor, rows: Tensor, t: int) -> Tensor:  # (n, V), (n,) -> (n,)
        x = log_probs / temperature
        if top_k and top_k < x.shape[-1]:
            kth = x.topk(top_k, dim=-1).values[:, -1:]  # (n, 1)
            x = x.masked_fill(x < kth, -math.inf)
        if top_p < 1.0:
            sorted_x, order = x.sort(dim=-1, descending=True)
            p = sorted_x.softmax(-1)
            before = p.cumsum(-1) - p  # probability mass of the more probable tokens; 0 for the first
            x = torch.full_like(x, -math.inf).scatter(1, order, sorted_x.masked_fill(before >= top_p, -math.inf))
        probs = x.softmax(-1)  # (n, V)
        cdf = probs.cumsum(-1)  # non-decreasing: a token of probability 0 is never the first above u
        u = uniform[rows, t].to(cdf.dtype) * cdf[:, -1]  # (n,)
        token = torch.searchsorted(cdf, u.unsqueeze(1), right=True).squeeze(1)
        last = probs.shape[-1] - 1 - (probs > 0).flip(-1).to(torch.uint8).argmax(-1)  # rounding at the top
        return torch.minimum(token, last)

    rows = torch.arange(B, device=dev).repeat_interleave(n)  # (B*n,)
    memory = (model.encode(src, src_mask) if memory is None else memory).index_select(0, rows)  # (B*n, S, E)
    mask = src_mask.index_select(0, rows)
    hyps = _ancestral(model, memory, mask, output_limits(model, mask, max_len_a, max_len_b), bos_id=bos_id,
                      eos_id=eos_id, pick=pick, sync_every=sync_every, static_cache=static_cache)
    return [sorted(hyps[b * n : (b + 1) * n], key=lambda h: -h.score) for b in range(B)]


# ---------------------------------------------------------------------------------------------


@inference
def decode(model: Transformer, src: Tensor, src_mask: Tensor, cfg: DecodeConfig, *, bos_id: int,
           eos_id: int, memory: Tensor | None = None, sync_every: int = 1,
           constraints: Constraints | None = None, static_cache: bool = True) -> list[list[Hypothesis]]:
    """Decode a batch with ``cfg``: per sentence a best-first list of hypotheses (1 for greedy).

    ``memory``: the encoder's output for ``src`` when the caller computed it (e.g. in groups of
    similar length); else it is computed here. ``sync_every``: how often finished sentences leave
    the batch (see ``beam_search``; the device's choice, not the results'). ``constraints``: per
    sentence, token sequences its output must contain (beam search only: greedy search and
    sampling choose one token at a time and cannot keep a place for a constraint, so they
    refuse any). ``static_cache``: the decoder's keys and values allocated once per batch, or an
    engine's steps (``beam_search``); False: the model's own growing cache (the same results)."""
    if constraints is not None and any(constraints) and cfg.strategy != "beam":
        raise UserError(f"terminology constraints need beam search; {cfg.strategy} decoding cannot enforce them "
                         "(use beam search, e.g. --beam 4)")
    lengths = dict(max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b, memory=memory, sync_every=sync_every,
                   static_cache=static_cache)
    if cfg.strategy == "greedy":
        results = [[h] for h in greedy_search(model, src, src_mask, bos_id=bos_id, eos_id=eos_id, **lengths)]
    elif cfg.strategy == "beam":
        results = beam_search(model, src, src_mask, bos_id=bos_id, eos_id=eos_id, beam_size=cfg.beam_size,
                              n_best=cfg.n_best, length_penalty=cfg.length_penalty, alpha=cfg.alpha,
                              stopping=cfg.stopping, constraints=constraints, **lengths)
    else:
        results = sample(model, src, src_mask, bos_id=bos_id, eos_id=eos_id, temperature=cfg.temperature,
                         top_k=cfg.top_k, top_p=cfg.top_p, n=cfg.n_best, seed=cfg.seed, **lengths)
    if cfg.return_attention:
        attach_attention(model, src, src_mask, results, bos_id=bos_id)
    return results


@inference
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
