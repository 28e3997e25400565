"""train.optimizer and train.weight_decay: Adam's L2 term (coupled, the default) and AdamW's
decoupled decay of the weight matrices, each against a float64 update written out from its paper,
and a trainer with AdamW that stops and resumes exactly."""

import math

import pytest
import torch

from trainer_helpers import Clock, records, train
from transformer.run.config import RunConfig
from transformer.training.schedule import build_optimizer

LR, WD, BETAS, EPS = 0.01, 0.1, (0.9, 0.98), 1e-9


def reference(params: dict[str, torch.Tensor], grads: list[dict[str, torch.Tensor]], *, decoupled: bool
              ) -> dict[str, torch.Tensor]:
    """Adam (Kingma & Ba, Algorithm 1) in float64 with weight decay either added to the gradient
    (L2) or applied to the matrices apart from it (Loshchilov & Hutter, Algorithm 2)."""
    p = {k: v.double().clone() for k, v in params.items()}
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v = {k: torch.zeros_like(x) for k, x in p.items()}
    for t, step_grads in enumerate(grads, start=1):
        for k in p:
            g = step_grads[k].double()
            if not decoupled:
                g = g + WD * p[k]
            elif p[k].dim() >= 2:
                p[k] = p[k] * (1 - LR * WD)
            m[k] = BETAS[0] * m[k] + (1 - BETAS[0]) * g
            v[k] = BETAS[1] * v[k] + (1 - BETAS[1]) * g * g
            m_hat, v_hat = m[k] / (1 - BETAS[0] ** t), v[k] / (1 - BETAS[1] ** t)
            p[k] = p[k] - LR * m_hat / (v_hat.sqrt() + EPS)
    return p


def run_optimizer(params: dict[str, torch.Tensor], grads: list[dict[str, torch.Tensor]], *, decoupled: bool
                  ) -> dict[str, torch.Tensor]:
    live = {k: torch.nn.Parameter(v.clone()) for k, v in params.items()}
    # the constant schedule with a warmup of one step: the rate is LR from the first step
    opt, sched = build_optimizer(live.values(), d_model=8, schedule="constant", lr=LR, warmup=1, betas=BETAS,
                                 eps=EPS, weight_decay=WD, decoupled=decoupled)
    for step_grads in grads:
        for k, p in live.items():
            p.grad = step_grads[k].clone()
        opt.step()
        sched.step()
    return {k: p.detach() for k, p in live.items()}


@pytest.fixture
def problem():
    g = torch.Generator().manual_seed(0)
    params = {"weight": torch.randn(3, 4, generator=g), "bias": torch.randn(4, generator=g)}
    grads = [{k: torch.randn(v.shape, generator=g) for k, v in params.items()} for _ in range(5)]
    return params, grads


@pytest.mark.parametrize("decoupled", [False, True], ids=["adam-l2", "adamw"])
def test_updates_match_the_written_out_algorithm(problem, decoupled):
    params, grads = problem
    got, want = run_optimizer(params, grads, decoupled=decoupled), reference(params, grads, decoupled=decoupled)
    for k in params:
        torch.testing.assert_close(got[k].double(), want[k], rtol=1e-5, atol=1e-6)
    # the two kinds of decay lead to different weights: the test tells them apart
    other = reference(params, grads, decoupled=not decoupled)
    assert not torch.allclose(got["weight"].double(), other["weight"], rtol=1e-4, atol=1e-5)


def test_with_no_gradient_adamw_only_shrinks_the_matrices(problem):
    params, _ = problem
    zero = [{k: torch.zeros_like(v) for k, v in params.items()}]
    after = run_optimizer(params, zero, decoupled=True)
    torch.testing.assert_close(after["weight"], params["weight"] * (1 - LR * WD))
    assert torch.equal(after["bias"], params["bias"])  # vectors are not decayed
    # Adam's L2 term is a gradient: normalised by Adam, it moves every parameter by about the rate
    coupled = run_optimizer(params, zero, decoupled=False)
    torch.testing.assert_close((coupled["bias"] - params["bias"]).abs(), torch.full((4,), LR), rtol=1e-4, atol=0)


def test_optimizer_setting_is_checked():
    assert RunConfig().train.optimizer == "adam"  # the paper's
    assert RunConfig().with_overrides(["train.optimizer=adamw"]).train.optimizer == "adamw"
    with pytest.raises(ValueError, match=r"train.optimizer must be one of \['adam', 'adamw'\], got 'sgd'"):
        RunConfig().with_overrides(["train.optimizer=sgd"])


def test_trainer_with_adamw_decays_the_matrices_and_resumes_exactly(tmp_path):
    settings = ("train.optimizer=adamw", "train.weight_decay=0.1", "train.max_steps=8", "train.save_every=3")
    straight = train(tmp_path / "straight", *settings)
    assert isinstance(straight.optimizer, torch.optim.AdamW)
    decayed, undecayed = straight.optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and undecayed["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() == 1 for p in undecayed["params"])
    assert len(decayed["params"]) + len(undecayed["params"]) == len(list(straight.model.parameters()))
    with pytest.raises(KeyboardInterrupt):  # stopped after step 5, past the checkpoint of step 3
        train(tmp_path / "stopped", *settings, clock=Clock(fail_at=5.0))
    resumed = train(tmp_path / "stopped", *settings)
    assert resumed.resumed_from == 3
    a, b = records(tmp_path / "straight"), records(tmp_path / "stopped")
    assert sorted(a) == sorted(b) == list(range(1, 9))
    for step in a:
        assert b[step]["loss"] == a[step]["loss"] and not math.isnan(a[step]["loss"]), step
