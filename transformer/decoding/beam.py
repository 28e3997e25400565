"""Beam search (paper 6.1: beam size 4, length penalty alpha = 0.6), batched over sentences and beams.

Each sentence keeps ``K`` open beams (prefixes with their log-probabilities) and its ``n_best``
best finished hypotheses. A step extends every open beam by one token, takes the sentence's
``2K`` best extensions, moves those among the first ``K`` that end with ``</s>`` to the finished
hypotheses, and keeps the ``K`` best others open. The beams of all open sentences go through the
decoder together, one row each, and the rows (their tokens, memory and cache) follow the beams
with one reorder per step.

Letters: B batch, K beam size, n sentences still in the batch, k beams each (1 at the first
step, then K), N rows (n x k, sentence by sentence), S source length, T output length,
V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer.decoding.common import (
    CACHE_CAPACITY,
    DecodeConfig,
    Hypothesis,
    best_tokens,
    hypotheses,
    inference,
    length_penalty_factor,
    output_limits,
    score_dtype,
)
from transformer.decoding.constraints import ConstraintSet, Constraints, check_constraints, unmet_constraints
from transformer.model import Transformer
from transformer.model.cache import DecoderCache
from transformer.errors import UserError


@inference
def beam_search(model: Transformer, src: Tensor, src_mask: Tensor, *, bos_id: int, eos_id: int,
                beam_size: int = 4, n_best: int = 1, length_penalty: str = "gnmt", alpha: float = 0.6,
                max_len_a: float = 1.0, max_len_b: int = 50, stopping: str = "exact",
                memory: Tensor | None = None, sync_every: int = 1, constraints: Constraints | None = None,
                _early_stop: bool = True) -> list[list[Hypothesis]]:
    """Beam search over all sentences and beams at once (paper 6.1: beam 4, alpha 0.6).

    Hypotheses are ranked by ``score = log P(Y) / lp(|Y|)``, ``|Y|`` the number of predicted
    tokens including ``</s>`` (the token count for a hypothesis cut at the maximum length):
    every token adds a negative log-probability, so unnormalised scores would favour short
    outputs. Each sentence keeps its ``n_best`` best finished hypotheses.

    Stopping: ``"exact"`` ("terminate early when possible") stops a sentence once no open beam
    can beat its finished hypotheses (the bound: ``_Sentences.cannot_improve``), so it gives the
    results of running every sentence to its maximum length. ``"k_finished"`` stops a
    sentence once ``beam_size`` hypotheses have finished (counted over all steps), the common
    cheaper rule (fairseq, CTranslate2, ``generate(early_stopping=True)``); a longer, better
    hypothesis may be missed.

    Args:
        model: a ``Transformer`` (or a model with its ``encode`` / ``decode`` / ``new_cache``).
        src: ``(B, S)`` source ids; src_mask: ``(B, S)`` bool, True = real token.
        bos_id, eos_id: the tokenizer's start and end ids.
        beam_size: ``K``, the open beams per sentence.
        n_best: hypotheses returned per sentence (at most ``beam_size``).
        length_penalty, alpha: ``lp``: "gnmt" ``((5 + |Y|) / 6) ** alpha``, "exponent" or "none".
        max_len_a, max_len_b: a sentence stops after ``a * source_length + b`` tokens.
        stopping: "exact" or "k_finished" (above).
        memory: ``model.encode(src, src_mask)`` when the caller has it already.
        sync_every: finished sentences leave the batch at a check every ``sync_every`` steps. A
            check reads a value back from the device (on a GPU the host waits there for every
            queued step); between checks finished sentences run on with their results frozen,
            so the results are the same.
        constraints: per sentence, token-id sequences its output must contain (lexically
            constrained beam search, ``transformer.decoding.constraints``); a sentence with none
            is searched as without. A sentence with constraints finishes only hypotheses that
            contain them all, and stops once ``beam_size`` such hypotheses have finished (or by
            the exact bound, or at its length limit, where the constraints its hypotheses miss
            are listed in ``Hypothesis.unmet``).
        _early_stop: False runs every sentence to its maximum length under "exact" stopping (the
            tests check that stopping early changes nothing).

    Returns:
        per sentence, in input order, ``n_best`` hypotheses, best first: ``score`` normalised by
        the length penalty, ``log_prob`` the model's log-probability.
    """
    DecodeConfig("beam", beam_size=beam_size, n_best=n_best, length_penalty=length_penalty, alpha=alpha,
                 max_len_a=max_len_a, max_len_b=max_len_b, stopping=stopping)
    if not isinstance(sync_every, int) or sync_every < 1:
        raise UserError(f"sync_every must be an integer >= 1, got {sync_every!r}")
    K, device, B = beam_size, src.device, src.shape[0]
    if constraints is not None:
        constraints = check_constraints(constraints, B, eos_id=eos_id)
    bound = ConstraintSet(constraints, device) if constraints is not None and any(constraints) else None
    memory = model.encode(src, src_mask) if memory is None else memory  # (B, S, E)
    max_len = output_limits(model, src_mask, max_len_a, max_len_b)  # (B,)
    T = int(max_len.max())
    rows = _Rows(model, memory, src_mask, B, T, bos_id=bos_id, eos_id=eos_id)
    rank = torch.arange(2 * K, device=device)
    for t in range(T):
        logits = rows.logits()  # (N, V)
        if t == 0:  # one beam per sentence (<s>); scores in float32 (float64 for float64 logits)
            if logits.shape[-1] <= K:
                raise UserError(f"beam_size ({K}) must be smaller than the vocabulary ({logits.shape[-1]})")
            dtype = score_dtype(logits)
            lp = length_penalty_factor(torch.arange(T + 1, device=device), length_penalty, alpha).to(dtype)  # (T+1,)
            sentences = _Sentences.start(max_len, lp, n_best, T, dtype=dtype, eos_id=eos_id)
            results = _Finished.empty(B, n_best, T, dtype=dtype, eos_id=eos_id, device=device)  # by input index
        n = sentences.input_index.numel()
        if bound is None:
            scores, tokens, parents = _best_extensions(model, logits, sentences.scores, 2 * K)  # (n, 2K)
            shortfall = None
        else:  # in bank round-robin order, with each candidate's constraint state
            scores, tokens, parents, states, shortfall = bound.extensions(model, logits, sentences.scores, 2 * K,
                                                                          eos_id)
        ends = tokens == eos_id
        at_limit = t + 1 >= sentences.max_len  # (n,)
        # Only the K best extensions may finish (at the maximum length all K do, cut there); one
        # ending with </s> further down ranks below K open ones and is dropped. Taking 2K leaves
        # at least K open: a beam ends with </s> in at most one of its extensions.
        finishing = ends[:, :K] | at_limit.unsqueeze(1)  # (n, K)
        if sync_every > 1:  # a closed sentence's results are final (checked every step, none stays)
            finishing = finishing & ~sentences.closed.unsqueeze(1)
        # On CPU reading back whether anything finished is cheap and spares most steps the
        # bookkeeping; on an accelerator the read would make the host wait for the device, so the
        # bookkeeping runs every step (with nothing finishing, it changes nothing).
        if device.type != "cpu" or bool(finishing.any()):
            prefixes = rows.tokens.index_select(0, parents[:, :K].flatten()).view(n, K, T)
            sentences.finish(scores[:, :K], tokens[:, :K], prefixes, finishing, t, lp[t + 1],
                             None if shortfall is None else shortfall[:, :K])
        # The K best extensions that did not end with </s> stay open, best first.
        order = (ends.long() * ends.shape[1] + rank[: ends.shape[1]]).argsort(dim=1)[:, :K]  # (n, K)
        sentences.scores = scores.gather(1, order)
        parents, next_tokens = parents.gather(1, order).flatten(), tokens.gather(1, order).flatten()  # (N,)
        if bound is not None:
            picked = (order + (torch.arange(n, device=device) * ends.shape[1]).unsqueeze(1)).flatten()
            bound.follow(states.select(picked))
        done = at_limit
        if stopping == "k_finished" or bound is not None:
            sentences.n_finished = sentences.n_finished + finishing.sum(dim=1)
        if stopping == "k_finished":
            done = done | (sentences.n_finished >= K)
        elif _early_stop:
            done = done | sentences.cannot_improve()
        if bound is not None:  # a constrained sentence also stops once K hypotheses meeting its constraints finished
            done = done | (bound.constrained & (sentences.n_finished >= K))
        sentences.closed = sentences.closed | done if sync_every > 1 else done
        kept = None
        if ((t + 1) % sync_every == 0 or t + 1 == T) and bool(sentences.closed.any()):  # the check: a host sync
            leaving = sentences.closed.nonzero().squeeze(1)
            results.put(sentences.input_index[leaving], sentences.finished.rows(leaving))
            kept = (~sentences.closed).nonzero().squeeze(1)
            if kept.numel() == 0:
                break
            sentences = sentences.rows(kept)
            if bound is not None:
                bound.rows(kept, K)
            parents, next_tokens = parents.view(n, K)[kept].flatten(), next_tokens.view(n, K)[kept].flatten()
        rows.follow(parents, next_tokens, t, kept)
    found = results.to_hypotheses(eos_id)
    if bound is not None:
        for hyps, wanted in zip(found, constraints):
            for h in hyps:
                h.unmet = unmet_constraints(h.tokens, wanted)
    return found


def _best_extensions(model: Transformer, logits: Tensor, beam_scores: Tensor,
                     count: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's ``count`` best one-token extensions of its beams, best first.

    Args:
        model: the model; its ``best_tokens``, where it has one (the CPU engine's: log-softmax
            and top-k of a row in one compiled pass), picks each row's best tokens.
        logits: ``(N, V)``, the next token's logits of the ``N = n * k`` beams.
        beam_scores: ``(n, k)``, the beams' log-probabilities.
        count: extensions per sentence (fewer where ``k * V`` is smaller).

    Returns:
        ``(scores, tokens, parents)``, each ``(n, count)``: the extended beams' log-probabilities,
        the tokens they add, and the row (of ``N``) of the beam each one extends.
    """
    n, k = beam_scores.shape
    # A sentence's best extensions are among the `count` best tokens of each of its beams, so only
    # those are added to the beams' scores: (n, k * w) candidates instead of (n, k * V).
    w = min(count, logits.shape[-1])
    token_scores, token_ids = best_tokens(model, logits, w)  # (N, w)
    candidates = (beam_scores.unsqueeze(2) + token_scores.view(n, k, w)).view(n, k * w)
    scores, best = candidates.topk(min(count, k * w), dim=1)  # (n, count), best first
    tokens = token_ids.view(n, k * w).gather(1, best)
    parents = best // w + (torch.arange(n, device=logits.device) * k).unsqueeze(1)
    return scores, tokens, parents


EMPTY = 1 << 30  # the shortfall of an empty place among the finished: after every hypothesis


@dataclass
class _Finished:
    """Finished hypotheses, ``m`` per sentence, best first (an empty place scores ``-inf``).

    With constraints, ``shortfall`` counts the constraint tokens a hypothesis lacks (only one
    cut at the length limit lacks any; an empty place lacks ``EMPTY``), and hypotheses are
    ranked by it first, then by score."""

    score: Tensor  # (n, m) log-prob / lp(length), what hypotheses are ranked by
    log_prob: Tensor  # (n, m) the model's log-probability of the tokens
    length: Tensor  # (n, m) predicted tokens, </s> included
    tokens: Tensor  # (n, m, T) </s> after the end
    shortfall: Tensor | None = None  # (n, m) constraint tokens missing; None without constraints

    @classmethod
    def empty(cls, n: int, m: int, T: int, *, dtype: torch.dtype, eos_id: int, device: torch.device) -> _Finished:
        return cls(torch.full((n, m), -math.inf, dtype=dtype, device=device),
                   torch.zeros(n, m, dtype=dtype, device=device),
                   torch.zeros(n, m, dtype=torch.long, device=device),
                   torch.full((n, m, T), eos_id, dtype=torch.long, device=device))

    def _fields(self) -> tuple[Tensor, ...]:
        fields = self.score, self.log_prob, self.length, self.tokens
        return fields if self.shortfall is None else (*fields, self.shortfall)

    def best(self, new: _Finished, m: int) -> _Finished:
        """The ``m`` best of these and ``new`` per sentence; on equal scores these (found earlier) first."""
        if self.shortfall is None and new.shortfall is not None:
            self.shortfall = torch.where(self.score == -math.inf, EMPTY, 0)
        both = [torch.cat([kept, added], dim=1) for kept, added in zip(self._fields(), new._fields())]
        order = both[0].sort(dim=1, descending=True, stable=True).indices  # (n, 2m)
        if self.shortfall is not None:  # fewest missing constraint tokens first, then the best score
            order = order.gather(1, both[4].gather(1, order).sort(dim=1, stable=True).indices)
        order = order[:, :m]
        return _Finished(*(x.gather(1, order if x.dim() == 2 else order.unsqueeze(2).expand(-1, -1, x.shape[2]))
                           for x in both))

    def rows(self, index: Tensor) -> _Finished:
        """The sentences ``index``."""
        return _Finished(*(x[index] for x in self._fields()))

    def put(self, index: Tensor, other: _Finished) -> None:
        """Write ``other``'s sentences into rows ``index``."""
        for mine, theirs in zip(self._fields(), other._fields()):
            mine[index] = theirs

    def to_hypotheses(self, eos_id: int) -> list[list[Hypothesis]]:
        score, log_prob, length, tokens = (x.tolist() for x in self._fields())
        return [hypotheses(tokens[b], length[b], score[b], log_prob[b], eos_id) for b in range(len(score))]


@dataclass
class _Sentences:
    """The sentences still in the batch: their limits, their beams' scores, their finished hypotheses."""

    input_index: Tensor  # (n,) each sentence's index in the input batch
    max_len: Tensor  # (n,) its output limit
    lp_max: Tensor  # (n,) lp(max_len), the denominator of the early-stopping bound
    scores: Tensor  # (n, k) its open beams' log-probabilities, best first
    finished: _Finished  # its n_best best finished hypotheses
    n_finished: Tensor  # (n,) hypotheses it has finished, kept or not ("k_finished" stopping)
    closed: Tensor  # (n,) done, leaving the batch at the next check

    @classmethod
    def start(cls, max_len: Tensor, lp: Tensor, n_best: int, T: int, *, dtype: torch.dtype,
              eos_id: int) -> _Sentences:
        """All sentences, each with one open beam (``<s>``, log-probability 0) and nothing finished."""
        B, device = max_len.shape[0], max_len.device
        return cls(input_index=torch.arange(B, device=device), max_len=max_len, lp_max=lp[max_len],
                   scores=torch.zeros(B, 1, dtype=dtype, device=device),
                   finished=_Finished.empty(B, n_best, T, dtype=dtype, eos_id=eos_id, device=device),
                   n_finished=torch.zeros(B, dtype=torch.long, device=device),
                   closed=torch.zeros(B, dtype=torch.bool, device=device))

    def finish(self, scores: Tensor, tokens: Tensor, prefixes: Tensor, finishing: Tensor, t: int,
               lp: Tensor, shortfall: Tensor | None = None) -> None:
        """Add the extensions ``finishing`` of step ``t`` to the finished hypotheses, each sentence
        keeping its best.

        Args:
            scores: ``(n, K)``, the extensions' log-probabilities.
            tokens: ``(n, K)``, the tokens they add.
            prefixes: ``(n, K, T)``, the tokens of the beams they extend.
            finishing: ``(n, K)`` bool, the extensions that finish.
            t: the step.
            lp: ``lp(t + 1)``, the length penalty of a hypothesis finishing at this step.
            shortfall: ``(n, K)``, the constraint tokens each extension lacks (None without
                constraints).
        """
        prefixes[:, :, t] = tokens
        n, K = scores.shape
        new = _Finished(score=(scores / lp).masked_fill(~finishing, -math.inf), log_prob=scores,
                        length=torch.full((n, K), t + 1, dtype=torch.long, device=scores.device), tokens=prefixes,
                        shortfall=None if shortfall is None else shortfall.masked_fill(~finishing, EMPTY))
        self.finished = self.finished.best(new, self.finished.score.shape[1])

    def cannot_improve(self) -> Tensor:
        """``(n,)`` bool: no continuation of an open beam can enter the sentence's finished n-best.

        A continuation of an open beam with log-probability ``s`` has a log-probability ``<= s <= 0``
        and a length ``<= max_len``, and lp never decreases (alpha >= 0), so its score is at most
        ``s / lp(max_len)``. Once the worst of the n-best finished reaches that bound for the best
        open beam (the first, except with constraints, whose beams are in bank order), no
        continuation can replace it (on equal scores the earlier hypothesis stays).
        """
        return self.finished.score[:, -1] >= self.scores.max(dim=1).values / self.lp_max

    def rows(self, index: Tensor) -> _Sentences:
        """The sentences ``index``."""
        return _Sentences(self.input_index[index], self.max_len[index], self.lp_max[index], self.scores[index],
                          self.finished.rows(index), self.n_finished[index], self.closed[index])


class _Rows:
    """The decoder's rows, one per open beam: the beams' tokens, the memory they read, the cache.

    A model with ``supports_grouped_memory`` reads one memory row per sentence, shared by the
    sentence's beams (the CPU engine's attention reads it in place for all of them); another
    reads one copy per beam.
    """

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor, B: int, T: int, *, bos_id: int,
                 eos_id: int) -> None:
        device = src_mask.device
        self.model = model
        self.grouped = getattr(model, "supports_grouped_memory", False)
        self.memory, self.src_mask = memory, src_mask  # (B, S, E), (B, S): one row per sentence at first
        self.cache = model.new_cache(initial_capacity=CACHE_CAPACITY)
        self.tokens = torch.full((B, T), eos_id, dtype=torch.long, device=device)  # (N, T) tokens so far
        self.last = torch.full((B,), bos_id, dtype=torch.long, device=device)  # (N,) the next step's input

    def logits(self) -> Tensor:
        """One decoder step: the next token's logits ``(N, V)`` of every beam."""
        return self.model.decode(self.last.unsqueeze(1), self.memory, self.src_mask, cache=self.cache)[:, -1]

    def follow(self, parents: Tensor, tokens: Tensor, t: int, kept: Tensor | None) -> None:
        """The step's one reorder: row ``i`` becomes the beam that extends row ``parents[i]`` by ``tokens[i]``.

        Args:
            parents: ``(N',)``, the row each new beam extends.
            tokens: ``(N',)``, the token it adds at step ``t``.
            t: the step.
            kept: the positions of the sentences still in the batch when some left at this
                step (their beams are the new rows), else None.
        """
        if self.grouped:
            memory_rows = kept  # one row per sentence: they change only when sentences leave
        elif t == 0 or kept is not None:
            memory_rows = parents  # one row per beam: from one per sentence to K, or rows of others
        else:
            memory_rows = None  # beams moved within their sentence, whose memory rows are all equal
        if memory_rows is not None:
            self.memory = self.memory.index_select(0, memory_rows)
            self.src_mask = self.src_mask.index_select(0, memory_rows)
        if not isinstance(self.cache, DecoderCache):
            self.cache.reorder(parents)  # one row per beam in all of it (the recurrent model's state)
        elif memory_rows is None:  # the memory's keys/values stay: only the self-attention follows
            for layer in self.cache.self_attn:
                layer.reorder(parents)
        else:
            self.cache.reorder(parents, memory_index=memory_rows)
        self.tokens = self.tokens.index_select(0, parents)
        self.tokens[:, t] = tokens
        self.last = tokens
