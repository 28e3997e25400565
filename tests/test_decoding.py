"""Decoders: greedy and beam search (length penalty, early stopping, n-best); sampling, decode()
and DecodeConfig are in test_decoding_api.py."""

import math

import pytest
import torch
from decoding_helpers import BOS, EOS, V, CopiedMemoryModel, make_batch, make_model, row, seq_log_prob

from transformer.config import preset
from transformer.decoding import DecodeConfig, beam_search, greedy_search, length_penalty_factor, sample
from transformer.model import Transformer

# ---------------------------------------------------------------------------------------------
# A stand-in "model" with a fixed next-token table, to check scores exactly.


class PrefixCache:
    def __init__(self) -> None:
        self.prefix = None

    @property
    def length(self) -> int:
        return 0 if self.prefix is None else self.prefix.shape[1]

    def reorder(self, index):
        self.prefix = self.prefix.index_select(0, index)


class TableModel:
    """Next-token distribution = ``table[prefix]`` (prefix after ``<s>``), else ``default``.

    Every unlisted token shares the distribution's remaining mass equally.
    """

    vocab = 16

    def __init__(self, table, default):
        self.table, self.default = table, default

    def encode(self, src, src_mask=None):
        return torch.zeros(src.shape[0], src.shape[1], 1, dtype=torch.float64)

    def new_cache(self, **kwargs):
        return PrefixCache()

    def dist(self, prefix):
        spec = self.table.get(tuple(prefix), self.default)
        rest = [v for v in range(self.vocab) if v not in spec]
        p = torch.full((self.vocab,), (1.0 - sum(spec.values())) / len(rest), dtype=torch.float64)
        for v, q in spec.items():
            p[v] = q
        return p

    def decode(self, tgt, memory, src_mask=None, *, cache=None):
        assert cache is not None
        cache.prefix = tgt if cache.prefix is None else torch.cat([cache.prefix, tgt], dim=1)
        assert cache.prefix.shape[0] == memory.shape[0] == src_mask.shape[0]
        probs = torch.stack([self.dist(r[1:]) for r in cache.prefix.tolist()])  # (N, V)
        return probs.log().unsqueeze(1)  # (N, 1, V)


A, B, C, D, E = 3, 4, 5, 6, 7
ONE = (torch.tensor([[5]]), torch.tensor([[True]]))  # a one-token source


def lp_gnmt(n, alpha=0.6):
    return ((5 + n) / 6) ** alpha


def test_beam_finds_what_greedy_misses_with_exact_scores():
    # step 1: A 0.6, B 0.4; after A: </s> 0.2 and everything else below it; after B: </s> 0.9.
    table = {(): {A: 0.6, B: 0.4}, (A,): {EOS: 0.2}, (B,): {EOS: 0.9}}
    model = TableModel(table, default={EOS: 0.9})
    greedy = greedy_search(model, *ONE, bos_id=BOS, eos_id=EOS, max_len_b=6)
    assert [h.tokens for h in greedy] == [[A]]
    assert greedy[0].score == greedy[0].log_prob == pytest.approx(math.log(0.6 * 0.2), abs=1e-12)
    (best, second), = beam_search(model, *ONE, bos_id=BOS, eos_id=EOS, beam_size=2, n_best=2, max_len_b=6)
    assert best.tokens == [B] and second.tokens == [A]
    assert best.log_prob == pytest.approx(math.log(0.4 * 0.9), abs=1e-12)
    assert best.score == pytest.approx(math.log(0.36) / lp_gnmt(2), abs=1e-12)
    assert second.score == pytest.approx(math.log(0.12) / lp_gnmt(2), abs=1e-12)


@pytest.mark.parametrize("kind, alpha", [("gnmt", 1.0), ("exponent", 1.0), ("none", 0.0), ("gnmt", 0.0)])
def test_length_penalty_decides_as_the_formula_says(kind, alpha):
    # [] (</s> at once, P = 0.3) against [C, D, E] (P = 0.6 * 0.6 * 0.6 * 0.95 = 0.2052, lower).
    table = {(): {EOS: 0.3, C: 0.6}, (C,): {D: 0.6}, (C, D): {E: 0.6}, (C, D, E): {EOS: 0.95}}
    model = TableModel(table, default={EOS: 0.01})
    candidates = {(): math.log(0.3), (C, D, E): math.log(0.6 * 0.6 * 0.6 * 0.95)}

    def lp(n):
        return {"gnmt": ((5 + n) / 6) ** alpha, "exponent": n**alpha, "none": 1.0}[kind]

    normalised = {toks: logp / lp(len(toks) + 1) for toks, logp in candidates.items()}  # |Y| counts </s>
    winner = max(normalised, key=normalised.get)
    assert (winner == (C, D, E)) == (alpha == 1.0)  # the case is built so that alpha decides
    (hyp,), = beam_search(model, *ONE, bos_id=BOS, eos_id=EOS, beam_size=2, length_penalty=kind, alpha=alpha,
                          max_len_b=6)
    assert tuple(hyp.tokens) == winner
    assert hyp.score == pytest.approx(normalised[winner], abs=1e-12)
    assert hyp.log_prob == pytest.approx(candidates[winner], abs=1e-12)


def test_length_penalty_factor_formulas():
    n = torch.tensor([1, 2, 10])
    torch.testing.assert_close(length_penalty_factor(n, "gnmt", 0.6), ((5 + n.double()) / 6) ** 0.6)
    torch.testing.assert_close(length_penalty_factor(n, "exponent", 0.6), n.double() ** 0.6)
    torch.testing.assert_close(length_penalty_factor(n, "none", 0.6), torch.ones(3, dtype=torch.float64))


def test_max_length_cuts_hypotheses_without_eos():
    model = TableModel({}, default={A: 0.9})  # never ends by itself
    (hyp,), = beam_search(model, *ONE, bos_id=BOS, eos_id=EOS, beam_size=2, max_len_a=2.0, max_len_b=1)
    assert hyp.tokens == [A, A, A]  # 2 * 1 + 1 tokens, no </s>
    assert hyp.log_prob == pytest.approx(3 * math.log(0.9), abs=1e-12)
    assert hyp.score == pytest.approx(3 * math.log(0.9) / lp_gnmt(3), abs=1e-12)
    (g,) = greedy_search(model, *ONE, bos_id=BOS, eos_id=EOS, max_len_a=2.0, max_len_b=1)
    assert g.tokens == [A, A, A]


# ---------------------------------------------------------------------------------------------
# Beam search on real (random) models.


@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_equals_greedy(seed):
    model = make_model(seed)
    src, mask = make_batch(seed, lengths=(8, 3, 6, 1, 5))
    greedy = greedy_search(model, src, mask, bos_id=BOS, eos_id=EOS, max_len_b=8)
    beam = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, beam_size=1, length_penalty="none", max_len_b=8)
    for g, (b,) in zip(greedy, beam):
        assert b.tokens == g.tokens
        assert b.log_prob == pytest.approx(g.log_prob, abs=1e-9)


def reference_beam_search(model, src, mask, *, beam_size, n_best, kind, alpha, max_len_b):
    """Plain-Python beam search of one sentence, the whole prefix re-decoded at every step, no early stop."""
    K = beam_size
    limit = int(mask.sum()) + max_len_b
    beams = [([], 0.0)]
    finished = []  # (normalised, log_prob, tokens)
    for t in range(limit):
        candidates = []
        for b, (tokens, score) in enumerate(beams):
            with torch.no_grad():
                lp = model(src, torch.tensor([[BOS] + tokens]), mask)[0, -1].log_softmax(-1)
            candidates += [(score + float(lp[v]), b, v) for v in range(lp.shape[0])]
        candidates.sort(key=lambda c: -c[0])
        top = candidates[: 2 * K]
        for score, b, v in top[:K]:
            if v == EOS or t + 1 == limit:
                tokens = beams[b][0] + ([] if v == EOS else [v])
                finished.append((score / float(length_penalty_factor(torch.tensor(t + 1), kind, alpha)), score, tokens))
        beams = [(beams[b][0] + [v], score) for score, b, v in top if v != EOS][:K]
    finished.sort(key=lambda f: -f[0])
    return finished[:n_best]


@pytest.mark.parametrize("seed, K, n_best, kind", [(0, 4, 2, "gnmt"), (1, 3, 3, "exponent"), (2, 2, 1, "none")])
def test_cached_beam_search_equals_uncached_reference(seed, K, n_best, kind, engine):
    model = engine(make_model(seed))  # float64: prepared, it runs the model's code (the kernels are float32)
    src, mask = make_batch(seed, lengths=(5, 2, 4))
    beam = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, beam_size=K, n_best=n_best, length_penalty=kind,
                       alpha=1.0, max_len_b=4)
    for i, hyps in enumerate(beam):
        expected = reference_beam_search(model, *row(src, mask, i), beam_size=K, n_best=n_best, kind=kind, alpha=1.0,
                                         max_len_b=4)
        assert [h.tokens for h in hyps] == [tokens for _, _, tokens in expected]
        assert [h.score for h in hyps] == pytest.approx([s for s, _, _ in expected], abs=1e-9)
        assert [h.log_prob for h in hyps] == pytest.approx([lp for _, lp, _ in expected], abs=1e-9)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-9), (torch.float32, 1e-5)], ids=["float64", "float32"])
def test_batch_with_padding_equals_sentences_alone(dtype, tolerance, engine):
    model = engine(make_model(3).to(dtype))
    src, mask = make_batch(3, lengths=(1, 14, 2, 9, 5, 20, 3))  # sources of up to 16 tokens and longer
    batch = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=3, max_len_b=6)
    for i, hyps in enumerate(batch):
        (alone,) = beam_search(model, *row(src, mask, i), bos_id=BOS, eos_id=EOS, n_best=3, max_len_b=6)
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=tolerance)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_beams_sharing_their_sentences_memory_equal_beams_with_copies(dtype, engine):
    """Many sentences (N = 4 x 30 rows, more than one chunk of log-probabilities) finishing at
    different steps: shared memory rows and the chunked top-k give what copies give (prepared in
    float32: the kernels' shared rows and best tokens against copies and PyTorch's top-k)."""
    model = engine(make_model(5, eos_bias=0.0).to(dtype))
    assert model.supports_grouped_memory
    src, mask = make_batch(5, lengths=[1 + (7 * i) % 13 for i in range(30)])
    shared = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=2, max_len_b=8)
    copies = beam_search(CopiedMemoryModel(model), src, mask, bos_id=BOS, eos_id=EOS, n_best=2, max_len_b=8)
    assert len({len(h[0].tokens) for h in shared}) > 2  # sentences do finish at different steps
    for a, b in zip(shared, copies):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


def test_k_finished_stopping_ends_each_sentence_once_k_hypotheses_finished():
    model = make_model(7, eos_bias=0.8)
    src, mask = make_batch(7, lengths=(5, 2, 8, 3))
    counter = CountingModel(model)
    quick = beam_search(counter, src, mask, bos_id=BOS, eos_id=EOS, beam_size=3, n_best=2, max_len_b=10,
                        stopping="k_finished")
    quick_steps, counter.steps = counter.steps, 0
    exact = beam_search(counter, src, mask, bos_id=BOS, eos_id=EOS, beam_size=3, n_best=2, max_len_b=10)
    assert quick_steps <= counter.steps
    for q, e in zip(quick, exact):
        assert len(q) == 2 and q[0].score >= q[1].score
        assert q[0].score <= e[0].score + 1e-12  # the exact search never does worse
    with pytest.raises(ValueError, match="unknown stopping"):
        DecodeConfig(stopping="soon")


def test_greedy_batch_larger_than_a_chunk_equals_sentences_alone():
    model = make_model(6, eos_bias=1.0)
    src, mask = make_batch(6, lengths=[1 + (5 * i) % 11 for i in range(70)])
    batch = greedy_search(model, src, mask, bos_id=BOS, eos_id=EOS, max_len_b=6)
    for i in (0, 1, 63, 64, 69):
        (alone,) = greedy_search(model, *row(src, mask, i), bos_id=BOS, eos_id=EOS, max_len_b=6)
        assert batch[i].tokens == alone.tokens
        assert batch[i].score == pytest.approx(alone.score, abs=1e-9)


class CountingModel:
    def __init__(self, model):
        self.model, self.steps = model, 0

    def encode(self, *args):
        return self.model.encode(*args)

    def new_cache(self, **kwargs):
        return self.model.new_cache(**kwargs)

    def decode(self, *args, **kwargs):
        self.steps += 1
        return self.model.decode(*args, **kwargs)


@pytest.mark.parametrize("seed", range(4))
def test_n_best_is_sorted_distinct_and_early_stopping_changes_nothing(seed):
    src, mask = make_batch(seed, lengths=(7, 2, 5, 4))
    early, full = CountingModel(make_model(seed, eos_bias=1.5)), CountingModel(make_model(seed, eos_bias=1.5))
    for kind in ("gnmt", "none"):
        kwargs = dict(bos_id=BOS, eos_id=EOS, beam_size=4, n_best=3, length_penalty=kind, max_len_b=10)
        got = beam_search(early, src, mask, **kwargs)
        ref = beam_search(full, src, mask, **kwargs, _early_stop=False)
        for hyps, ref_hyps in zip(got, ref):
            assert len(hyps) == 3
            assert len({tuple(h.tokens) for h in hyps}) == 3
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
            assert hyps == ref_hyps
    assert early.steps < full.steps  # it did stop early


@pytest.mark.parametrize("kind", ["gnmt", "exponent"])
def test_early_stopping_bound_holds_when_the_penalty_rewards_length(kind):
    # After step 1, [] is finished (0.5) and the open beam [C] (0.45) is already worse than it
    # *at its current length*; but C D E F </s> (0.45 * 0.99^4) wins once normalised by length.
    table = {(): {EOS: 0.5, C: 0.45}, (C,): {D: 0.99}, (C, D): {E: 0.99}, (C, D, E): {A: 0.99},
             (C, D, E, A): {EOS: 0.99}}
    model = TableModel(table, default={EOS: 0.1})
    kwargs = dict(bos_id=BOS, eos_id=EOS, beam_size=2, length_penalty=kind, alpha=1.0, max_len_b=6)
    (hyp,), = beam_search(model, *ONE, **kwargs)
    assert hyp.tokens == [C, D, E, A]
    assert beam_search(model, *ONE, **kwargs, _early_stop=False) == [[hyp]]


def test_beam_log_prob_is_the_model_probability():
    model = make_model(1)
    src, mask = make_batch(1)
    for i, hyps in enumerate(beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=2, max_len_b=5)):
        limit = int(mask[i].sum()) + 5
        for h in hyps:
            ended = len(h.tokens) < limit
            assert h.log_prob == pytest.approx(seq_log_prob(model, *row(src, mask, i), h.tokens, ended=ended), abs=1e-9)
            assert h.score == pytest.approx(h.log_prob / lp_gnmt(len(h.tokens) + ended), abs=1e-9)


def test_beam_search_under_bf16_autocast(engine):
    """Beam search and sampling under bf16 autocast agree with float32: at least 7 of the 8 best
    hypotheses (and 7 of 8 samples) are the same tokens, and the scores of equal hypotheses differ
    by less than 0.05 (bf16 keeps 8 bits of mantissa; measured: 8 of 8 equal, at most 0.014 apart,
    with and without the kernels). Scores accumulate in float32 whatever the autocast dtype."""
    torch.manual_seed(0)
    model = engine(Transformer(preset("tiny", src_vocab_size=V)).eval())  # prepared: the model's code under autocast
    src, mask = make_batch(0, lengths=(8, 3, 6, 5, 7, 2, 4, 8))
    kwargs = dict(bos_id=BOS, eos_id=EOS, max_len_b=4)
    fp32 = beam_search(model, src, mask, n_best=2, **kwargs)
    fp32_samples = sample(model, src, mask, seed=0, **kwargs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        results = beam_search(model, src, mask, n_best=2, **kwargs)
        samples = sample(model, src, mask, seed=0, **kwargs)
    assert all(len(h) == 2 and all(math.isfinite(x.score) and isinstance(x.score, float) for x in h) for h in results)
    for low, ref in ((results, fp32), (samples, fp32_samples)):
        pairs = [(a[0], b[0]) for a, b in zip(low, ref)]
        assert len(pairs) == 8 and sum(a.tokens == b.tokens for a, b in pairs) >= 7
        assert all(abs(a.score - b.score) < 0.05 for a, b in pairs if a.tokens == b.tokens)


# ---------------------------------------------------------------------------------------------
# Sampling: one random stream per sentence.


@pytest.mark.parametrize("seed", range(6))
def test_a_sentence_samples_the_same_whatever_its_batch(seed):
    """With a fixed seed a sentence's samples depended on the other sentences of its batch (6 of 6
    seeds differed for a sentence alone and second in a batch): each sentence now draws from its
    own stream, seeded from the seed and the sentence."""
    model = make_model(seed % 3, eos_bias=-1.0)
    src, mask = make_batch(seed, lengths=(7, 3, 5, 6))
    kwargs = dict(bos_id=BOS, eos_id=EOS, n=3, seed=seed, max_len_b=8)
    together = sample(model, src, mask, **kwargs)
    backwards = sample(model, src.flip(0), mask.flip(0), **kwargs)[::-1]
    for i in range(4):
        alone = sample(model, *row(src, mask, i), **kwargs)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[i]] == [h.tokens for h in backwards[i]]
    assert len({tuple(h.tokens) for hyps in together for h in hyps}) > 4  # samples differ, within and across sentences
    assert sample(model, src, mask, **{**kwargs, "seed": seed + 100}) != together


def test_sampled_first_tokens_follow_the_model_distribution():
    """The per-sentence streams still sample from softmax(logits): 4,000 one-token samples of one
    sentence against the model's probabilities (sampling error about 0.008 per token)."""
    model = make_model(1, eos_bias=-1.0)
    src, mask = row(*make_batch(1), 0)
    samples = sample(model, src, mask, bos_id=BOS, eos_id=EOS, n=4000, seed=0, max_len_a=0.0, max_len_b=1)[0]
    with torch.no_grad():
        p = model(src, torch.tensor([[BOS]]), mask)[0, 0].softmax(-1)  # (V,)
    counts = torch.bincount(torch.tensor([h.tokens[0] if h.tokens else EOS for h in samples]), minlength=V)
    assert float((counts / 4000 - p).abs().max()) < 0.03
    hot = sample(model, src, mask, bos_id=BOS, eos_id=EOS, n=4000, seed=0, max_len_a=0.0, max_len_b=1,
                 temperature=0.5, top_k=5)[0]
    q = (p.log() / 0.5).softmax(-1)
    q = torch.where(q >= q.topk(5).values[-1], q, torch.zeros_like(q))
    q = q / q.sum()
    counts = torch.bincount(torch.tensor([h.tokens[0] if h.tokens else EOS for h in hot]), minlength=V)
    assert float((counts / 4000 - q).abs().max()) < 0.03 and int((counts[q == 0]).sum()) == 0
