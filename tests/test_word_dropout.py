"""train.word_dropout: which tokens are hidden, how many, that the trainer feeds them to the
model, that a resumed run draws the same, and its bad settings."""

import pytest
import torch
from safetensors.torch import load_file

from trainer_helpers import TINY, train
from transformer.data import drop_words, make_batch
from transformer.run.config import RunConfig
from transformer.training.trainer import Trainer

PAD, BOS, EOS, UNK_SRC, UNK_TGT = 0, 1, 2, 3, 4


def _batch(n=400):
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 40, (n, 2), generator=gen).tolist()
    examples = [(list(range(10, 10 + s)), list(range(100, 100 + t))) for s, t in lengths]
    return make_batch(examples, pad_id=PAD, bos_id=BOS, eos_id=EOS)


def test_only_real_source_tokens_and_read_target_tokens_become_unk_at_about_the_rate():
    batch = _batch()
    torch.manual_seed(0)
    dropped = drop_words(batch, 0.3, pad_id=PAD, src_unk_id=UNK_SRC, tgt_unk_id=UNK_TGT)
    assert torch.equal(dropped.tgt_out, batch.tgt_out) and torch.equal(dropped.src_mask, batch.src_mask)
    src_changed = dropped.src != batch.src
    assert (dropped.src[src_changed] == UNK_SRC).all() and not (src_changed & ~batch.src_mask).any()
    assert src_changed.sum() / batch.src_mask.sum() == pytest.approx(0.3, abs=0.02)
    tgt_changed = dropped.tgt_in != batch.tgt_in
    read = batch.tgt_out != PAD
    read[:, 0] = False
    assert (dropped.tgt_in[tgt_changed] == UNK_TGT).all() and not (tgt_changed & ~read).any()
    assert (dropped.tgt_in[:, 0] == BOS).all()
    assert tgt_changed.sum() / read.sum() == pytest.approx(0.3, abs=0.02)
    # source and target draw separately
    assert not torch.equal(src_changed[:, :10], tgt_changed[:, 1:11])


def test_zero_leaves_the_batch_and_bad_rates_are_refused():
    batch = _batch(4)
    assert drop_words(batch, 0.0, pad_id=PAD, src_unk_id=UNK_SRC, tgt_unk_id=UNK_TGT) is batch
    for p in (1.0, -0.1):
        with pytest.raises(ValueError, match="word dropout probability"):
            drop_words(batch, p, pad_id=PAD, src_unk_id=UNK_SRC, tgt_unk_id=UNK_TGT)
    for value in ("1.0", "-0.1"):
        with pytest.raises(ValueError, match="train.word_dropout"):
            RunConfig().with_overrides([f"train.word_dropout={value}"])


def test_the_trainer_feeds_the_model_the_dropped_batch(tmp_path, monkeypatch):
    trainer = Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=1", "train.word_dropout=0.5"]),
                      tmp_path / "run", show_progress=False)
    seen = []
    real_loss = trainer._loss
    monkeypatch.setattr(trainer, "_loss", lambda model, batch: seen.append(batch) or real_loss(model, batch))
    batch = next(trainer.batches.iter_from(0, 0))
    trainer.model.train()
    trainer._step(trainer.model, [batch])
    (fed,) = seen
    unk = trainer.vocab.src.unk_id
    assert (batch.src != unk).all()
    assert (fed.src == unk).sum() / batch.src_mask.sum() == pytest.approx(0.5, abs=0.15)
    assert (fed.tgt_in == trainer.vocab.tgt.unk_id).any() and torch.equal(fed.tgt_out, batch.tgt_out)
    trainer.close()


def test_a_resumed_run_equals_the_uninterrupted_run_and_differs_from_one_without(tmp_path):
    settings = ("train.word_dropout=0.2", "train.save_every=4")
    train(tmp_path / "straight", *settings, "train.max_steps=12")
    train(tmp_path / "resumed", *settings, "train.max_steps=8")
    train(tmp_path / "resumed", *settings, "train.max_steps=12")
    train(tmp_path / "without", "train.save_every=4", "train.max_steps=12")
    a, b, c = (load_file(str(tmp_path / name / "model.safetensors")) for name in ("straight", "resumed", "without"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
