"""The label-smoothed cross-entropy: the paper's loss (model/loss.py) and the CPU engine's one-pass
form of it (cpu/loss.py), each against PyTorch's own ``F.cross_entropy(label_smoothing=...)`` in
float64, values and gradients; and the launch cost of the plain loss, which a GPU pays per operator.
"""

import os

import pytest
import torch
import torch.nn.functional as F
from dispatch_helpers import OperatorLog

from transformer.cpu import accelerate_training, build, ops
from transformer.cpu.loss import CHUNK_ELEMENTS, ChunkedLabelSmoothedCrossEntropy
from transformer.model.loss import LabelSmoothedCrossEntropy

PATHS = ("plain", "chunked", "kernel")


def oracle(logits, target, *, eps, pad):
    """PyTorch's label-smoothed cross-entropy in float64, summed (the loss, and the NLL without smoothing)."""
    z, t = logits.double().flatten(0, -2), target.flatten()
    return (F.cross_entropy(z, t, ignore_index=pad, label_smoothing=eps, reduction="sum"),
            F.cross_entropy(z, t, ignore_index=pad, reduction="sum"))


@pytest.fixture(params=PATHS)
def make_loss(request, monkeypatch):
    """A loss constructor for each path: the model's loss; the CPU engine's with PyTorch chunks; the CPU
    engine's with the compiled row kernel. Each engine path must run where it is asked for, and only there."""
    path = request.param
    if path == "kernel" and not build.available():
        if os.environ.get("CI"):  # CI has gcc: the kernels must build there
            pytest.fail("the CPU kernels did not build")
        pytest.skip("no C compiler: the CPU kernels are not built")
    calls = []
    real = ops.smoothed_nll
    monkeypatch.setattr(ops, "smoothed_nll", lambda *a: calls.append(1) or real(*a))
    if path == "chunked":
        monkeypatch.setattr(ops, "fits_smoothed_nll", lambda logits: False)

    def make(**kwargs):
        return (LabelSmoothedCrossEntropy if path == "plain" else ChunkedLabelSmoothedCrossEntropy)(**kwargs)

    yield make
    assert bool(calls) == (path == "kernel"), f"{len(calls)} kernel calls on the {path} path"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_and_gradient_equal_pytorch_cross_entropy(dtype, eps, make_loss):
    """Values and gradients of every path equal F.cross_entropy's in float64; pads get zero gradient."""
    g = torch.Generator().manual_seed(1)
    logits = (3 * torch.randn(4, 6, 37, generator=g)).to(dtype)
    target = torch.randint(1, 37, (4, 6), generator=g)
    target[1, 2:] = 0
    target[3, 5] = 0
    a = logits.clone().requires_grad_(True)
    b = logits.double().requires_grad_(True)
    loss, nll = make_loss(smoothing=eps, ignore_index=0)(a, target)
    ref_loss, ref_nll = oracle(b, target, eps=eps, pad=0)
    assert loss.dtype == nll.dtype == torch.float32 and not nll.requires_grad
    torch.testing.assert_close(loss.double(), ref_loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(nll.double(), ref_nll, rtol=1e-5, atol=0)
    upstream = torch.tensor(0.37)
    (loss * upstream).backward()
    (ref_loss * upstream).backward()
    assert a.grad.dtype == dtype
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=4e-3, rtol=2e-2)
    torch.testing.assert_close(a.grad.double(), b.grad, **tol)
    assert a.grad[1, 2:].abs().sum() == 0 and a.grad[3, 5].abs().sum() == 0


def test_gradient_for_confident_logits_over_several_chunks(make_loss):
    """Logits far apart (most probabilities underflow) and more rows than one chunk: still the
    reference gradient, finite everywhere."""
    g = torch.Generator().manual_seed(2)
    logits = 200 * torch.randn(600, 3000, generator=g)
    assert logits.numel() > CHUNK_ELEMENTS  # two chunks on the engine's PyTorch path
    target = torch.randint(1, 3000, (600,), generator=g)
    target[::7] = 0
    a = logits.clone().requires_grad_(True)
    b = logits.double().requires_grad_(True)
    loss, _ = make_loss(smoothing=0.1, ignore_index=0)(a, target)
    ref_loss, _ = oracle(b, target, eps=0.1, pad=0)
    torch.testing.assert_close(loss.double(), ref_loss, rtol=1e-5, atol=0)
    loss.backward()
    ref_loss.backward()
    assert torch.isfinite(a.grad).all()
    torch.testing.assert_close(a.grad.double(), b.grad, atol=1e-6, rtol=1e-5)


def test_gradient_kept_intact_and_skipped_without_autograd(make_loss):
    """A second backward through a retained graph accumulates the same gradient again, and without
    autograd the loss is the same."""
    g = torch.Generator().manual_seed(3)
    logits = (3 * torch.randn(5, 29, generator=g)).to(torch.bfloat16).requires_grad_(True)
    target = torch.randint(1, 29, (5,), generator=g)
    crit = make_loss(smoothing=0.1, ignore_index=0)
    loss, nll = crit(logits, target)
    (loss * 0.5).backward(retain_graph=True)
    once = logits.grad.clone()
    (loss * 0.5).backward()
    torch.testing.assert_close(logits.grad, 2 * once)
    with torch.no_grad():
        loss_ng, nll_ng = crit(logits, target)
    assert loss_ng.grad_fn is None
    torch.testing.assert_close((loss_ng, nll_ng), (loss.detach(), nll))


def test_bad_shapes_and_targets_are_refused(make_loss):
    with pytest.raises(ValueError, match="do not match"):
        make_loss(smoothing=0.1, ignore_index=0)(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises((IndexError, RuntimeError)):  # a target id past the vocabulary
        make_loss(smoothing=0.1, ignore_index=0)(torch.zeros(2, 5), torch.tensor([1, 5]))


def test_the_cpu_engine_swaps_the_loss_and_undo_restores_it():
    if not build.available():
        pytest.skip("no C compiler: the CPU engine swaps nothing")
    crit = LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=0)
    swaps = accelerate_training(crit)
    assert type(crit) is ChunkedLabelSmoothedCrossEntropy and crit.smoothing == 0.1
    swaps.undo()
    assert type(crit) is LabelSmoothedCrossEntropy


def _operators_of_a_step(rows: int, vocab: int = 50) -> OperatorLog:
    g = torch.Generator().manual_seed(rows)
    logits = torch.randn(rows, vocab, generator=g, requires_grad=True)
    target = torch.randint(0, vocab, (rows,), generator=g)
    target[::3] = 0  # padding
    crit = LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=0)
    with OperatorLog() as log:
        loss, _ = crit(logits, target)
        loss.backward()
    return log


def test_the_plain_loss_dispatches_the_same_operators_whatever_the_batch():
    """Forward and backward of the paper's loss run one fixed list of whole-tensor operators: the
    number of launches on a GPU does not grow with the tokens of a batch (the engine's chunked
    form, on 1M-logit chunks, would; its row kernel is one operator per call but CPU-only)."""
    small, large = _operators_of_a_step(10), _operators_of_a_step(50_000)
    assert small.names == large.names
    assert len(small.names) < 40
    assert not small.syncs()  # nothing waits for the device


def test_the_chunked_loss_grows_with_the_batch(monkeypatch):
    """What the test above guards against: the engine's PyTorch chunks launch more operators for more rows."""
    monkeypatch.setattr(ops, "fits_smoothed_nll", lambda logits: False)
    counts = []
    for rows in (10, 50_000):
        logits = torch.randn(rows, 50, requires_grad=True)
        with OperatorLog() as seen:
            loss, _ = ChunkedLabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=0)(logits, torch.ones(rows, dtype=torch.long))
            loss.backward()
        counts.append(len(seen.names))
    assert counts[1] > counts[0]
