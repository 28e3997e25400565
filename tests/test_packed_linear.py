"""The packed CPU kernel for linear layers in inference (model/packed_linear.py), float32 and int8
copies: its products against float64, where it applies and where it steps aside, the scope its
packed copies live in, frozen weights' copies kept until they change, and decoding unchanged by it."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer.config import ModelConfig
from transformer.decoding import DecodeConfig, beam_search, decode, greedy_search
from transformer.model import Transformer, fused_cpu, packed_linear

pytestmark = pytest.mark.skipif(not packed_linear.enabled(), reason="compiled CPU kernels unavailable (no C compiler)")


def _layer(K: int, N: int, bias: bool = True, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(K, N, bias=bias)
    if bias:
        nn.init.normal_(layer.bias)
    return layer


def _reference(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    y = x.double() @ layer.weight.double().t()
    return (y + layer.bias.double() if layer.bias is not None else y).float()


# N covers whole and partial panels of both widths (16 columns; 32 with AVX-512)
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 6, 7, 13, 64, 301])
@pytest.mark.parametrize("K,N", [(1, 1), (3, 15), (16, 16), (33, 17), (24, 32), (64, 40), (40, 65), (256, 100)])
def test_products_equal_float64(rows, K, N):
    for bias in (True, False):
        layer = _layer(K, N, bias)
        x = torch.randn(rows, K)
        with torch.no_grad(), packed_linear.packing():
            assert packed_linear.applies(layer, x)
            got = packed_linear.linear(layer, x)
        assert got.shape == (rows, N) and got.dtype == torch.float32 and got.is_contiguous()
        torch.testing.assert_close(got, _reference(layer, x), rtol=1e-5, atol=1e-5)


def test_many_rows_in_several_row_blocks_and_one_thread():
    layer = _layer(300, 70)  # 300 floats a row: blocks of 108 rows (128 KiB)
    x = torch.randn(1000, 300)
    expected = _reference(layer, x)
    threads = torch.get_num_threads()
    try:
        for n in (1, threads):
            torch.set_num_threads(n)
            with torch.no_grad(), packed_linear.packing():
                torch.testing.assert_close(packed_linear.linear(layer, x), expected, rtol=1e-5, atol=1e-4)
    finally:
        torch.set_num_threads(threads)


def test_shapes_strides_and_non_contiguous_weights():
    layer = _layer(32, 24)
    with torch.no_grad():
        layer.weight = nn.Parameter(torch.randn(32, 24).t())  # (24, 32) with stride (1, 24)
    base = torch.randn(5, 3, 48)
    for x in (base[..., :32],                  # rows at a stride of 48
              base.transpose(0, 1)[..., 8:40],  # a permuted view
              torch.randn(2, 3, 4, 32),         # more leading dims
              torch.randn(0, 32)):              # no rows
        with torch.no_grad(), packed_linear.packing():
            got = packed_linear.linear(layer, x)
        assert got.shape == (*x.shape[:-1], 24)
        torch.testing.assert_close(got, _reference(layer, x), rtol=1e-5, atol=1e-5)


def test_activations_relu_in_the_kernel_others_after():
    layer = _layer(20, 33)
    x = torch.randn(9, 20)
    x[0, 0] = float("nan")  # a NaN row stays NaN through the fused ReLU, as torch.relu keeps it
    with torch.no_grad(), packed_linear.packing():
        relu = packed_linear.linear(layer, x, F.relu)
        gelu = packed_linear.linear(layer, x, F.gelu)
    expected = _reference(layer, x)
    torch.testing.assert_close(relu, F.relu(expected), rtol=1e-5, atol=1e-5, equal_nan=True)
    torch.testing.assert_close(gelu, F.gelu(expected), rtol=1e-5, atol=1e-5, equal_nan=True)
    assert relu[0].isnan().all() and (relu[1:] >= 0).all()


class _Recorder:
    """Counts the packed copies made."""

    def __init__(self, monkeypatch):
        self.packs = 0
        original_pack = packed_linear._packed

        def counting_pack(weight):
            before = len(packed_linear._scopes.packs)
            result = original_pack(weight)
            self.packs += len(packed_linear._scopes.packs) - before
            return result

        monkeypatch.setattr(packed_linear, "_packed", counting_pack)


def test_where_it_applies_and_where_the_layer_runs(monkeypatch):
    layer = _layer(16, 8)
    calls = []
    original = layer.forward
    monkeypatch.setattr(layer, "forward", lambda x: calls.append(x.dtype) or original(x))
    x = torch.randn(4, 16)
    with torch.no_grad():
        packed_linear.linear(layer, x)  # outside a scope: the layer
    with packed_linear.packing():
        packed_linear.linear(layer, x)  # autograd on: the layer
        with torch.no_grad():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
                packed_linear.linear(layer, x.unsqueeze(0).expand(2, 4, 16))  # (a kernel call: views are fine)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                packed_linear.linear(layer, x)  # autocast decides the dtype: the layer
            monkeypatch.setattr(packed_linear, "_enabled", False)
            packed_linear.linear(layer, x)  # switched off
            monkeypatch.setattr(packed_linear, "_enabled", True)
            assert len(calls) == 4
            packed_linear.linear(layer, x)  # the kernel
            assert len(calls) == 4
            assert not packed_linear.applies(_layer(16, 8).double(), x.double())  # not float32
            bf16 = nn.Linear(16, 8).to(torch.bfloat16)
            assert not packed_linear.applies(bf16, x)
            from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear
            assert not packed_linear.applies(QuantizedLinear(16, 8), x)
            assert not packed_linear.applies(nn.Linear(0, 8), torch.randn(4, 0))


def test_fused_kernels_switch_turns_it_off(monkeypatch):
    monkeypatch.setattr(fused_cpu, "_enabled", False)
    with torch.no_grad(), packed_linear.packing():
        assert not packed_linear.applies(_layer(8, 8), torch.randn(2, 8))


def test_packs_live_in_the_outermost_scope(monkeypatch):
    rec = _Recorder(monkeypatch)
    a, b = _layer(16, 8, seed=1), _layer(16, 8, seed=2)
    x = torch.randn(3, 16)
    with torch.no_grad(), packed_linear.packing():
        for _ in range(3):
            packed_linear.linear(a, x)
            with packed_linear.packing():  # nested: the same copies
                packed_linear.linear(b, x)
        assert rec.packs == 2
    assert getattr(packed_linear._scopes, "packs", None) is None
    with torch.no_grad(), packed_linear.packing():
        packed_linear.linear(a, x)
        first = packed_linear._scopes.packs[id(a.weight)][1].packed
    with torch.no_grad(), packed_linear.packing():
        packed_linear.linear(a, x)
        assert packed_linear._scopes.packs[id(a.weight)][1].packed.data_ptr() == first.data_ptr()  # same memory
    assert rec.packs == 4  # each new scope packs again


def test_a_training_step_between_two_decodes_is_seen(monkeypatch):
    """Fused Adam updates weights in place without bumping their version counters: the copies
    must not outlive the decoding call that made them."""
    cfg = ModelConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=1,
                      n_decoder_layers=1, dropout=0.0)
    torch.manual_seed(3)
    model = Transformer(cfg)
    src = torch.randint(4, 40, (3, 7))
    mask = torch.ones_like(src, dtype=torch.bool)
    greedy_search(model.eval(), src, mask, bos_id=1, eos_id=2, max_len_a=0, max_len_b=6)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05, fused=True)
    model.train()
    version = model.output.weight._version
    model(src, src[:, :5], mask).logsumexp(-1).sum().backward()
    optimizer.step()
    assert model.output.weight._version == version  # the case this guards against
    model.eval()
    after = greedy_search(model, src, mask, bos_id=1, eos_id=2, max_len_a=0, max_len_b=6)
    monkeypatch.setattr(packed_linear, "_enabled", False)
    expected = greedy_search(model, src, mask, bos_id=1, eos_id=2, max_len_a=0, max_len_b=6)
    assert [h.tokens for h in after] == [h.tokens for h in expected]


def dequantized(weight: torch.Tensor) -> torch.Tensor:
    """The float32 weights an int8 copy stands for: per output feature, scale = max |w| / 127 and
    w ~ round(w * 127 / max |w|) * scale (the same float32 arithmetic as pack_s8)."""
    most = weight.abs().amax(dim=1, keepdim=True)
    inv = torch.where(most > 0, torch.full_like(most, 127.0) / most, torch.zeros_like(most))  # 127 / most, not
    # most.reciprocal() * 127 (what 127.0 / most computes): 1 ulp apart, now and then another rounding
    return torch.round(weight * inv).clamp(-127, 127) * (most / 127.0)


@pytest.mark.parametrize("rows", [1, 2, 5, 6, 13, 64])
@pytest.mark.parametrize("K,N", [(1, 1), (3, 15), (33, 17), (40, 65), (256, 100)])
def test_int8_weights_equal_float64_with_the_quantised_weights(rows, K, N):
    for bias in (True, False):
        layer = _layer(K, N, bias)
        with torch.no_grad():
            layer.weight[0] = 0.0  # a feature with no weight: scale 0
        x = torch.randn(rows, K)
        with torch.no_grad(), packed_linear.packing(int8=True):
            got = packed_linear.linear(layer, x)
            relu = packed_linear.linear(layer, x, F.relu)
        reference = nn.Linear(K, N, bias=bias)
        with torch.no_grad():
            reference.weight.copy_(dequantized(layer.weight))
            if bias:
                reference.bias.copy_(layer.bias)
        expected = _reference(reference, x)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(relu, expected.clamp_min(0.0), rtol=1e-5, atol=1e-5)
        # and close to the float32 layer: each weight off by at most half a step
        step = layer.weight.abs().amax(dim=1) / 127.0
        bound = 0.5 * x.abs().sum(dim=1, keepdim=True) * step + 1e-5
        assert ((got - _reference(layer, x)).abs() <= bound).all()


def test_int8_and_float32_copies_are_kept_apart(monkeypatch):
    layer = _layer(40, 24).requires_grad_(False)
    x = torch.randn(4, 40)
    with torch.no_grad():
        for _ in range(2):
            with packed_linear.packing(int8=True):
                int8 = packed_linear.linear(layer, x)
                with packed_linear.packing():  # nested: the outer scope's format
                    torch.testing.assert_close(packed_linear.linear(layer, x), int8, rtol=0, atol=0)
            with packed_linear.packing():
                f32 = packed_linear.linear(layer, x)
    torch.testing.assert_close(f32, _reference(layer, x), rtol=1e-5, atol=1e-5)
    assert (int8 - f32).abs().max() > 0
    assert set(packed_linear._copies[layer.weight]) == {"f32", "int8"}


def count_packing(monkeypatch, function: str = "pack_f32") -> list[int]:
    """Counts the weights packed (``pack_f32`` or ``pack_s8`` calls; their N), whether into new or
    kept copies."""
    calls = []
    lib = fused_cpu.library()
    original = getattr(lib, function)
    monkeypatch.setattr(lib, function, lambda *args: calls.append(args[1]) or original(*args))
    return calls


def _kernel_output(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), packed_linear.packing():
        assert packed_linear.applies(layer, x)
        return packed_linear.linear(layer, x)


def test_frozen_weights_keep_their_copies_until_they_change(monkeypatch):
    calls = count_packing(monkeypatch)
    layer = _layer(24, 20).requires_grad_(False)
    x = torch.randn(5, 24)
    for _ in range(3):
        torch.testing.assert_close(_kernel_output(layer, x), _reference(layer, x), rtol=1e-5, atol=1e-5)
    assert len(calls) == 1  # packed once for three scopes

    with torch.no_grad():
        layer.weight.mul_(-2.0)  # an in-place write bumps the version counter
    torch.testing.assert_close(_kernel_output(layer, x), _reference(layer, x), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2

    layer.weight.data = torch.randn(20, 24)  # other memory
    torch.testing.assert_close(_kernel_output(layer, x), _reference(layer, x), rtol=1e-5, atol=1e-5)
    assert len(calls) == 3

    layer.weight.data.add_(1.0)  # not seen by the version counter: forget() says so
    packed_linear.forget()
    torch.testing.assert_close(_kernel_output(layer, x), _reference(layer, x), rtol=1e-5, atol=1e-5)
    assert len(calls) == 4
    _kernel_output(layer, x)
    assert len(calls) == 4


def test_frozen_inference_tensors_are_packed_in_every_scope(monkeypatch):
    """Weights made under inference_mode have no version counter: not kept, not an error."""
    calls = count_packing(monkeypatch)
    with torch.inference_mode():
        layer = _layer(16, 8).requires_grad_(False)
        x = torch.randn(3, 16)
        for _ in range(2):
            torch.testing.assert_close(_kernel_output(layer, x), _reference(layer, x), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2


def test_int8_copies_of_odd_weights():
    layer = _layer(20, 3, bias=False)
    x = torch.randn(2, 20)
    with torch.no_grad():
        layer.weight[0] = 1e-39  # too small for 127 / max |w|: quantised to 0, no undefined conversion
        layer.weight[1, 5] = float("nan")  # a NaN weight gives NaN outputs, as in float32
    with torch.no_grad(), packed_linear.packing(int8=True):
        got = packed_linear.linear(layer, x)
    assert (got[:, 0] == 0).all() and got[:, 1].isnan().all()
    torch.testing.assert_close(got[:, 2], _reference(layer, x)[:, 2], rtol=1e-2, atol=1e-2)


def test_an_optimizer_step_makes_kept_copies_stale(monkeypatch):
    """Fine-tuning a frozen layer: unfrozen, a fused-Adam step (which leaves the version counter
    as it was), frozen again. The step of any torch.optim optimizer drops every kept copy."""
    calls = count_packing(monkeypatch)
    layer = _layer(16, 8).requires_grad_(False)
    x = torch.randn(3, 16)
    _kernel_output(layer, x)
    layer.requires_grad_(True)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.5, fused=True)
    version = layer.weight._version
    layer(x).square().sum().backward()
    optimizer.step()
    assert layer.weight._version == version
    layer.requires_grad_(False)
    torch.testing.assert_close(_kernel_output(layer, x), _reference(layer, x), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2


def test_trainable_weights_are_packed_in_every_scope(monkeypatch):
    calls = count_packing(monkeypatch)
    layer = _layer(16, 8)
    assert layer.weight.requires_grad
    for _ in range(2):
        _kernel_output(layer, torch.randn(2, 16))
    assert len(calls) == 2


def _model() -> tuple[Transformer, torch.Tensor, torch.Tensor]:
    cfg = ModelConfig(src_vocab_size=80, tgt_vocab_size=80, d_model=48, n_heads=4, d_ff=96, n_encoder_layers=2,
                      n_decoder_layers=2)
    torch.manual_seed(4)
    model = Transformer(cfg).eval()
    src = torch.randint(4, 80, (7, 11))
    mask = torch.ones_like(src, dtype=torch.bool)
    mask[3, 6:] = False
    return model, src, mask


def test_decoding_uses_it_and_is_unchanged(monkeypatch):
    model, src, mask = _model()
    used = []
    original = packed_linear._linear
    monkeypatch.setattr(packed_linear, "_linear", lambda *a, **k: used.append(1) or original(*a, **k))
    results = {}
    for on in (True, False):
        monkeypatch.setattr(packed_linear, "_enabled", on)
        greedy = greedy_search(model, src, mask, bos_id=1, eos_id=2, max_len_a=0, max_len_b=10)
        beam = beam_search(model, src, mask, bos_id=1, eos_id=2, beam_size=3, max_len_a=0, max_len_b=10)
        results[on] = ([h.tokens for h in greedy], [[h.tokens for h in hs] for hs in beam])
        if on:
            assert used, "decoding did not run the packed kernel"
            used.clear()
    assert not used
    assert results[True] == results[False]


def test_logits_through_the_kernel_equal_float64():
    model, src, mask = _model()
    hidden = torch.randn(5, 1, 48)
    with torch.no_grad(), packed_linear.packing():
        assert packed_linear.applies(model.output, hidden)
        got = model._logits(hidden)
    torch.testing.assert_close(got, _reference(model.output, hidden), rtol=1e-5, atol=1e-5)


def test_translator_packs_once_for_all_batches(monkeypatch):
    from transformer.text import Vocabularies
    from transformer.translate.translator import Translator

    words = [f"w{i}x" for i in range(40)]
    pairs = [(" ".join(words[i:i + 4]), " ".join(words[i + 1:i + 5])) for i in range(36)] * 3
    vocab = Vocabularies.train(pairs, vocab_size=300)
    V = vocab.src.vocab_size
    cfg = ModelConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=1,
                      n_decoder_layers=1)
    torch.manual_seed(5)
    model = Transformer(cfg).eval()
    rec = _Recorder(monkeypatch)
    translator = Translator(model, vocab, decoding=DecodeConfig(strategy="greedy", max_len_a=0, max_len_b=5),
                            max_tokens=12)
    texts = [" ".join(words[i:i + 3]) for i in range(10)]
    assert len(translator._length_sorted_batches(list(range(10)), translator.encode_sources(texts))) > 2
    translator.translate(texts)
    n_weights = len({id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)})
    assert rec.packs == n_weights  # each weight once, not once per batch


def test_decode_config_entry_point_unchanged(monkeypatch):
    model, src, mask = _model()
    cfg = DecodeConfig(strategy="beam", beam_size=2, max_len_a=0, max_len_b=8)
    outputs = []
    for on in (True, False):
        monkeypatch.setattr(packed_linear, "_enabled", on)
        outputs.append([[h.tokens for h in hs] for hs in decode(model, src, mask, cfg, bos_id=1, eos_id=2)])
    assert outputs[0] == outputs[1]


def test_rows_wider_than_a_row_block():
    layer = _layer(40000, 3)  # 160 KB a row: more than the kernel's row block
    for rows in (1, 2):
        x = torch.randn(rows, 40000)
        with torch.no_grad(), packed_linear.packing():
            got = packed_linear.linear(layer, x)
        torch.testing.assert_close(got, _reference(layer, x), rtol=1e-4, atol=1e-4)
