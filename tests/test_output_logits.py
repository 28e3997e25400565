"""The decoding steps' logits (the pre-softmax projection of paper 3.4, applied to the decoder's
last hidden state) equal the float64 product, whether the CPU engine's packed product computes
them or PyTorch's (``engine``), tied to the target embedding or with a weight and bias of their own."""

import pytest
import torch

from transformer.config import ModelConfig
from transformer.cpu import decoding as cpu_decoding
from transformer.model import Transformer


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "own-weight-and-bias"])
@pytest.mark.parametrize("rows", [1, 5, 64])
def test_decoding_step_logits_equal_float64(tied, rows, engine):
    cfg = ModelConfig(src_vocab_size=300, tgt_vocab_size=300, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=1,
                      n_decoder_layers=1, output_bias=not tied, tie_output=tied)
    torch.manual_seed(rows)
    model = Transformer(cfg).eval()
    if not tied:
        torch.nn.init.normal_(model.output.bias)
    embedding = model.decoder.embed.tokens.weight
    engine(model)
    assert (model.output.weight is embedding) == tied  # preparing keeps the tie
    assert (type(model.output) is cpu_decoding.PackedLinear) == engine.on
    seen = []
    hook = model.output.register_forward_hook(lambda module, args, out: seen.append((args[0], out)))
    src = torch.randint(4, 300, (rows, 7))
    mask = torch.ones_like(src, dtype=torch.bool)
    with torch.inference_mode():
        memory = model.encode(src, mask)
        cache = model.new_cache()
        for token in (torch.full((rows, 1), 1), torch.randint(4, 300, (rows, 1))):  # two steps
            logits = model.decode(token, memory, mask, cache=cache)
    hook.remove()
    assert len(seen) == 2 and logits.shape == (rows, 1, 300)
    for hidden, out in seen:
        expected = hidden.double() @ model.output.weight.double().t()
        if not tied:
            expected += model.output.bias.double()
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits, seen[-1][1], rtol=0, atol=0)
