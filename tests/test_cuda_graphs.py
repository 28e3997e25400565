"""On a CUDA GPU: the CUDA engine's decoder steps (``transformer/cuda/decoding_steps.py``) captured in
CUDA graphs give the tokens of the model's own cache and of the same steps run eagerly; a replayed
step never waits for the GPU; the Translator applies them on CUDA and gives them back on close().

Skipped where PyTorch sees no CUDA device; on the CPU, tests/test_static_steps.py checks the same
steps eagerly and with their step functions replayed as a graph would."""

import copy

import pytest
import torch
from decoding_helpers import BOS, EOS, make_batch, make_model

from transformer.config import preset
from transformer.corpus.builtin import generate_pairs
from transformer.cuda import decoding_steps
from transformer.cuda.decoding_steps import StaticSteps, StaticStepsTransformer, accelerate_decoding
from transformer.decoding import DecodeConfig, beam_search, decode
from transformer.model import Transformer
from transformer.text import Vocabularies
from transformer.translate.translator import Translator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device: these check the CUDA graphs on a machine with one")

LENGTHS = (8, 3, 6, 1, 7, 2, 5, 4, 8, 3)
CONSTRAINTS = [[[5, 6]], [], [[7]], [[9, 3], [4]], [], [[11]], [], [[12, 13, 14]], [[8]], []]
CONFIGS = [DecodeConfig(strategy="greedy", max_len_b=40), DecodeConfig(strategy="beam", beam_size=4, max_len_b=40),
           DecodeConfig(strategy="beam", beam_size=4, n_best=3, max_len_b=40)]


class Counted(StaticSteps):
    """``StaticSteps`` that keep every instance, to count their captures and replays."""

    made: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        Counted.made.append(self)


def decode_all(model, src, mask, **options):
    found = [decode(model, src, mask, cfg, bos_id=BOS, eos_id=EOS, sync_every=8, **options) for cfg in CONFIGS]
    found.append(beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, beam_size=4, n_best=2, max_len_b=40,
                             constraints=CONSTRAINTS, sync_every=8, **options))
    return [[[(h.tokens, h.score, h.unmet) for h in hyps] for hyps in result] for result in found]


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_graphs_give_the_tokens_of_the_eager_steps_and_of_the_models_cache(dtype, monkeypatch):
    """float64: token for token, scores to rounding (near-ties of a random model do not flip);
    bf16: graphs are captured and replayed, and the tokens mostly those of the eager steps."""
    model = make_model(7, eos_bias=-0.4).to("cuda", dtype)
    src, mask = (x.cuda() for x in make_batch(3, lengths=LENGTHS))
    monkeypatch.setattr(decoding_steps, "StaticSteps", Counted)
    Counted.made = []
    swaps = accelerate_decoding(model, graphs=True)
    graphed = decode_all(model, src, mask)
    assert sum(s.captured for s in Counted.made) > 4 and sum(s.replayed for s in Counted.made) > 100
    assert all(s.graphs for s in Counted.made)  # no capture failed
    swaps.undo()
    swaps = accelerate_decoding(model, graphs=False)
    eager = decode_all(model, src, mask)
    swaps.undo()
    references = [eager] if dtype == torch.bfloat16 else [eager, decode_all(model, src, mask, static_cache=False)]
    for reference in references:
        same = total = 0
        for g, r in zip(graphed, reference):
            for a, b in zip(g, r):
                total += 1
                same += [h[0] for h in a] == [h[0] for h in b]
                if dtype == torch.float64:
                    assert [h[0] for h in a] == [h[0] for h in b]
                    assert [h[1] for h in a] == pytest.approx([h[1] for h in b], abs=1e-9)
                    assert [h[2] for h in a] == [h[2] for h in b]
        assert same >= 0.9 * total, (same, total)


def test_a_replayed_step_never_waits_for_the_gpu():
    model = make_model(1).to("cuda", torch.float32)
    src, mask = (x.cuda() for x in make_batch(1, lengths=(5, 3, 4)))
    with torch.inference_mode():
        memory = model.encode(src, mask)
        steps = StaticSteps(model, memory, mask, steps=20, rows=12, graphs=True)
        tokens = torch.full((3,), BOS, device="cuda")
        steps.logits(tokens)  # one row per sentence, then 4 beams each
        beams = torch.arange(3, device="cuda").repeat_interleave(4)
        steps.reorder(beams)
        tokens = torch.full((12,), BOS, device="cuda")
        for _ in range(4):  # warm-up, then capture, for each of the two key sets
            steps.logits(tokens)
            steps.reorder(torch.arange(12, device="cuda").flip(0))
        assert steps.captured == 2
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(6):
                logits = steps.logits(tokens)
                steps.reorder(torch.arange(12, device="cuda").flip(0))
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert steps.replayed == 8 and logits.shape == (12, model.config.tgt_vocab_size)


def test_the_translator_decodes_with_the_graphs_on_cuda_and_gives_the_model_back():
    pairs = generate_pairs(200, seed=1, written_share=0)
    vocab = Vocabularies.train(pairs, vocab_size=300)
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size, tgt_vocab_size=vocab.tgt.vocab_size))
    reference = copy.deepcopy(model)
    translator = Translator(model, vocab, device="cuda")
    assert type(translator.model) is StaticStepsTransformer
    cpu = Translator(reference, vocab)
    sentences = [s for s, _ in pairs[:20]]
    same = [a == b for a, b in zip(translator.translate(sentences), cpu.translate(sentences))]
    assert sum(same) >= len(sentences) - 1, same  # fp32 both: a near-tie may flip
    translator.close()
    cpu.close()
    assert type(model) is Transformer
