"""The training engine (transformer/cpu/training.py) equals the model: ``accelerate_training``
swaps a ``Transformer``'s modules for kernel-backed subclasses; with the same weights and no
dropout, the loss and every parameter's gradient are the unswapped model's (float32: to
rounding; bf16 autocast: within bf16's own noise), the kernels really run, and everything the
kernels do not take falls back to the model's code.

Tolerances (measured on this tiny model over six seeds, both post-LN and pre-LN):
* float32: loss within 1e-7 relative, gradients within 2e-6 of each parameter's largest
  gradient; asserted: rtol 1e-4 with atol 1e-5 * max |gradient| per parameter.
* bf16 autocast: bf16 rounding makes the model's own gradients differ from its float32 ones by
  up to 15% (per parameter, in norm) and 4.5% (all of them); the engine's differ from the
  model's by as much (up to 15% and 4.4%), the loss by up to 5e-4 relative. Asserted: 30% per
  parameter, 10% over all, 2e-3 for the loss.
"""

import copy
import os

import pytest
import torch
from torch import nn

from transformer.config import preset
from transformer.cpu import Swaps, accelerate_training, build, ops, training
from transformer.model import Transformer
from transformer.model.attention import CrossAttention, SelfAttention
from transformer.model.layers import AddNorm, DecoderLayer
from transformer.model.loss import LabelSmoothedCrossEntropy

pytestmark = pytest.mark.skipif(not build.available() and not os.environ.get("CI"),
                                reason="no C compiler (or TRANSFORMER_FUSED_CPU=0): the CPU kernels are not built")

V, PAD = 40, 0
WRAPPERS = ("dropout", "dropout_add_layer_norm", "attention", "smoothed_nll")


def make_model(norm_first: bool, seed: int = 0, **overrides) -> Transformer:
    """The tiny preset (2 + 2 layers, d_model 32, 4 heads) with non-trivial LayerNorms and biases."""
    torch.manual_seed(seed)
    model = Transformer(preset("tiny", src_vocab_size=V, norm_first=norm_first, **overrides)).train()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.add_(0.05 * torch.randn_like(p))
    return model


def batch(B=4, S=9, T=8):
    """Source with padding, shifted targets with padding (as the trainer feeds them)."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, V, (B, S), generator=g)
    tgt = torch.randint(4, V, (B, T + 1), generator=g)
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[1, 6:] = False
    keep[3, 2:] = False
    tgt[2, 5:] = PAD
    return src, tgt[:, :-1], tgt[:, 1:], keep


def train_step(model, *, cpu_kernel: bool, bf16: bool = False, data=None):
    """The trainer's forward and backward: ``(loss, {name: gradient})``."""
    src, tgt_in, tgt_out, keep = data or batch()
    model.zero_grad(set_to_none=True)
    criterion = LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=PAD)
    if cpu_kernel:
        accelerate_training(criterion)  # the engine's one-pass loss, as the trainer applies it
    real = tgt_out != PAD
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(src, tgt_in, keep, positions=real)
        loss, _ = criterion(logits, tgt_out[real])
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def engine_copy(model):
    engine = copy.deepcopy(model)
    swaps = accelerate_training(engine)
    assert swaps.changed
    return engine


@pytest.fixture
def calls(monkeypatch):
    """How often each ops wrapper the engine calls ran (the wrappers still run)."""
    counts = dict.fromkeys(WRAPPERS, 0)
    for name in WRAPPERS:
        def counted(*args, _real=getattr(ops, name), _name=name, **kwargs):
            counts[_name] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(ops, name, counted)
    return counts


# the calls of one training step of the tiny model: 2 encoder layers (self-attention, 2 Add &
# Norm each), 2 decoder layers (self- and cross-attention, 3 Add & Norm each), one loss
KERNEL_CALLS = {False: dict(dropout=0, dropout_add_layer_norm=10, attention=6, smoothed_nll=1),
                True: dict(dropout=0, dropout_add_layer_norm=0, attention=6, smoothed_nll=1)}  # pre-LN: x + sub


# ------------------------------------------------------------------------- engine == model
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_engine_equals_model_fp32(norm_first, calls):
    model = make_model(norm_first)
    engine = engine_copy(model)
    loss, grads = train_step(model, cpu_kernel=False)
    assert not any(calls.values())
    engine_loss, engine_grads = train_step(engine, cpu_kernel=True)
    assert calls == KERNEL_CALLS[norm_first]
    torch.testing.assert_close(engine_loss, loss, rtol=1e-5, atol=0)
    assert engine_grads.keys() == grads.keys() and len(grads) > 40
    for name, grad in grads.items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(engine_grads[name], grad, rtol=1e-4, atol=1e-5 * grad.abs().max().item(),
                                   msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_engine_equals_model_under_bf16_autocast(norm_first, calls):
    model = make_model(norm_first)
    engine = engine_copy(model)
    loss, grads = train_step(model, cpu_kernel=False, bf16=True)
    engine_loss, engine_grads = train_step(engine, cpu_kernel=True, bf16=True)
    assert calls == KERNEL_CALLS[norm_first]  # the kernels' bf16 variants (short rows: <= 128 in bf16)
    torch.testing.assert_close(engine_loss, loss, rtol=2e-3, atol=0)
    for name, grad in grads.items():
        error = (engine_grads[name] - grad).norm() / grad.norm()
        assert error < 0.3, f"{name}: gradients differ by {error:.1%}"
    flat = torch.cat([g.flatten() for g in grads.values()])
    engine_flat = torch.cat([g.flatten() for g in engine_grads.values()])
    assert (engine_flat - flat).norm() < 0.1 * flat.norm()


def test_decoder_layer_with_a_fully_masked_memory_row_equals_the_model(calls):
    """Cross-attention of a batch row that sees no memory key: zeros (not NaN) on both sides, and
    the same output and gradients in the layer, float32 and bf16 (its gradients: within 3% in
    norm over all parameters; measured 0.4%, as far as the model's from float64's, 0.6%)."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        layer = DecoderLayer(d_model=48, n_heads=3, d_ff=64, dropout=0.0).to(dtype).train()
        engine = engine_copy(layer)
        x = torch.randn(4, 9, 48, dtype=dtype)
        memory = torch.randn(4, 6, 48, dtype=dtype)
        memory_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [False] * 6, [True] + [False] * 5])
        results = []
        for module in (layer, engine):
            out = module(x, memory, memory_mask=memory_mask[:, None, None])[0]
            out.float().square().sum().backward()
            results.append((out, [p.grad.clone() for p in module.parameters()]))
        (want, want_grads), (got, got_grads) = results
        assert not got.isnan().any()
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
            largest = max(w.abs().max().item() for w in want_grads)  # the final norm's, ~100
            for g, w in zip(got_grads, want_grads):  # to float32 rounding of the layer's largest gradient
                torch.testing.assert_close(g, w, atol=max(1e-5, 3e-7 * largest), rtol=1e-4)
        else:
            torch.testing.assert_close(got, want, atol=5e-2, rtol=5e-2)
            flat, want_flat = (torch.cat([g.float().flatten() for g in grads]) for grads in (got_grads, want_grads))
            assert (flat - want_flat).norm() < 0.03 * want_flat.norm()
    # float32: LayerNorm(x + sub) in the kernel; a bf16 residual stream takes x + sub, then LayerNorm
    assert calls["attention"] == 4 and calls["dropout_add_layer_norm"] == 3


# --------------------------------------------------------------------------------- dropout
def test_dropout_training_reproducible_under_manual_seed_and_it_learns(calls):
    model = make_model(False, dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)
    engine = engine_copy(model)
    runs = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        runs.append(train_step(engine, cpu_kernel=True))
    # embeddings (2) and the FFNs' hidden dropout (4) in the dropout kernel; residual dropout in Add & Norm
    assert calls == dict(dropout=18, dropout_add_layer_norm=30, attention=18, smoothed_nll=3)
    (loss_a, grads_a), (loss_b, grads_b), (loss_c, _) = runs
    assert torch.equal(loss_a, loss_b) and not torch.equal(loss_a, loss_c)  # masks follow torch.manual_seed
    for name in grads_a:  # (LayerNorm weight sums are added up by threads in any order)
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-6, atol=1e-7)
    before = evaluation_loss(engine)
    optimizer = torch.optim.Adam(engine.parameters(), lr=3e-3)
    engine.train()
    torch.manual_seed(0)
    losses = []
    for _ in range(8):
        loss, _ = train_step(engine, cpu_kernel=True)
        optimizer.step()
        losses.append(loss.item())
    assert evaluation_loss(engine) < 0.9 * before, losses
    assert losses[-1] < losses[0]


def evaluation_loss(model) -> float:
    training_mode = model.training
    model.eval()
    src, tgt_in, tgt_out, keep = batch()
    with torch.no_grad():
        loss, _ = LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=PAD)(model(src, tgt_in, keep), tgt_out)
    model.train(training_mode)
    return loss.item()


@pytest.mark.parametrize("p", [0.3, 0.5, 0.9])
def test_fast_dropout_keeps_one_minus_p_and_rescales_like_nn_dropout(p, calls):
    torch.manual_seed(0)
    for drop in (nn.Dropout(p), training.FastDropout(p)):
        x = torch.ones(400, 500)
        y = drop.train()(x)
        kept = y != 0
        assert abs(kept.float().mean().item() - (1 - p)) < 0.005
        torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
        assert torch.equal(drop.eval()(x), x)
        x = torch.randn(300, 200, requires_grad=True)  # the gradient passes where the value did, same scale
        y = drop.train()(x)
        y.backward(torch.ones_like(y))
        torch.testing.assert_close(x.grad, (y != 0).float() / (1 - p))
    assert calls["dropout"] == 2  # FastDropout's two training-mode calls
    x = torch.randn(50)
    assert torch.equal(training.FastDropout(0.0).train()(x), x)
    assert training.FastDropout(1.0).train()(x).abs().max() == 0  # nn.Dropout's path: all dropped


# ------------------------------------------------------------------------------- fallbacks
def test_evaluation_and_no_grad_attention_take_the_models_code(calls):
    model = make_model(False, dropout=0.1, attention_dropout=0.1).eval()
    engine = engine_copy(model).eval()
    src, tgt_in, _, keep = batch()
    assert torch.equal(engine(src, tgt_in, keep), model(src, tgt_in, keep))  # bit for bit
    assert not any(calls.values())
    engine.train()
    with torch.no_grad():  # training-mode attention without autograd: PyTorch's
        engine(src, tgt_in, keep)
    assert calls["attention"] == 0 and calls["dropout"] == 2


@pytest.mark.parametrize("limit, attention_calls", [(4, 0), (8, 2), (9, 6)])
def test_rows_longer_than_the_attention_limit_take_the_models_attention(monkeypatch, calls, limit, attention_calls):
    """Source 9, target 8 positions: limit 8 leaves the decoder's self-attention (8 x 8) to the
    kernel, the encoder's (9 x 9) and the cross-attention (8 x 9) to PyTorch."""
    monkeypatch.setattr(training, "MAX_ATTENTION_LENGTH", {torch.float32: limit})
    model = make_model(False)
    engine = engine_copy(model)
    loss, grads = train_step(model, cpu_kernel=False)
    engine_loss, engine_grads = train_step(engine, cpu_kernel=True)
    assert calls["attention"] == attention_calls and calls["dropout_add_layer_norm"] == 10
    torch.testing.assert_close(engine_loss, loss, rtol=1e-5, atol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(engine_grads[name], grad, rtol=1e-4, atol=1e-5 * grad.abs().max().item())


def test_attention_weights_and_caches_take_the_models_code(calls):
    torch.manual_seed(0)
    attn = SelfAttention(d_model=32, n_heads=4)
    cross = CrossAttention(d_model=32, n_heads=4)
    fast_attn, fast_cross = engine_copy(attn), engine_copy(cross)
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    out, weights = fast_attn(x, causal=True, need_weights=True)
    want, want_weights = attn(x, causal=True, need_weights=True)
    assert torch.equal(out, want) and torch.equal(weights, want_weights)
    out, weights = fast_cross(x, memory, need_weights=True)
    assert weights.shape == (2, 4, 5, 7) and torch.equal(out, cross(x, memory, need_weights=True)[0])
    assert torch.equal(fast_cross(x, memory_kv=cross.memory_kv(memory))[0], cross(x, memory_kv=cross.memory_kv(memory))[0])
    assert calls["attention"] == 0
    out, weights = fast_attn(x, causal=True)  # and the kernel once nothing stands in its way
    assert weights is None and calls["attention"] == 1
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="torch.bool"):
        fast_attn(x, mask=torch.ones(2, 1, 1, 5))
    with pytest.raises(ValueError, match="does not broadcast"):
        fast_attn(x, mask=torch.ones(2, 1, 1, 6, dtype=torch.bool))
    assert calls["attention"] == 1


def test_switched_off_nothing_is_swapped(monkeypatch):
    monkeypatch.setenv(build.ENV_SWITCH, "0")
    model = make_model(False)
    classes = [type(m) for m in model.modules()]
    swaps = accelerate_training(model)
    assert isinstance(swaps, Swaps) and not swaps.changed
    assert [type(m) for m in model.modules()] == classes


# -------------------------------------------------------------------------------- swapping
def test_swaps_change_classes_only_and_undo_restores_them():
    model = make_model(False, dropout=0.1)
    classes = [type(m) for m in model.modules()]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    n_params = len(list(model.parameters()))
    swaps = accelerate_training(model)
    swapped = {type(m) for m in model.modules()}
    assert {training.FastDropout, training.FusedAddNorm, training.TrainingSelfAttention,
            training.TrainingCrossAttention} <= swapped
    assert not {nn.Dropout, AddNorm, SelfAttention, CrossAttention} & swapped  # every one of them
    assert len(swaps.changed) == sum(c in (nn.Dropout, AddNorm, SelfAttention, CrossAttention) for c in classes)
    assert list(model.state_dict()) == list(state) and len(list(model.parameters())) == n_params
    assert not accelerate_training(model).changed  # a second call finds nothing left to swap
    swaps.undo()
    assert [type(m) for m in model.modules()] == classes and not swaps.changed
    after = model.state_dict()
    assert list(after) == list(state) and all(torch.equal(after[k], v) for k, v in state.items())
