"""The paper's training recipe: label smoothing, Adam + warmup schedule, and the run configuration."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer.run.config import RunConfig
from transformer.model.loss import LabelSmoothedCrossEntropy
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
