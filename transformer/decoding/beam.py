"""Beam search (paper 6.1: beam size 4, length penalty alpha = 0.6), batched over sentences and beams.

Each sentence keeps ``K`` open beams (prefixes with their log-probabilities) and its ``n_best``
best finished hypotheses. A step extends every open beam by one token, takes the sentence's
``2K`` best extensions, moves those among the first ``K`` that end with ``</s>`` to the finished
hypotheses, and keeps the ``K`` best others open. The beams of all open sentences go through the
decoder together, one row each, and the rows (their cache and memory) follow the beams with one
reorder per step. Which ``2K`` extensions a step takes is one object's choice
(``step_candidates``): the best by score (``BestExtensions``) or, for sentences with lexical
constraints (a glossary's terms), the constraints' banks in turn
(:class:`~transformer.decoding.constraints.ConstraintSet`); the loop is the same for both.

What a step records is written in place into tensors of a fixed size (``_History``): each open
beam's token and parent, each finished hypothesis' score. A sentence's ``n_best`` are chosen
once, at the end, and their tokens read back through the parents; a step only keeps, for the
exact stopping rule, the scores of each sentence's best finished so far (a small sort).

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
    DecodeConfig,
    Hypothesis,
    best_tokens,
    hypotheses,
    inference,
    length_penalty_factor,
    output_limits,
    score_dtype,
)
from transformer.decoding.cancel import check_cancelled
from transformer.decoding.constraints import ConstraintSet, Constraints, check_constraints
from transformer.decoding.steps import Steps, decoder_steps
from transformer.model import Transformer
from transformer.errors import UserError


@inference
def beam_search(model: Transformer, src: Tensor, src_mask: Tensor, *, bos_id: int, eos_id: int,
                beam_size: int = 4, n_best: int = 1, length_penalty: str = "gnmt", alpha: float = 0.6,
                max_len_a: float = 1.0, max_len_b: int = 50, stopping: str = "exact",
                memory: Tensor | None = None, sync_every: int = 1, constraints: Constraints | None = None,
                static_cache: bool = True, _early_stop: bool = True) -> list[list[Hypothesis]]:
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
        static_cache: the decoder's keys and values allocated once for the batch's longest
            output (``transformer.decoding.steps``), or an engine's steps where the model has
            some (on CUDA: the step captured in a CUDA graph); False: the model's own growing
            cache. The results are the same.
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
    candidates = step_candidates(model, constraints, B, 2 * K, eos_id=eos_id, device=device)
    memory = model.encode(src, src_mask) if memory is None else memory  # (B, S, E)
    max_len = output_limits(model, src_mask, max_len_a, max_len_b)  # (B,)
    T = int(max_len.max())
    rows = _Rows(model, decoder_steps(model, memory, src_mask, steps=T, rows=B * K, static=static_cache), B,
                 bos_id=bos_id, device=device)
    rank = torch.arange(2 * K, device=device)
    for t in range(T):
        check_cancelled()  # a server stops a search nobody waits for any more
        logits = rows.logits()  # (N, V)
        if t == 0:  # one beam per sentence (<s>); scores in float32 (float64 for float64 logits)
            if logits.shape[-1] <= K:
                raise UserError(f"beam_size ({K}) must be smaller than the vocabulary ({logits.shape[-1]})")
            dtype = score_dtype(logits)
            lp = length_penalty_factor(torch.arange(T + 1, device=device), length_penalty, alpha).to(dtype)  # (T+1,)
            sentences = _Sentences.start(max_len, lp, n_best, dtype=dtype, stopping=stopping, early_stop=_early_stop,
                                         constrained=candidates.constrained is not None)
            history = _History(B, T, K, dtype=dtype, device=device, constrained=candidates.constrained is not None)
        n = sentences.input_index.numel()
        scores, tokens, parents, shortfall = candidates.extensions(logits, sentences.scores)  # (n, 2K) each, in order
        slots = parents - (torch.arange(n, device=device) * (logits.shape[0] // n)).unsqueeze(1)  # parent's beam
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
            short = None if shortfall is None else shortfall[:, :K].masked_fill(~finishing, EMPTY)
            ranked = (scores[:, :K] / lp[t + 1]).masked_fill(~finishing, -math.inf)
            history.finish(sentences.input_index, t, ranked, scores[:, :K], tokens[:, :K], slots[:, :K], short)
            sentences.finish(ranked, short)
        # The K best extensions that did not end with </s> stay open, best first.
        order = (ends.long() * ends.shape[1] + rank[: ends.shape[1]]).argsort(dim=1)[:, :K]  # (n, K)
        sentences.scores = scores.gather(1, order)
        parents, next_tokens = parents.gather(1, order).flatten(), tokens.gather(1, order).flatten()  # (N,)
        history.follow(sentences.input_index, t, next_tokens.view(n, K), slots.gather(1, order))
        candidates.follow(order)
        sentences.close(at_limit, finishing, K, candidates.constrained, accumulate=sync_every > 1)
        kept = None
        if ((t + 1) % sync_every == 0 or t + 1 == T) and bool(sentences.closed.any()):  # the check: a host sync
            kept = (~sentences.closed).nonzero().squeeze(1)
            if kept.numel() == 0:
                break
            sentences = sentences.rows(kept)
            candidates.rows(kept, K)
            parents, next_tokens = parents.view(n, K)[kept].flatten(), next_tokens.view(n, K)[kept].flatten()
        rows.follow(parents, next_tokens, t, kept)
    return candidates.mark_unmet(history.best(n_best, eos_id))


def step_candidates(model: Transformer, constraints: Constraints | None, B: int, count: int, *, eos_id: int,
                    device: torch.device) -> BestExtensions | ConstraintSet:
    """How the search chooses a step's candidates: the glossary's banks where a sentence of the
    ``B`` has constraints (checked), else the plain ``count`` best extensions."""
    if constraints is not None:
        constraints = check_constraints(constraints, B, eos_id=eos_id)
    if constraints is None or not any(constraints):
        return BestExtensions(model, count)
    return ConstraintSet(constraints, device, model=model, count=count, eos_id=eos_id)


class BestExtensions:
    """A step's candidates without constraints: each sentence's ``count`` best one-token extensions
    of its beams, best first (the paper's beam search). What the loop calls;
    :class:`~transformer.decoding.constraints.ConstraintSet` answers the same calls with constraints."""

    constrained = None  # (n,) bool: the sentences with constraints; None: no sentence has any

    def __init__(self, model: Transformer, count: int) -> None:
        self.model, self.count = model, count  # the model's ``best_tokens``, where it has one, picks a row's best

    def extensions(self, logits: Tensor, beam_scores: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        """Each sentence's candidates from the beams' logits ``(N, V)`` and log-probabilities
        ``(n, k)``: ``(scores, tokens, parents, shortfall)``, each ``(n, count)`` (fewer where
        ``k * V`` is smaller) in the order the search takes them: the extended beams'
        log-probabilities, the tokens they add, the row (of ``N``) each extends, and the constraint
        tokens each still lacks (None: no constraints)."""
        n, k = beam_scores.shape
        # A sentence's best extensions are among the `count` best tokens of each of its beams, so only
        # those are added to the beams' scores: (n, k * w) candidates instead of (n, k * V).
        w = min(self.count, logits.shape[-1])
        token_scores, token_ids = best_tokens(self.model, logits, w)  # (N, w)
        candidates = (beam_scores.unsqueeze(2) + token_scores.view(n, k, w)).view(n, k * w)
        scores, best = candidates.topk(min(self.count, k * w), dim=1)  # (n, count), best first
        tokens = token_ids.view(n, k * w).gather(1, best)
        parents = best // w + (torch.arange(n, device=logits.device) * k).unsqueeze(1)
        return scores, tokens, parents, None

    def follow(self, order: Tensor) -> None:
        """The open beams after the step, ``order (n, K)``: positions among each sentence's candidates
        (a beam here is its tokens, which the search keeps)."""

    def rows(self, index: Tensor, beams: int) -> None:
        """Keep the sentences ``index`` (of the current ones, each with ``beams`` rows)."""

    def mark_unmet(self, found: list[list[Hypothesis]]) -> list[list[Hypothesis]]:
        """The finished search's hypotheses, each with the constraints it misses (here none)."""
        return found


EMPTY = 1 << 30  # the shortfall of an empty place among the finished: after every hypothesis


def _ranked_first(score: Tensor, shortfall: Tensor | None, m: int) -> Tensor:
    """The positions of the ``m`` first entries of each row, best first: the highest ``score``
    (with ``shortfall``: the fewest missing constraint tokens first, then the highest score); of
    equal ones the earlier first."""
    order = score.sort(dim=1, descending=True, stable=True).indices
    if shortfall is not None:
        order = order.gather(1, shortfall.gather(1, order).sort(dim=1, stable=True).indices)
    return order[:, :m]


class _History:
    """Every step of a batch's beams, by sentence (its index in the input), step and beam, written
    in place: the open beams' tokens and parents, and the hypotheses that finished with their
    scores. A sentence's ``n_best`` are chosen once, at the end (``best``), and their tokens
    followed back through the parents.

    A finished hypothesis is ranked by its score (with constraints: by the constraint tokens it
    lacks, then its score); of equal ones the one that finished earlier (at an earlier step, or
    among a step's K extensions, the better ranked) comes first. Sentences start with ``n_best``
    empty places that every hypothesis beats (score ``-inf``), which is what a sentence keeps
    where fewer finished. These are the rankings of keeping each sentence's best hypotheses at
    every step, without the per-step sorting and copying of token rows.
    """

    def __init__(self, B: int, T: int, K: int, *, dtype: torch.dtype, device: torch.device,
                 constrained: bool) -> None:
        self.B, self.T, self.K = B, T, K
        self.token = torch.zeros(B, T, K, dtype=torch.long, device=device)  # the open beams' last tokens
        self.parent = torch.zeros(B, T, K, dtype=torch.long, device=device)  # the beam (of the step before) each extends
        self.score = torch.full((B, T, K), -math.inf, dtype=dtype, device=device)  # log-prob / lp; -inf: not finished
        self.log_prob = torch.zeros(B, T, K, dtype=dtype, device=device)
        self.last = torch.zeros(B, T, K, dtype=torch.long, device=device)  # a finished hypothesis' last token
        self.last_parent = torch.zeros(B, T, K, dtype=torch.long, device=device)
        self.shortfall = torch.full((B, T, K), EMPTY, dtype=torch.long, device=device) if constrained else None

    def follow(self, sentences: Tensor, t: int, tokens: Tensor, parents: Tensor) -> None:
        """The open beams after step ``t`` of the sentences ``sentences (n,)``: ``tokens (n, K)``, each
        extending beam ``parents (n, K)`` of step ``t - 1``."""
        self.token[sentences, t] = tokens
        self.parent[sentences, t] = parents

    def finish(self, sentences: Tensor, t: int, score: Tensor, log_prob: Tensor, tokens: Tensor, parents: Tensor,
               shortfall: Tensor | None) -> None:
        """Step ``t``'s K best extensions ``(n, K)``: ``score`` (``-inf`` for those that do not
        finish), ``log_prob``, the tokens they add, the beams they extend, the constraint tokens they
        lack (``EMPTY`` for those that do not finish)."""
        self.score[sentences, t] = score
        self.log_prob[sentences, t] = log_prob
        self.last[sentences, t] = tokens
        self.last_parent[sentences, t] = parents
        if self.shortfall is not None:
            self.shortfall[sentences, t] = shortfall

    def best(self, m: int, eos_id: int) -> list[list[Hypothesis]]:
        """Each sentence's ``m`` best finished hypotheses, in input order."""
        B, T, K, device = self.B, self.T, self.K, self.score.device
        score = torch.cat([self.score.new_full((B, m), -math.inf), self.score.view(B, T * K)], dim=1)
        shortfall = None if self.shortfall is None else torch.cat(
            [self.shortfall.new_full((B, m), EMPTY), self.shortfall.view(B, T * K)], dim=1)
        chosen = _ranked_first(score, shortfall, m).flatten() - m  # (B * m,): step * K + beam; < 0: an empty place
        sentence = torch.arange(B, device=device).repeat_interleave(m)
        empty = chosen < 0
        step, beam = chosen.clamp(min=0) // K, chosen.clamp(min=0) % K
        tokens = torch.full((B * m, max(T, 1)), eos_id, dtype=torch.long, device=device)
        tokens[torch.arange(B * m, device=device), step] = self.last[sentence, step, beam]
        parent = self.last_parent[sentence, step, beam]
        last_step = int(step.max()) if B * m else 0  # one read, at the end
        for s in range(last_step - 1, -1, -1):  # back through the parents
            inside = s < step
            tokens[:, s] = torch.where(inside, self.token[sentence, s, parent], tokens[:, s])
            parent = torch.where(inside, self.parent[sentence, s, parent], parent)
        length = torch.where(empty, 0, step + 1)
        found = hypotheses(tokens.tolist(), length.tolist(), score.gather(1, chosen.view(B, m) + m).flatten().tolist(),
                           torch.where(empty, 0.0, self.log_prob[sentence, step, beam]).tolist(), eos_id)
        return [found[b * m : (b + 1) * m] for b in range(B)]


@dataclass
class _Sentences:
    """The sentences still in the batch: their limits, their beams' scores, how many hypotheses
    they finished and (for the exact stopping rule) the scores of their ``n_best`` best; when each
    stops (``close``)."""

    input_index: Tensor  # (n,) each sentence's index in the input batch
    max_len: Tensor  # (n,) its output limit
    lp_max: Tensor  # (n,) lp(max_len), the denominator of the early-stopping bound
    scores: Tensor  # (n, k) its open beams' log-probabilities, best first
    n_finished: Tensor  # (n,) hypotheses it has finished, kept or not ("k_finished" stopping)
    closed: Tensor  # (n,) done, leaving the batch at the next check
    best_score: Tensor | None  # (n, n_best) its best finished hypotheses' scores, in rank order; None: not kept
    best_shortfall: Tensor | None  # (n, n_best) their missing constraint tokens (with constraints)
    k_finished: bool  # the stopping rule: "k_finished" (else "exact", with best_score kept where it stops early)

    @classmethod
    def start(cls, max_len: Tensor, lp: Tensor, n_best: int, *, dtype: torch.dtype, stopping: str, early_stop: bool,
              constrained: bool) -> _Sentences:
        """All sentences, each with one open beam (``<s>``, log-probability 0) and nothing finished."""
        B, device = max_len.shape[0], max_len.device
        keep_best = stopping == "exact" and early_stop  # the exact rule reads each sentence's n-best every step
        return cls(input_index=torch.arange(B, device=device), max_len=max_len, lp_max=lp[max_len],
                   scores=torch.zeros(B, 1, dtype=dtype, device=device),
                   n_finished=torch.zeros(B, dtype=torch.long, device=device),
                   closed=torch.zeros(B, dtype=torch.bool, device=device),
                   best_score=torch.full((B, n_best), -math.inf, dtype=dtype, device=device) if keep_best else None,
                   best_shortfall=torch.full((B, n_best), EMPTY, device=device) if keep_best and constrained else None,
                   k_finished=stopping == "k_finished")

    def finish(self, score: Tensor, shortfall: Tensor | None) -> None:
        """Rank a step's finished hypotheses ``score (n, K)`` (``-inf``: not finished; ``shortfall``:
        their missing constraint tokens) among the best kept for the stopping rule."""
        if self.best_score is None:
            return
        both = torch.cat([self.best_score, score], dim=1)
        short = None if self.best_shortfall is None else torch.cat([self.best_shortfall, shortfall], dim=1)
        first = _ranked_first(both, short, self.best_score.shape[1])
        self.best_score = both.gather(1, first)
        if short is not None:
            self.best_shortfall = short.gather(1, first)

    def cannot_improve(self) -> Tensor:
        """``(n,)`` bool: no continuation of an open beam can enter the sentence's finished n-best.

        A continuation of an open beam with log-probability ``s`` has a log-probability ``<= s <= 0``
        and a length ``<= max_len``, and lp never decreases (alpha >= 0), so its score is at most
        ``s / lp(max_len)``. Once the worst of the n-best finished reaches that bound for the best
        open beam (the first, except with constraints, whose beams are in bank order), no
        continuation can replace it (on equal scores the earlier hypothesis stays).
        """
        assert self.best_score is not None
        return self.best_score[:, -1] >= self.scores.max(dim=1).values / self.lp_max

    def close(self, at_limit: Tensor, finishing: Tensor, K: int, constrained: Tensor | None, *,
              accumulate: bool) -> None:
        """Close the sentences a step ended: those at their length limit ``at_limit (n,)``, those
        the stopping rule stops (``K`` finished, or nothing left to improve), and those with
        constraints (``constrained (n,)``, None: none has any) once ``K`` hypotheses that meet them
        finished; ``finishing (n, K)``: the step's finished hypotheses. ``accumulate``: a sentence
        closed earlier stays closed (it leaves at the next check)."""
        done = at_limit
        if self.k_finished or constrained is not None:
            self.n_finished = self.n_finished + finishing.sum(dim=1)
        if self.k_finished:
            done = done | (self.n_finished >= K)
        elif self.best_score is not None:
            done = done | self.cannot_improve()
        if constrained is not None:
            done = done | (constrained & (self.n_finished >= K))
        self.closed = self.closed | done if accumulate else done

    def rows(self, index: Tensor) -> _Sentences:
        """The sentences ``index``."""
        pick = (lambda x: None if x is None else x[index])
        return _Sentences(self.input_index[index], self.max_len[index], self.lp_max[index], self.scores[index],
                          self.n_finished[index], self.closed[index], pick(self.best_score), pick(self.best_shortfall),
                          self.k_finished)


class _Rows:
    """The decoder's rows, one per open beam: the token each was extended by last, and the batch's
    steps (its cache and the memory the rows read), which follow the beams with one reorder a step.

    A model with ``supports_grouped_memory`` reads one memory row per sentence, shared by the
    sentence's beams (the CPU engine's attention reads it in place for all of them); another
    reads one copy per beam.
    """

    def __init__(self, model: Transformer, steps: Steps, B: int, *, bos_id: int, device: torch.device) -> None:
        self.grouped = getattr(model, "supports_grouped_memory", False)
        self.steps = steps
        self.last = torch.full((B,), bos_id, dtype=torch.long, device=device)  # (N,) the next input

    def logits(self) -> Tensor:
        """One decoder step: the next token's logits ``(N, V)`` of every beam."""
        return self.steps.logits(self.last)

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
        self.steps.reorder(parents, memory_rows)
        self.last = tokens
