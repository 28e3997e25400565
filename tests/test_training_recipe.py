"""The paper's training recipe: label smoothing, Adam + warmup schedule, and the run configuration."""

import math
import os

import pytest
import torch
import torch.nn.functional as F

from transformer.training.config import RunConfig
from transformer.training.loss import LabelSmoothedCrossEntropy, reference_smoothed_nll
from transformer.training.schedule import build_optimizer, noam_lr


def test_label_smoothing_matches_torch_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g, dtype=torch.float64)
    target = torch.randint(1, 11, (3, 5), generator=g)
    target[0, 3:] = 0  # padding
    loss, nll = LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=0)(logits, target)
    expected = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=0, label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(loss, expected)
    plain = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=0, reduction="sum")
    torch.testing.assert_close(nll, plain)


@pytest.fixture(params=["compiled", "pytorch"])
def loss_path(request, monkeypatch):
    """Run a loss test with the compiled CPU kernel (``cpu_kernel=True``: transformer.cpu.ops.smoothed_nll)
    and with PyTorch operations: the ``cpu_kernel`` argument for LabelSmoothedCrossEntropy. The
    kernel must run on its path and only there."""
    from transformer.cpu import build, ops

    compiled = request.param == "compiled"
    if compiled and not build.available():
        if os.environ.get("CI"):  # CI has gcc: the kernels must build there
            pytest.fail("the CPU kernels did not build")
        pytest.skip("no C compiler: the CPU kernels are not built")
    calls = []
    real = ops.smoothed_nll
    monkeypatch.setattr(ops, "smoothed_nll", lambda *a: calls.append(1) or real(*a))
    yield compiled
    assert bool(calls) == compiled, f"{len(calls)} kernel calls on the {request.param} path"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_fused_loss_gradient_equals_autograd_composition(dtype, eps, loss_path):
    """The closed-form backward equals autograd through log_softmax/gather/mean, pads get zero gradient."""
    g = torch.Generator().manual_seed(1)
    logits = (3 * torch.randn(4, 6, 37, generator=g)).to(dtype)
    target = torch.randint(1, 37, (4, 6), generator=g)
    target[1, 2:] = 0
    target[3, 5] = 0
    a = logits.clone().requires_grad_(True)
    b = logits.clone().requires_grad_(True)
    loss, nll = LabelSmoothedCrossEntropy(smoothing=eps, ignore_index=0, cpu_kernel=loss_path)(a, target)
    ref_loss, ref_nll = reference_smoothed_nll(b, target, smoothing=eps, ignore_index=0)
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    upstream = torch.tensor(0.37)
    (loss * upstream).backward()
    (ref_loss * upstream).backward()
    assert a.grad.dtype == dtype
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=4e-3, rtol=2e-2)
    torch.testing.assert_close(a.grad.float(), b.grad.float(), **tol)
    assert a.grad[1, 2:].abs().sum() == 0 and a.grad[3, 5].abs().sum() == 0


def test_fused_loss_gradient_for_confident_logits(loss_path):
    """Logits far apart (most probabilities underflow) and more rows than one chunk: still the
    reference gradient, finite everywhere."""
    g = torch.Generator().manual_seed(2)
    logits = 200 * torch.randn(600, 3000, generator=g)  # 1.8M logits: two chunks
    target = torch.randint(1, 3000, (600,), generator=g)
    target[::7] = 0
    a = logits.clone().requires_grad_(True)
    b = logits.clone().requires_grad_(True)
    loss, _ = LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=0, cpu_kernel=loss_path)(a, target)
    ref_loss, _ = reference_smoothed_nll(b, target, smoothing=0.1, ignore_index=0)
    torch.testing.assert_close(loss, ref_loss)
    loss.backward()
    ref_loss.backward()
    assert torch.isfinite(a.grad).all()
    torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5)


def test_fused_loss_gradient_kept_intact_and_skipped_without_autograd(loss_path):
    """The gradient computed in the forward pass is scaled into a new tensor (a second backward
    through a retained graph accumulates the same again), and without autograd the loss is the same."""
    g = torch.Generator().manual_seed(3)
    logits = (3 * torch.randn(5, 29, generator=g)).to(torch.bfloat16).requires_grad_(True)
    target = torch.randint(1, 29, (5,), generator=g)
    crit = LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=0, cpu_kernel=loss_path)
    loss, nll = crit(logits, target)
    (loss * 0.5).backward(retain_graph=True)
    once = logits.grad.clone()
    (loss * 0.5).backward()
    torch.testing.assert_close(logits.grad, 2 * once)
    with torch.no_grad():
        loss_ng, nll_ng = crit(logits, target)
    assert loss_ng.grad_fn is None
    torch.testing.assert_close((loss_ng, nll_ng), (loss.detach(), nll))


def test_fused_loss_rejects_mismatched_shapes(loss_path):
    with pytest.raises(ValueError, match="do not match"):
        LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=0, cpu_kernel=loss_path)(
            torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises((IndexError, RuntimeError)):  # a target id past the vocabulary
        LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=0, cpu_kernel=loss_path)(
            torch.zeros(2, 5), torch.tensor([1, 5]))


def test_label_smoothing_target_distribution():
    """The minimum of the smoothed loss is at p(ref) = 1 - eps + eps/V, the rest eps/V each."""
    V, eps = 5, 0.1
    crit = LabelSmoothedCrossEntropy(smoothing=eps, ignore_index=-100)
    target = torch.tensor([[2]])
    best = torch.full((V,), eps / V)
    best[2] += 1 - eps
    at_best, _ = crit(best.log().view(1, 1, V), target)
    for other in ([0.9, 0.025, 0.025, 0.025, 0.025], [0.05, 0.05, 0.8, 0.05, 0.05], [0.0005, 0.0005, 0.998, 0.0005, 0.0005]):
        p = torch.tensor(other)
        p = p / p.sum()
        assert crit(p.log().view(1, 1, V), target)[0] > at_best
    with pytest.raises(ValueError, match="label smoothing"):
        LabelSmoothedCrossEntropy(smoothing=1.0, ignore_index=0)


def test_noam_schedule_numbers():
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5): peak at step = warmup."""
    peak = noam_lr(4000, d_model=512, warmup=4000)
    assert peak == pytest.approx(512**-0.5 * 4000**-0.5)
    assert peak == pytest.approx(6.988e-4, rel=1e-3)
    assert noam_lr(2000, d_model=512, warmup=4000) == pytest.approx(peak / 2)
    assert noam_lr(16000, d_model=512, warmup=4000) == pytest.approx(peak / 2)
    assert noam_lr(100, d_model=512, warmup=4000, scale=2.0) == pytest.approx(2 * 512**-0.5 * 100 * 4000**-1.5)


def test_optimizer_follows_the_schedule():
    p = torch.nn.Parameter(torch.zeros(3))
    opt, sched = build_optimizer([p], d_model=512, warmup=10)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    lrs = []
    for step in range(1, 31):
        lrs.append(opt.param_groups[0]["lr"])
        p.grad = torch.ones(3)
        opt.step()
        sched.step()
    assert lrs == pytest.approx([noam_lr(s, d_model=512, warmup=10) for s in range(1, 31)])
    assert max(range(30), key=lambda i: lrs[i]) == 9  # the peak is at step 10 = warmup
    with pytest.raises(ValueError, match="warmup"):
        build_optimizer([p], d_model=512, warmup=0)


def test_run_config_overrides_and_errors(tmp_path):
    cfg = RunConfig().with_overrides(["train.epochs=3", "lr_scale=2", "model.preset=tiny", "data.joint_vocab=false"])
    assert cfg.train.epochs == 3 and cfg.train.lr_scale == 2.0 and cfg.model["preset"] == "tiny" and not cfg.data.joint_vocab
    with pytest.raises(ValueError, match=r"unknown config key 'train.epoch'. Valid keys are data: .*train: .*epochs"):
        RunConfig().with_overrides(["train.epoch=3"])
    with pytest.raises(ValueError, match="not of the form key=value"):
        RunConfig().with_overrides(["epochs"])
    with pytest.raises(ValueError, match="train.epochs must be of type int"):
        RunConfig().with_overrides(["epochs=many"])
    with pytest.raises(ValueError, match="train.precision must be one of"):
        RunConfig().with_overrides(["precision=fp8"])
    with pytest.raises(ValueError, match="divisible by n_heads"):
        RunConfig().with_overrides(["model.d_model=102"])
    with pytest.raises(ValueError, match="data.corpus=files needs"):
        RunConfig().with_overrides(["data.corpus=files"])
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  epochs: 2\nmodel:\n  preset: tiny\n  dropout: 0.2\n")
    loaded = RunConfig.load(path, ["train.seed=7"])
    assert loaded.train.epochs == 2 and loaded.train.seed == 7 and loaded.model["dropout"] == 0.2
    path.write_text("trian:\n  epochs: 2\n")
    with pytest.raises(ValueError, match=r"unknown config sections \['trian'\]"):
        RunConfig.load(path)
    path.write_text("model:\n  d_modle: 2\n")
    with pytest.raises(ValueError, match=r"unknown model keys \['d_modle'\]; valid keys"):
        RunConfig.load(path)
    json_path = tmp_path / "run.json"
    cfg.save(json_path)
    assert RunConfig.load(json_path) == cfg
    mc = cfg.model_config(src_vocab_size=100, tgt_vocab_size=120)
    assert mc.d_model == 32 and mc.share_embeddings is False
    assert math.isclose(RunConfig().train.label_smoothing, 0.1)
