"""The Translator's decoding plan per device (``transformer/cuda/decoding.py``): on a CPU, batches of
50,000 decoder rows x output positions and a check for finished sentences at every step; on CUDA,
larger batches encoded whole and a check every few steps; on both at most 4,096 rows a batch. The
GPU's plan is run here on the CPU, where it must give exactly the CPU plan's translations
(tests/test_cuda.py compares GPU and CPU outputs on a GPU).
"""

from functools import partial

import pytest
import torch

from transformer.config import ModelConfig
from transformer.corpus.builtin import generate_pairs as generate_written_pairs
from transformer.cuda import decoding as cuda_decoding
from transformer.decoding import DecodeConfig
from transformer.model import Transformer
from transformer.text import Vocabularies
from transformer.translate.translator import CPU_BATCH_TOKENS, MAX_BATCH_ROWS, Translator

generate_pairs = partial(generate_written_pairs, written_share=0)  # the plain corpus: tiny models learn it in a few steps


@pytest.fixture(scope="module")
def vocab():
    return Vocabularies.train(generate_pairs(400, seed=1), vocab_size=400)


@pytest.fixture(scope="module")
def model(vocab):
    cfg = ModelConfig(src_vocab_size=vocab.src.vocab_size, tgt_vocab_size=vocab.tgt.vocab_size, d_model=32,
                      n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, tie_output=False, output_bias=True)
    torch.manual_seed(0)
    m = Transformer(cfg).eval()
    with torch.no_grad():
        m.output.bias[vocab.tgt.eos_id] = 0.5  # sentences end at many different steps
    return m


@pytest.fixture(scope="module")
def sentences():
    return [src for src, _ in generate_pairs(60, seed=7)]


def test_the_cpu_plan(model, vocab):
    translator = Translator(model, vocab)
    assert (translator.max_tokens, translator.sync_every) == (CPU_BATCH_TOKENS, 1)
    translator.close()
    translator = Translator(model, vocab, max_tokens=500)
    assert translator.max_tokens == 500
    translator.close()
    with pytest.raises(ValueError, match="max_tokens"):
        Translator(model, vocab, max_tokens=0)


def gpu_plan(translator: Translator, monkeypatch) -> Translator:
    """The translator decoding as it does on CUDA: the GPU's batch size and checks, batches encoded whole."""
    gpu = translator.with_decoding()
    gpu.max_tokens, gpu.sync_every = cuda_decoding.BATCH_TOKENS, cuda_decoding.SYNC_EVERY
    monkeypatch.setattr(Translator, "_encode_by_length", lambda self, *args: None)
    return gpu


@pytest.mark.parametrize("decoding", [
    DecodeConfig(strategy="greedy", max_len_b=20),
    DecodeConfig(strategy="beam", beam_size=4, alpha=0.6, max_len_b=20),
    DecodeConfig(strategy="beam", beam_size=3, n_best=3, stopping="k_finished", max_len_b=20),
    DecodeConfig(strategy="sample", n_best=2, seed=3, top_k=20, max_len_b=20),
], ids=["greedy", "beam", "n-best", "sample"])
def test_the_gpu_plan_gives_the_cpu_plans_translations(model, vocab, sentences, decoding, monkeypatch):
    cpu = Translator(model, vocab, decoding=decoding)
    want = cpu.translate_n_best(sentences)
    batches = []
    real_decode = Translator._decode_batch
    monkeypatch.setattr(Translator, "_decode_batch",
                        lambda self, seqs, *rest: batches.append(len(seqs)) or real_decode(self, seqs, *rest))
    got = gpu_plan(cpu, monkeypatch).translate_n_best(sentences)
    assert batches == [len(sentences)]  # the GPU's batches hold them all at once
    assert len({len(h[0].tokens) for h in want}) > 2  # endings at many steps: the deferred checks matter
    for g, w in zip(got, want):
        assert [h.tokens for h in g] == [h.tokens for h in w]
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-4)
    cpu.close()


@pytest.mark.parametrize("budget", [CPU_BATCH_TOKENS, cuda_decoding.BATCH_TOKENS, 10**8], ids=["cpu", "gpu", "huge"])
def test_short_inputs_fill_batches_by_rows_times_output_positions_up_to_the_row_cap(model, vocab, budget):
    """A batch costs rows x output positions (what its cache grows to), not padded source tokens:
    one-token inputs with beam 4 were batches of 160,000 rows on a GPU (tens of GB of cache, more
    rows than CUDA's attention kernels take)."""
    translator = Translator(model, vocab, max_tokens=budget)  # beam 4, outputs up to source length + 50
    ids = [[5] * (1 + i % 2) for i in range(100_000)]
    batches = translator._length_sorted_batches(list(range(len(ids))), ids)
    translator.close()
    rows = [4 * len(batch) for batch in batches]
    cost = [r * (max(len(ids[i]) for i in batch) + 50) for r, batch in zip(rows, batches)]
    assert max(rows) <= MAX_BATCH_ROWS and max(cost) <= budget
    assert rows[0] == min(4 * (budget // (4 * 51)), MAX_BATCH_ROWS)  # as many as fit
    assert sorted(i for batch in batches for i in batch) == list(range(len(ids)))


def test_the_budget_follows_the_output_limit(model, vocab, sentences):
    """Rows x (max_len_a x source length + max_len_b): a longer limit, fewer sentences a batch; the
    translations are those of one batch holding them all."""
    decoding = DecodeConfig(strategy="beam", beam_size=2, max_len_b=20)
    seen = []
    small = Translator(model, vocab, decoding=decoding, max_tokens=2 * 10 * (20 + 12))
    real_decode = small._decode_batch
    small._decode_batch = lambda seqs, *rest: seen.append(seqs) or real_decode(seqs, *rest)
    got = small.translate_n_best(sentences)
    assert len(seen) > 3 and all(2 * len(batch) * (max(map(len, batch)) + 20) <= small.max_tokens
                                 or len(batch) == 1 for batch in seen)
    same_length = [[5] * 10] * len(sentences)
    assert len(small.with_decoding(max_len_b=60)._length_sorted_batches(list(range(len(sentences))), same_length)) \
        > len(small._length_sorted_batches(list(range(len(sentences))), same_length))
    small.close()
    whole = Translator(model, vocab, decoding=decoding, max_tokens=10**9)
    assert [[h.tokens for h in hyps] for hyps in got] == \
        [[h.tokens for h in hyps] for hyps in whole.translate_n_best(sentences)]
    whole.close()
