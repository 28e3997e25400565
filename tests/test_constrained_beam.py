"""Lexically constrained beam search (dynamic beam allocation) against a reference written as
plainly as possible: one sentence at a time, Python lists, every token of the vocabulary tried
from every beam, the whole prefix decoded again at each step, the banks shared round-robin."""

import pytest
import torch
from decoding_helpers import BOS, EOS, V, CopiedMemoryModel, make_batch, make_model, row

from transformer.decoding import DecodeConfig, beam_search, decode
from transformer.decoding.constraints import Constraint, check_constraints, unmet_constraints


def length_penalty(length, alpha):
    return ((5 + length) / 6) ** alpha


def fits(constraint, position, token):
    """Whether ``token`` may stand at ``position`` of ``constraint``: its own token, or for the last
    position one of its endings."""
    tokens = constraint.tokens
    return token == tokens[position] or (position == len(tokens) - 1 and token in constraint.endings)


def advance(state, token, constraints):
    """The state ``(met, cur, j, after)`` after ``token``: continue the constraint in progress, else
    start the first unmet constraint beginning with ``token`` (progress on another is lost);
    ``after``: the tokens that may not come next (the ``not_after`` of a constraint just met)."""
    met, cur, j, _ = state
    if j > 0 and fits(constraints[cur], j, token):
        if j + 1 == len(constraints[cur].tokens):
            return met | {cur}, -1, 0, constraints[cur].not_after
        return met, cur, j + 1, frozenset()
    for c, constraint in enumerate(constraints):
        if c not in met and fits(constraint, 0, token):
            if len(constraint.tokens) == 1:
                return met | {c}, -1, 0, constraint.not_after
            return met, c, 1, frozenset()
    return met, -1, 0, frozenset()


def bank(state, constraints):
    met, _, j, _ = state
    return sum(len(constraints[c].tokens) for c in met) + j


def reference(model, src, mask, constraints, *, beam_size, n_best, alpha, max_len):
    """One sentence's ``n_best`` hypotheses as ``(score, log_prob, tokens, shortfall)``, best first."""
    K, total = beam_size, sum(len(c.tokens) for c in constraints)
    beams = [([], 0.0, (frozenset(), -1, 0, frozenset()))]
    finished, n_finished = [], 0
    for t in range(max_len):
        candidates = []  # (score, bank, tokens, token, state), beam by beam, token by token
        for tokens, log_prob, state in beams:
            with torch.no_grad():
                logits = model(src, torch.tensor([[BOS] + tokens]), mask)[0, -1]
            for token, token_log_prob in enumerate(logits.log_softmax(-1).tolist()):
                if token in state[3]:
                    continue  # a piece glued onto the term just met
                new = advance(state, token, constraints)
                if token == EOS and bank(new, constraints) < total:
                    continue  # </s> only once every constraint is met
                candidates.append((log_prob + token_log_prob, bank(new, constraints), tokens, token, new))
        ranks = {}
        keyed = []
        for c in sorted(candidates, key=lambda c: -c[0]):  # stable: equal scores keep their order
            rank = ranks.get(c[1], 0)
            ranks[c[1]] = rank + 1
            keyed.append((rank * (total + 1) + (total - c[1]), c))
        chosen = [c for _, c in sorted(keyed, key=lambda kc: kc[0])][: 2 * K]
        at_limit = t + 1 == max_len
        for log_prob, b, tokens, token, _ in chosen[:K]:
            if token == EOS or at_limit:
                ended = tokens if token == EOS else tokens + [token]
                finished.append((log_prob / length_penalty(t + 1, alpha), log_prob, ended, total - b))
                n_finished += 1
        finished = sorted(sorted(finished, key=lambda f: -f[0]), key=lambda f: f[3])[:n_best]
        beams = [(tokens + [token], log_prob, state) for log_prob, _, tokens, token, state in chosen
                 if token != EOS][:K]
        if at_limit:
            break
        if total and n_finished >= K:
            break
        best_open = max(log_prob for _, log_prob, _ in beams)
        if len(finished) == n_best and finished[-1][0] >= best_open / length_penalty(max_len, alpha):
            break
    return finished


GLUE = frozenset({4, 6, 14})  # the tokens that may not follow a term that ends a word
CONSTRAINTS = [[Constraint((5, 6, 7), not_after=GLUE)], [], [Constraint((9,), endings=(10, 13), not_after=GLUE), [11, 4]],
               [Constraint((3, 3), endings=(8,))]]
CHECKED = check_constraints(CONSTRAINTS, 4, eos_id=EOS)


@pytest.mark.parametrize("seed,beam_size,n_best,copied", [
    (0, 4, 1, False), (1, 3, 2, False), (2, 5, 3, True), (3, 2, 1, False), (4, 1, 1, False),
])
def test_batched_search_equals_the_plain_reference(seed, beam_size, n_best, copied):
    model = make_model(seed, eos_bias=1.0)
    src, mask = make_batch(seed, lengths=(8, 3, 6, 5))
    decoder = CopiedMemoryModel(model) if copied else model
    got = beam_search(decoder, src, mask, bos_id=BOS, eos_id=EOS, beam_size=beam_size, n_best=n_best,
                      constraints=CONSTRAINTS)
    for i, wanted in enumerate(CHECKED):
        s, m = row(src, mask, i)
        ref = reference(model, s, m, wanted, beam_size=beam_size, n_best=n_best, alpha=0.6,
                        max_len=int(m.sum()) + 50)
        assert [h.tokens for h in got[i]] == [r[2] for r in ref], f"sentence {i}"
        assert [h.score for h in got[i]] == pytest.approx([r[0] for r in ref], abs=1e-9)
        assert [h.log_prob for h in got[i]] == pytest.approx([r[1] for r in ref], abs=1e-9)
        for h in got[i]:
            assert h.unmet == unmet_constraints(h.tokens, wanted) == ()


def test_every_constraint_appears_and_a_sentence_without_is_searched_as_before():
    model = make_model(5, eos_bias=1.0)
    src, mask = make_batch(5, lengths=(7, 4, 6, 5))
    plain = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=2)
    got = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=2, constraints=CONSTRAINTS)
    assert got[1] == plain[1]  # no constraints: the unconstrained search's hypotheses
    for hyps, wanted in zip(got, CHECKED):
        assert unmet_constraints(hyps[0].tokens, wanted) == ()  # the best holds every constraint
        for h in hyps:  # a hypothesis cut at the length limit says what it misses
            assert h.unmet == unmet_constraints(h.tokens, wanted)
    assert got[0] != plain[0] and got[2] != plain[2]


def test_no_constraints_at_all_changes_nothing():
    model = make_model(6)
    src, mask = make_batch(6)
    plain = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=3)
    assert beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=3, constraints=[[], [], []]) == plain


def test_a_constraint_longer_than_the_length_limit_is_reported_not_dropped():
    model = make_model(7)
    src, mask = make_batch(7, lengths=(4, 3))
    too_long = [list(range(3, 10))]  # 7 tokens; the limit is source length + 2
    got = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, max_len_b=2, constraints=[too_long, [[4]]])
    assert got[0][0].unmet == (0,)
    assert got[1][0].unmet == () and 4 in got[1][0].tokens


def test_decode_refuses_constraints_without_beam_search():
    model = make_model(8)
    src, mask = make_batch(8, lengths=(4,))
    for cfg in (DecodeConfig("greedy"), DecodeConfig("sample", seed=1)):
        with pytest.raises(ValueError, match="beam search"):
            decode(model, src, mask, cfg, bos_id=BOS, eos_id=EOS, constraints=[[[5]]])
    got = decode(model, src, mask, DecodeConfig(), bos_id=BOS, eos_id=EOS, constraints=[[[5, 9]]])
    assert got[0][0].unmet == ()


@pytest.mark.parametrize("bad,message", [
    ([[[5]]], "one list per sentence"),
    ([[[]], []], "empty"),
    ([[[5, EOS]], []], "</s>"),
])
def test_bad_constraints_are_refused(bad, message):
    model = make_model(9)
    src, mask = make_batch(9, lengths=(4, 3))
    with pytest.raises(ValueError, match=message):
        beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, constraints=bad)


def test_sync_every_gives_the_same_constrained_results():
    model = make_model(10, eos_bias=1.0)
    src, mask = make_batch(10, lengths=(8, 3, 6, 5))
    once = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, constraints=CONSTRAINTS)
    assert beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, constraints=CONSTRAINTS, sync_every=3) == once
    assert V > 12


@pytest.mark.parametrize("seed, term", [(11, 9), (12, 7), (14, 9), (18, 5)])
def test_a_term_that_ends_a_word_is_not_glued_to_the_next_piece(seed, term):
    # Unbanned, the best hypothesis writes the term then a piece that goes on with its word ("dark"
    # then "es": "darkes"); with that piece in not_after it is never right after the term, and the
    # check that a hypothesis holds the term agrees with the search.
    model = make_model(seed, eos_bias=1.0)
    src, mask = make_batch(seed, lengths=(6,))
    free = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, constraints=[[[term]]])[0][0].tokens
    glued = free[free.index(term) + 1]
    constraint = Constraint((term,), not_after=frozenset({glued}))
    assert unmet_constraints(free, [constraint]) == (0,)
    for hyp in beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=3, constraints=[[constraint]])[0]:
        assert hyp.unmet == unmet_constraints(hyp.tokens, [constraint])
        assert hyp.unmet or any(t == term and hyp.tokens[k + 1:k + 2] != [glued] for k, t in enumerate(hyp.tokens))
    assert beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=1, constraints=[[constraint]])[0][0].unmet == ()
