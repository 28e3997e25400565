"""R-Drop (``train.rdrop``): the symmetric KL term, the trainer's loss, and a run without dropout."""

import pytest
import torch
import torch.nn.functional as F

from transformer.run.config import RunConfig
from transformer.model.loss import symmetric_kl
from transformer.training.trainer import Trainer

TINY = [
    "data.builtin_train=300", "data.builtin_valid=20", "data.builtin_test=20", "data.vocab_size=300",
    "data.max_tokens=400", "model.preset=tiny", "train.warmup=10", "train.lr_scale=2", "train.precision=fp32",
    "train.threads=1", "train.eval_sentences=0", "train.alignment_sentences=0", "train.tensorboard=false",
    "train.save_every=0", "train.eval_every=0",
]


def test_symmetric_kl_is_the_mean_of_both_kl_directions_in_float64():
    torch.manual_seed(0)
    a, b = torch.randn(7, 11, dtype=torch.float64), torch.randn(7, 11, dtype=torch.float64)
    la, lb = F.log_softmax(a, -1), F.log_softmax(b, -1)
    expected = 0.5 * (F.kl_div(lb, la, log_target=True, reduction="sum") + F.kl_div(la, lb, log_target=True, reduction="sum"))
    assert symmetric_kl(a, b).item() == pytest.approx(expected.item(), rel=1e-12)
    assert symmetric_kl(a, a).item() == 0.0
    assert symmetric_kl(a, b + 3.0).item() == pytest.approx(expected.item(), rel=1e-12)  # softmax ignores a shift
    a.requires_grad_(True), b.requires_grad_(True)
    assert torch.autograd.gradcheck(symmetric_kl, (a, b))


def test_the_trainers_rdrop_loss_is_two_dropout_passes_plus_alpha_times_their_kl(tmp_path):
    alpha = 3.0
    trainer = Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=1", "model.dropout=0.3",
                                                         f"train.rdrop={alpha}"]), tmp_path / "run", show_progress=False)
    batch = next(trainer.batches.iter_from(0, 0))
    model = trainer.model.train()
    torch.manual_seed(1)
    loss, reported = trainer._loss(model, batch)
    torch.manual_seed(1)  # the same dropout masks again
    real = batch.tgt_out != trainer.vocab.tgt.pad_id
    logits = model(torch.cat([batch.src] * 2), torch.cat([batch.tgt_in] * 2), torch.cat([batch.src_mask] * 2),
                   positions=torch.cat([real] * 2))
    first, second = logits.chunk(2)
    assert not torch.equal(first, second)  # each copy drew its own masks
    target = batch.tgt_out[real]
    ce1, ce2 = (F.cross_entropy(x.double(), target, label_smoothing=0.1, reduction="sum") for x in (first, second))
    la, lb = F.log_softmax(first.double(), -1), F.log_softmax(second.double(), -1)
    kl = 0.5 * (F.kl_div(lb, la, log_target=True, reduction="sum") + F.kl_div(la, lb, log_target=True, reduction="sum"))
    assert kl.item() > 0
    assert reported.item() == pytest.approx(0.5 * (ce1 + ce2).item(), rel=1e-5)
    assert loss.item() == pytest.approx((0.5 * (ce1 + ce2) + 0.5 * alpha * kl).item(), rel=1e-5)
    trainer.close()


@pytest.mark.parametrize("alpha", [0.0, 3.0])
def test_logits_at_every_position_give_the_loss_of_logits_at_real_targets(tmp_path, alpha):
    """The GPU's way (logits at every target position, padding ignored by the loss and the KL) and the
    CPU's (logits at real targets only) give one loss: the same dropout masks, the same numbers."""
    trainer = Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=1", "model.dropout=0.3",
                                                         f"train.rdrop={alpha}"]), tmp_path / "run", show_progress=False)
    batch = next(trainer.batches.iter_from(0, 0))
    assert (batch.tgt_out == trainer.vocab.tgt.pad_id).any()  # padding to ignore
    model = trainer.model.train()
    results = []
    for sparse in (True, False):
        trainer.sparse_logits = sparse
        torch.manual_seed(1)
        results.append([x.item() for x in trainer._loss(model, batch)])
    assert results[0] == pytest.approx(results[1], rel=1e-5)
    trainer.close()


def test_without_dropout_rdrop_gives_the_plain_loss_and_gradients(tmp_path):
    """Two passes without dropout agree (KL = 0) and average to the plain cross-entropy."""
    no_dropout = ["model.dropout=0", "model.attention_dropout=0", "model.activation_dropout=0", "train.max_steps=1"]
    trainer = Trainer(RunConfig().with_overrides(TINY + no_dropout), tmp_path / "run", show_progress=False)
    batch = next(trainer.batches.iter_from(0, 0))
    model = trainer.model.train()
    results = {}
    for alpha in (0.0, 5.0):
        trainer.cfg.train.rdrop = alpha
        model.zero_grad()
        loss, reported = trainer._loss(model, batch)
        loss.backward()
        results[alpha] = (loss.item(), reported.item(), {n: p.grad.clone() for n, p in model.named_parameters()})
    (plain, plain_reported, plain_grads), (rdrop, rdrop_reported, rdrop_grads) = results[0.0], results[5.0]
    assert rdrop == pytest.approx(plain, rel=1e-6) and rdrop_reported == pytest.approx(plain_reported, rel=1e-6)
    for name, grad in plain_grads.items():
        scale = grad.abs().max().item()
        assert scale > 0, name
        assert (rdrop_grads[name] - grad).abs().max().item() <= 1e-5 * scale, name
    trainer.close()


def test_a_negative_rdrop_weight_is_refused():
    with pytest.raises(ValueError, match="rdrop"):
        RunConfig().with_overrides(["train.rdrop=-1"])
