"""Lexical constraints for beam search: outputs that must contain given token sequences.

A glossary says "translate *Auftrag* as *purchase order*"; the decoder then has to produce the
tokens of "purchase order" somewhere in the output. This is lexically constrained beam search
with dynamic beam allocation (Post & Vilar 2018), vectorised over sentences and beams the way
Hu et al. (2019) describe:

* **Endings.** A constraint may name other tokens that can stand for its last token: a
  subword vocabulary often holds a word with punctuation attached (``▁building.``) beside the
  word alone (``▁building``), and the model writing the first has written the term
  (``Constraint.endings``).
* **Word ends.** A constraint may name tokens that may not come right after it
  (``Constraint.not_after``): the pieces that would go on with its last word (``es`` after
  ``▁dark``: "darkes"), so that a term ends a word. The step after a beam meets such a
  constraint, those tokens are not candidates of that beam; an occurrence followed by one does
  not count as the constraint met (:func:`unmet_constraints`).
* **State.** Each beam knows which of its sentence's constraints it has met and how far it is
  into the one it is producing (``cur``, ``j``: the constraint and the tokens of it produced so
  far). A token that continues that constraint advances it; any other token abandons it (the
  progress is unwound) and, where it is the first token of an unmet constraint, starts that one
  (the first such constraint in the sentence's order). A one-token constraint is met at once.
* **Candidates.** Each beam's best ``w`` tokens, plus the token continuing its constraint in
  progress (all that can end it, at its last) and the first token of each constraint it has not
  met, whatever their probability: without them a constraint the model finds unlikely would
  never enter the beam.
* **Banks.** A candidate's bank is the number of constraint tokens it has produced (met
  constraints' tokens plus the progress). The beam is shared among the banks round-robin: the
  best candidate of each bank (the highest bank first), then the second best of each, and so
  on. So hypotheses that met more constraints keep places beside the best-scoring ones that
  met fewer, and the beam never fills with either.
* **Finishing.** ``</s>`` is allowed only for a beam that has met all its constraints. A
  sentence that reaches its length limit first keeps its best hypotheses as they are; the
  constraints they miss are reported (``Hypothesis.unmet``), never silently dropped.

Choosing the best ``2K`` candidates of a sentence in that round-robin order leaves the rest of
beam search as it is: the first ``K`` that end with ``</s>`` finish and the first ``K`` others
stay open. A sentence without constraints has one bank, where the round-robin order is the
score order, so its results are those of the unconstrained search.

Letters: n sentences, k beams each, N = n x k rows, M constraints per sentence (padded),
L tokens per constraint (padded), P candidates per row, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor

from transformer.decoding.common import Hypothesis, best_tokens
from transformer.errors import UserError

@dataclass(frozen=True)
class Constraint:
    """Token ids an output must contain, in order and contiguous; ``endings``: other tokens that
    may stand for the last one (the last piece with punctuation attached); ``not_after``: tokens
    that may not follow it (those that would glue a piece onto its last word). Constraints of one
    vocabulary share one ``not_after`` set, which the search turns into one mask."""

    tokens: tuple[int, ...]
    endings: tuple[int, ...] = ()
    not_after: frozenset[int] = field(default=frozenset(), compare=False)


Constraints = Sequence[Sequence[Sequence[int] | Constraint]]  # per sentence, its constraints


def check_constraints(constraints: Constraints, batch_size: int, *, eos_id: int) -> list[list[Constraint]]:
    """The constraints as ``Constraint`` lists, checked: one entry per sentence, each constraint a
    non-empty sequence of token ids without ``</s>`` (UserError naming the sentence otherwise)."""
    if isinstance(constraints, (str, bytes)) or len(constraints) != batch_size:
        raise UserError(f"constraints must hold one list per sentence ({batch_size}), "
                         f"got {len(constraints) if not isinstance(constraints, (str, bytes)) else 'a string'}")
    checked = []
    for b, sentence in enumerate(constraints):
        rows = []
        for c, given in enumerate(sentence):
            constraint = given if isinstance(given, Constraint) else Constraint(tuple(int(t) for t in given))
            ids = constraint.tokens + constraint.endings
            if not constraint.tokens:
                raise UserError(f"sentence {b}: constraint {c} is empty")
            if eos_id in ids:
                raise UserError(f"sentence {b}: constraint {c} contains </s> (id {eos_id})")
            if min(ids) < 0:
                raise UserError(f"sentence {b}: constraint {c} has a negative token id")
            rows.append(constraint)
        checked.append(rows)
    return checked


def unmet_constraints(tokens: Sequence[int], constraints: Sequence[Constraint]) -> tuple[int, ...]:
    """The indices of the ``constraints`` whose tokens do not occur, contiguous, in ``tokens`` (the
    last of them, or one of its endings)."""
    text = list(tokens)
    missing = []
    for c, need in enumerate(constraints):
        head, last, n = list(need.tokens[:-1]), {need.tokens[-1], *need.endings}, len(need.tokens)
        if not any(text[i : i + n - 1] == head and text[i + n - 1] in last
                   and (i + n == len(text) or text[i + n] not in need.not_after)
                   for i in range(len(text) - n + 1)):
            missing.append(c)
    return tuple(missing)


@dataclass
class RowStates:
    """Each row's progress through its sentence's constraints."""

    met: Tensor  # (N, M) bool; a padding constraint counts as met
    cur: Tensor  # (N,) the constraint in progress (meaningful where j > 0)
    j: Tensor  # (N,) its tokens produced so far; 0 = none in progress
    after: Tensor  # (N,) the set of tokens the next one may not be (0: none): the last token met a constraint

    def select(self, index: Tensor) -> RowStates:
        return RowStates(self.met[index], self.cur[index], self.j[index], self.after[index])


class ConstraintSet:
    """The constraints of the sentences still in a batch, and the progress of their beams: beam
    search's choice of a step's ``count`` (2K) candidates with constraints, answering the calls of
    ``transformer.decoding.beam.BestExtensions``, which chooses them without.

    Built from each sentence's constraints (``check_constraints``), the model (its ``best_tokens``)
    and the id of ``</s>``; ``extensions`` gives a step's candidates in bank round-robin order,
    ``follow`` keeps the rows' states in step with the beams the search keeps, ``mark_unmet`` names
    the constraints each finished hypothesis misses.
    """

    def __init__(self, constraints: list[list[Constraint]], device: torch.device, *, model, count: int,
                 eos_id: int) -> None:
        self.given, self.model, self.count, self.eos_id = constraints, model, count, eos_id
        self._candidates: tuple[RowStates, int] | None = None  # the last step's candidates' states, per sentence
        n = len(constraints)
        M = max((len(c) for c in constraints), default=0)
        L = max((len(t.tokens) for c in constraints for t in c), default=1)
        A = max((len(t.endings) for c in constraints for t in c), default=0) + 1
        self.tokens = torch.full((n, max(M, 1), L), -1, dtype=torch.long)  # (n, M, L); -1 = padding
        self.endings = torch.full((n, max(M, 1), A), -1, dtype=torch.long)  # (n, M, A): the last token or another
        self.length = torch.zeros(n, max(M, 1), dtype=torch.long)  # (n, M); 0 = no constraint
        # Each distinct not_after set once (index 0: the empty one), and the index of each constraint's.
        self._not_after: list[frozenset[int]] = [frozenset()]
        sets: dict[int, int] = {}
        self.banned_after = torch.zeros(n, max(M, 1), dtype=torch.long)  # (n, M)
        for b, sentence in enumerate(constraints):
            for c, constraint in enumerate(sentence):
                self.tokens[b, c, : len(constraint.tokens)] = torch.tensor(constraint.tokens)
                ends = (constraint.tokens[-1], *constraint.endings)
                self.endings[b, c, : len(ends)] = torch.tensor(ends)
                self.length[b, c] = len(constraint.tokens)
                if constraint.not_after:
                    key = id(constraint.not_after)
                    if key not in sets:
                        sets[key] = len(self._not_after)
                        self._not_after.append(constraint.not_after)
                    self.banned_after[b, c] = sets[key]
        self.tokens, self.endings, self.length = self.tokens.to(device), self.endings.to(device), self.length.to(device)
        self.banned_after = self.banned_after.to(device)
        self._ban_table: Tensor | None = None  # (sets, V) bool, made when V is known
        self.total = self.length.sum(dim=1)  # (n,) constraint tokens a finished hypothesis holds
        self.constrained = self.total > 0  # (n,)
        self.states = RowStates(met=self.length == 0, cur=torch.zeros(n, dtype=torch.long, device=device),
                                j=torch.zeros(n, dtype=torch.long, device=device),
                                after=torch.zeros(n, dtype=torch.long, device=device))

    def rows(self, index: Tensor, beams: int) -> None:
        """Keep the sentences ``index`` (of the current ones, each with ``beams`` rows)."""
        self.tokens, self.endings, self.length = self.tokens[index], self.endings[index], self.length[index]
        self.total, self.constrained = self.total[index], self.constrained[index]
        self.banned_after = self.banned_after[index]
        rows = (index.unsqueeze(1) * beams + torch.arange(beams, device=index.device)).flatten()
        self.states = self.states.select(rows)

    def extensions(self, logits: Tensor, beam_scores: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Each sentence's ``count`` best one-token extensions of its beams, in bank round-robin
        order (module doc); their constraint states are kept for ``follow``.

        Args:
            logits: ``(N, V)``, the beams' next-token logits.
            beam_scores: ``(n, k)``, the beams' log-probabilities.

        Returns:
            ``(scores, tokens, parents, shortfall)``, each ``(n, count)``: the extended beams'
            log-probabilities (``-inf`` for a place no candidate filled), their tokens, the row each
            extends, and the constraint tokens each still lacks.
        """
        model, count, eos_id = self.model, self.count, self.eos_id
        n, k = beam_scores.shape
        N, V = logits.shape
        device = logits.device
        sentence = torch.arange(n, device=device).repeat_interleave(k)  # (N,) each row's sentence
        w = min(count, V)
        top_scores, top_ids = best_tokens(model, logits, w)  # (N, w)
        extra_ids = self._forced_tokens(sentence)  # (N, 1 + M), -1 where none
        # The forced tokens' log-probabilities, from the full distribution (they need not be in the top w).
        wide = logits.to(top_scores.dtype)  # float32 (float64 for a float64 model), as the top tokens'
        extra_scores = wide.gather(1, extra_ids.clamp(min=0)) - wide.logsumexp(dim=-1, keepdim=True)
        # A forced token already among the row's top w, or forced twice, is the same candidate: drop the copy.
        seen = (extra_ids.unsqueeze(2) == top_ids.unsqueeze(1)).any(dim=2)  # (N, 1 + M)
        earlier = extra_ids.unsqueeze(2) == extra_ids.unsqueeze(1)  # (N, E, E)
        seen |= torch.tril(earlier, diagonal=-1).any(dim=2)
        extra_scores = extra_scores.masked_fill(seen | (extra_ids < 0), -torch.inf)
        ids = torch.cat([top_ids, extra_ids.clamp(min=0)], dim=1)  # (N, P)
        scores = beam_scores.reshape(N, 1) + torch.cat([top_scores, extra_scores], dim=1)  # (N, P)
        states, bank = self._advance(sentence, ids)  # per candidate, (N, P)
        total = self.total[sentence].unsqueeze(1)  # (N, 1)
        scores = scores.masked_fill((ids == eos_id) & (bank < total), -torch.inf)  # </s> only with all met
        if len(self._not_after) > 1:  # a term just met ends its word: no piece glued onto it
            scores = scores.masked_fill(self._banned(V, device)[self.states.after.unsqueeze(1), ids], -torch.inf)
        P = ids.shape[1]
        scores, ids, bank = scores.view(n, k * P), ids.view(n, k * P), bank.view(n, k * P)
        chosen = _round_robin(scores, bank, self.total, count)  # (n, count)
        parents = chosen // P + (torch.arange(n, device=device) * k).unsqueeze(1)
        flat = (parents * P + chosen % P).flatten()  # candidate index in (N * P)
        picked = RowStates(states.met.reshape(N * P, -1)[flat], states.cur.reshape(-1)[flat],
                           states.j.reshape(-1)[flat], states.after.reshape(-1)[flat])
        shortfall = self.total.unsqueeze(1) - bank.gather(1, chosen)
        self._candidates = (picked, chosen.shape[1])
        return scores.gather(1, chosen), ids.gather(1, chosen), parents, shortfall

    def follow(self, order: Tensor) -> None:
        """The new rows' states: the candidates ``order (n, K)`` (positions among each sentence's
        candidates of the last ``extensions``) are the open beams, sentence by sentence."""
        assert self._candidates is not None
        states, per_sentence = self._candidates
        picked = (order + (torch.arange(order.shape[0], device=order.device) * per_sentence).unsqueeze(1)).flatten()
        self.states = states.select(picked)

    def mark_unmet(self, found: list[list[Hypothesis]]) -> list[list[Hypothesis]]:
        """Set each finished hypothesis' ``unmet``: the constraints of its sentence (in input order,
        as ``found``) it does not hold."""
        for hyps, wanted in zip(found, self.given):
            for h in hyps:
                h.unmet = unmet_constraints(h.tokens, wanted)
        return found

    def _banned(self, V: int, device: torch.device) -> Tensor:
        """``(sets, V)``: which tokens each ``not_after`` set holds (row 0: none)."""
        if self._ban_table is None:
            table = torch.zeros(len(self._not_after), V, dtype=torch.bool)
            for k, tokens in enumerate(self._not_after):
                ids = [t for t in tokens if 0 <= t < V]
                if ids:
                    table[k, torch.tensor(ids)] = True
            self._ban_table = table.to(device)
        return self._ban_table

    def _forced_tokens(self, sentence: Tensor) -> Tensor:
        """``(N, A (1 + M))``: each row's next token of the constraint in progress (or, where that
        is the last, the tokens that can end it), then the first token of each constraint it has
        not met (the tokens that can end it, for a one-token constraint); -1 where there is none."""
        s = self.states
        table, length, endings = self.tokens[sentence], self.length[sentence], self.endings[sentence]
        N, A = len(sentence), endings.shape[2]
        rows = torch.arange(N, device=sentence.device)
        step = s.j.clamp(max=table.shape[2] - 1)
        nothing = torch.full((N, A - 1), -1, dtype=torch.long, device=sentence.device)
        next_tokens = torch.where((s.j + 1 == length[rows, s.cur]).unsqueeze(1), endings[rows, s.cur],
                                  torch.cat([table[rows, s.cur, step].unsqueeze(1), nothing], dim=1))  # (N, A)
        next_tokens = next_tokens.masked_fill((s.j == 0).unsqueeze(1), -1)
        firsts = torch.where((length == 1).unsqueeze(2), endings,
                             torch.cat([table[:, :, :1], nothing.unsqueeze(1).expand(-1, table.shape[1], -1)], dim=2))
        firsts = firsts.masked_fill(s.met.unsqueeze(2), -1)  # (N, M, A)
        return torch.cat([next_tokens, firsts.flatten(1)], dim=1)

    def _advance(self, sentence: Tensor, ids: Tensor) -> tuple[RowStates, Tensor]:
        """The state after each candidate token ``ids (N, P)`` of each row, and its bank."""
        s = self.states
        table, length, endings = self.tokens[sentence], self.length[sentence], self.endings[sentence]
        N, P = ids.shape
        rows = torch.arange(N, device=ids.device)
        step = s.j.clamp(max=table.shape[2] - 1)
        cur_length = length[rows, s.cur].unsqueeze(1)  # (N, 1)
        at_last = s.j.unsqueeze(1) + 1 == cur_length  # (N, 1): the next token would complete it
        ends_it = (ids.unsqueeze(2) == endings[rows, s.cur].unsqueeze(1)).any(dim=2)  # (N, P)
        continuing = (s.j > 0).unsqueeze(1) & (
            (ids == table[rows, s.cur, step].unsqueeze(1)) | (at_last & ends_it))  # (N, P)
        completes = continuing & at_last
        # Not continuing: the token may start the first unmet constraint that begins with it (a
        # one-token constraint also by one of its endings).
        starts = ids.unsqueeze(2) == table[:, :, 0].unsqueeze(1)  # (N, P, M)
        starts |= (length == 1).unsqueeze(1) & (ids.view(N, P, 1, 1) == endings.unsqueeze(1)).any(dim=3)
        starts &= ~s.met.unsqueeze(1) & ~continuing.unsqueeze(2)
        has_start = starts.any(dim=2)
        first = starts.to(torch.uint8).argmax(dim=2)  # (N, P)
        start_length = length.gather(1, first)  # (N, P)
        met_now = torch.where(completes, s.cur.unsqueeze(1), torch.where(has_start & (start_length == 1), first, -1))
        constraint = torch.arange(length.shape[1], device=ids.device)
        met = s.met.unsqueeze(1) | (constraint == met_now.unsqueeze(2))  # (N, P, M); -1 meets none
        j = torch.where(continuing & ~completes, s.j.unsqueeze(1) + 1,
                        torch.where(has_start & (start_length > 1), 1, 0))
        cur = torch.where(continuing, s.cur.unsqueeze(1), first)
        bank = (met * length.unsqueeze(1)).sum(dim=2) + j  # (N, P)
        banned_after = self.banned_after[sentence]  # (N, M)
        after = torch.where(met_now >= 0, banned_after.gather(1, met_now.clamp(min=0)), 0)  # (N, P)
        return RowStates(met, cur, j, after), bank


def _round_robin(scores: Tensor, bank: Tensor, total: Tensor, count: int) -> Tensor:
    """The positions of each sentence's ``count`` candidates in bank round-robin order: every
    bank's best (the highest bank first), then every bank's second best, ... ``(n, count)``.

    Candidates scoring ``-inf`` come last. Within a bank, equal scores keep the candidates' order.
    """
    n, C = scores.shape
    index = torch.arange(C, device=scores.device)
    same_bank = bank.unsqueeze(2) == bank.unsqueeze(1)  # (n, C, C)
    better = (scores.unsqueeze(1) > scores.unsqueeze(2)) | (
        (scores.unsqueeze(1) == scores.unsqueeze(2)) & (index.view(1, 1, C) < index.view(1, C, 1)))
    rank = (same_bank & better).sum(dim=2)  # (n, C): candidates of its bank ahead of it
    width = int(total.max()) + 1 if total.numel() else 1
    key = rank * width + (total.unsqueeze(1) - bank)
    key = key.masked_fill(scores == -torch.inf, torch.iinfo(torch.long).max)
    return key.sort(dim=1, stable=True).indices[:, :count]
