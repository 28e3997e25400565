"""TensorBoard logs of a training run: the scalars and images written, read back with TensorBoard's
own reader; switched off; tensorboard missing; the fast heatmap painting against matplotlib's."""

import io
import sys

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from transformer.training.alignment_log import Alignment
from transformer.run.config import RunConfig
from transformer.training.tensorboard_log import HINT, TENSORBOARD_DIR, AlignmentFigure, alignment_figure
from transformer.training.trainer import Trainer
from transformer.visualize.data import TokenAxis

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

TINY = ["data.builtin_train=400", "data.builtin_valid=24", "data.builtin_test=4", "data.vocab_size=300",
        "data.max_tokens=600", "model.preset=tiny", "train.warmup=10", "train.precision=fp32", "train.threads=1",
        "train.log_every=2", "train.eval_every=3", "train.max_steps=6", "train.eval_sentences=3",
        "train.alignment_sentences=2"]


def train(run_dir, *settings, stream=None):
    cfg = RunConfig().with_overrides([*TINY, *settings])
    trainer = Trainer(cfg, run_dir, show_progress=stream is not None, stream=stream)
    trainer.train()
    return trainer


def read_events(run_dir):
    acc = event_accumulator.EventAccumulator(str(run_dir / TENSORBOARD_DIR), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    return acc


def test_a_run_logs_every_scalar_and_the_alignment_images_at_each_evaluation(tmp_path):
    trainer = train(tmp_path / "run")
    acc = read_events(tmp_path / "run")
    tags = acc.Tags()
    assert set(tags["scalars"]) == {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s",
                                    "valid/loss", "valid/ppl", "valid/bleu", "valid/chrf"}
    assert [e.step for e in acc.Scalars("train/loss")] == [2, 4, 6]
    assert [e.step for e in acc.Scalars("valid/bleu")] == [3, 6]
    # the same numbers as metrics.jsonl, the record the rest of the package reads
    records = trainer.metrics.read()
    train_records = [r for r in records if r["kind"] == "train"]
    assert [e.value for e in acc.Scalars("train/grad_norm")] == pytest.approx([r["grad_norm"] for r in train_records])
    assert [e.value for e in acc.Scalars("train/lr")] == pytest.approx([r["lr"] for r in train_records])
    assert [e.value for e in acc.Scalars("valid/chrf")] == pytest.approx([r["chrf"] for r in records if r["kind"] == "valid"])
    assert all(r["grad_norm"] > 0 for r in train_records)
    images = tags["images"]
    assert len(images) == 2 and all(t.startswith("alignment/sentence-") for t in images)
    for tag in images:
        shots = acc.Images(tag)
        assert [s.step for s in shots] == [3, 6]
        assert shots[0].encoded_image_string.startswith(b"\x89PNG") and shots[0].width > 100
        assert shots[0].encoded_image_string != shots[1].encoded_image_string  # the weights changed


def test_the_gradient_norm_is_the_norm_before_clipping(tmp_path):
    """With clipping, the logged norm is what clip_grad_norm_ measured: above the clip threshold early on."""
    trainer = train(tmp_path / "run", "train.clip_norm=0.01", "train.eval_every=0", "train.max_steps=2")
    (record,) = [r for r in trainer.metrics.read() if r["kind"] == "train"]
    assert record["grad_norm"] > 0.01


def test_tensorboard_false_writes_no_logs(tmp_path):
    train(tmp_path / "run", "train.tensorboard=false", "train.max_steps=3")
    assert not (tmp_path / "run" / TENSORBOARD_DIR).exists()
    assert (tmp_path / "run" / "alignments.jsonl").exists()  # the alignment record does not depend on TensorBoard


def test_without_tensorboard_training_goes_on_after_a_one_line_hint(tmp_path, monkeypatch):
    # tensorboard not installed: torch.utils.tensorboard's import of it fails
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.delitem(sys.modules, "torch.utils.tensorboard", raising=False)
    stream = io.StringIO()
    trainer = train(tmp_path / "run", "train.max_steps=4", stream=stream)
    assert stream.getvalue().count(HINT) == 1 and "\n" not in HINT
    assert trainer.state.step == 4
    assert not (tmp_path / "run" / TENSORBOARD_DIR).exists()


def alignment(layers=2, heads=3, n_tgt=7, n_src=9, seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.random((layers, heads, n_tgt, n_src)).astype(np.float32) ** 4
    weights /= weights.sum(-1, keepdims=True)
    return Alignment(index=0, source="le chat dort", reference="the cat sleeps",
                     src_tokens=TokenAxis.from_pieces([f"\u2581s{i}" for i in range(n_src)]),
                     tgt_tokens=TokenAxis.from_pieces([f"\u2581t{i}" for i in range(n_tgt)]), weights=weights)


@pytest.mark.parametrize("heads", [1, 4])
def test_the_painted_heatmaps_match_matplotlibs_drawing_of_the_same_weights(heads):
    """Every pixel equals matplotlib's own drawing, but for the outermost pixels of each heatmap
    (where matplotlib blends the image's edge with its frame)."""
    a = alignment(heads=heads)
    fast = AlignmentFigure(a)
    assert len(fast.panels) == 2 * (heads + 1 if heads > 1 else 1)
    edges = np.zeros(fast.frame.shape[:2], dtype=bool)
    for *_, (ys, xs), _cells in fast.panels:
        top, bottom, left, right = ys.min(), ys.max(), xs.min(), xs.max()
        edges[top - 1:bottom + 2, left - 1:right + 2] = True
        edges[top + 1:bottom, left + 1:right] = False
    for seed in (1, 2):  # two snapshots through the same frame
        b = alignment(heads=heads, seed=seed)
        painted = fast.render(b.weights)
        canvas = FigureCanvasAgg(alignment_figure(a, b.weights))
        canvas.draw()
        reference = np.asarray(canvas.buffer_rgba())[..., :3]
        assert painted.shape == reference.shape
        differs = np.any(painted != reference, axis=-1)
        assert not (differs & ~edges).any(), f"{(differs & ~edges).sum()} pixels differ inside the heatmaps or outside them"
    with pytest.raises(ValueError, match="do not fit"):
        fast.render(a.weights[:, :, :-1])


def test_tokens_per_second_counts_training_time_not_evaluation(tmp_path, monkeypatch):
    """The window after an evaluation (steps 3-4) is not slowed down by the evaluation's time.

    The trainer's tokens/s clock is a counter the test moves: each step takes 1 s, each evaluation 1,000 s.
    """
    now = [0.0]
    tokens: list[float] = []
    step, validate = Trainer._step, Trainer.validate

    def timed_step(self, model, group):
        loss_sum, n = step(self, model, group)
        now[0] += 1.0
        tokens.append(float(n))
        return loss_sum, n

    def slow_validate(self):
        now[0] += 1000.0
        return validate(self)

    monkeypatch.setattr(Trainer, "_step", timed_step)
    monkeypatch.setattr(Trainer, "validate", slow_validate)
    cfg = RunConfig().with_overrides([*TINY, "train.eval_every=2", "train.max_steps=6", "train.tensorboard=false",
                                      "train.alignment_sentences=0", "train.eval_sentences=0"])
    trainer = Trainer(cfg, tmp_path / "run", show_progress=False)
    trainer.rate_clock = lambda: now[0]
    trainer.train()
    rates = {r["step"]: r["tokens_per_s"] for r in trainer.metrics.read() if r["kind"] == "train"}
    assert sorted(rates) == [2, 4, 6] and len(tokens) == 6
    # each window's tokens over its 2 s of steps; the evaluations at steps 2 and 4 fall between windows
    for last in (2, 4, 6):
        assert rates[last] == pytest.approx(sum(tokens[last - 2:last]) / 2.0), rates
