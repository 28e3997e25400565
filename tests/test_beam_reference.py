"""Beam search against a reference written as plainly as possible: one sentence at a time, Python
lists, the whole prefix decoded again at every step (no cache), the same length penalty and the
same stopping rules ("exact" with its early stop, "k_finished"), for several beam sizes and n-best."""

import pytest
import torch
from decoding_helpers import BOS, EOS, CopiedMemoryModel, make_batch, make_model, row

from transformer.decoding import beam_search


def length_penalty(length, kind, alpha):
    return {"gnmt": ((5 + length) / 6) ** alpha, "exponent": length**alpha, "none": 1.0}[kind]


def reference_beam_search(model, src, mask, *, beam_size, n_best, kind, alpha, max_len, stopping):
    """One sentence's ``n_best`` hypotheses as ``(score, log_prob, tokens)``, best first, and the steps it ran.

    Each step extends every open beam by every token, keeps the 2K best extensions, finishes those
    among the first K that end with </s> (all K at the maximum length), and keeps the K best others.
    A hypothesis's score is its log-probability divided by lp(its tokens, </s> included).
    """
    K = beam_size
    beams = [([], 0.0)]  # (tokens, log-probability), best first
    finished = []  # (score, log-probability, tokens), best first
    n_finished = 0
    for t in range(max_len):
        extensions = []
        for tokens, log_prob in beams:
            with torch.no_grad():
                logits = model(src, torch.tensor([[BOS] + tokens]), mask)[0, -1]
            for token, token_log_prob in enumerate(logits.log_softmax(-1).tolist()):
                extensions.append((log_prob + token_log_prob, tokens, token))
        extensions.sort(key=lambda e: -e[0])
        extensions = extensions[: 2 * K]
        at_limit = t + 1 == max_len
        for log_prob, tokens, token in extensions[:K]:
            if token == EOS or at_limit:
                ended = tokens if token == EOS else tokens + [token]
                finished.append((log_prob / length_penalty(t + 1, kind, alpha), log_prob, ended))
                n_finished += 1
        finished = sorted(finished, key=lambda f: -f[0])[:n_best]  # on equal scores, the earlier first
        beams = [(tokens + [token], log_prob) for log_prob, tokens, token in extensions if token != EOS][:K]
        if at_limit:
            break
        if stopping == "k_finished" and n_finished >= K:
            break
        # "exact": no continuation of the best open beam (log-probability <= its own, length <= max_len)
        # can score more than its log-probability / lp(max_len).
        if stopping == "exact" and len(finished) == n_best and \
                finished[-1][0] >= beams[0][1] / length_penalty(max_len, kind, alpha):
            break
    return finished, t + 1


CASES = [  # seed, </s> bias, beam size, n-best, length penalty, alpha, stopping, beams share memory, sync_every
    (0, 1.5, 1, 1, "gnmt", 0.6, "exact", True, 1),
    (1, 1.0, 2, 1, "gnmt", 0.6, "exact", True, 1),
    (2, 1.0, 3, 2, "exponent", 1.0, "exact", True, 1),
    (3, 1.0, 4, 4, "none", 0.0, "exact", False, 1),
    (4, 1.5, 5, 3, "gnmt", 1.0, "exact", True, 3),
    (5, 1.5, 2, 2, "gnmt", 0.6, "k_finished", True, 1),
    (6, 1.5, 3, 1, "exponent", 0.6, "k_finished", False, 1),
    (7, 1.5, 4, 3, "none", 0.0, "k_finished", True, 4),
    (8, 1.0, 5, 5, "gnmt", 0.6, "k_finished", True, 1),
]


@pytest.mark.parametrize("seed, eos_bias, K, n_best, kind, alpha, stopping, shared, sync_every", CASES)
def test_batched_beam_search_equals_the_plain_reference(seed, eos_bias, K, n_best, kind, alpha, stopping, shared,
                                                        sync_every):
    model = make_model(seed, eos_bias=eos_bias)  # float64; sentences end at different steps
    src, mask = make_batch(seed, lengths=(6, 2, 9, 4, 1))
    max_len_b = 5
    batched = beam_search(model if shared else CopiedMemoryModel(model), src, mask, bos_id=BOS, eos_id=EOS, beam_size=K,
                          n_best=n_best, length_penalty=kind, alpha=alpha, max_len_b=max_len_b, stopping=stopping,
                          sync_every=sync_every)
    stopped_early = 0
    for i, hyps in enumerate(batched):
        max_len = int(mask[i].sum()) + max_len_b
        expected, steps = reference_beam_search(model, *row(src, mask, i), beam_size=K, n_best=n_best, kind=kind,
                                                alpha=alpha, max_len=max_len, stopping=stopping)
        assert [h.tokens for h in hyps] == [tokens for _, _, tokens in expected], f"sentence {i}"
        assert [h.score for h in hyps] == pytest.approx([score for score, _, _ in expected], abs=1e-9)
        assert [h.log_prob for h in hyps] == pytest.approx([log_prob for _, log_prob, _ in expected], abs=1e-9)
        stopped_early += steps < max_len
    assert stopped_early > 0  # the stopping rule is exercised, not only the maximum length
