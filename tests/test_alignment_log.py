"""Alignment snapshots (alignments.jsonl): one line per evaluation, the same sentences and tokens at
every step, rows of attention weights, the weights the attention page computes, resume without
duplicated steps."""

import json
import shutil

import numpy as np
import pytest

from transformer.run.alignments import read_alignments
from transformer.run.layout import ALIGNMENTS_FILE
from transformer.training.alignment_log import LONGEST, SHORTEST, choose_sentences
from transformer.run.config import RunConfig
from transformer.run.checkpoints import list_checkpoints
from transformer.training.trainer import Trainer
from transformer.translate.translator import Translator
from transformer.visualize.data import TokenAxis, collect_attention

TINY = ["data.builtin_train=400", "data.builtin_valid=30", "data.builtin_test=4", "data.vocab_size=300",
        "data.max_tokens=600", "model.preset=tiny", "train.warmup=10", "train.precision=fp32", "train.threads=1",
        "train.log_every=2", "train.eval_every=2", "train.max_steps=6", "train.eval_sentences=0",
        "train.alignment_sentences=3", "train.tensorboard=false"]


def train(run_dir, *settings):
    trainer = Trainer(RunConfig().with_overrides([*TINY, *settings]), run_dir, show_progress=False)
    trainer.train()
    return trainer


def test_choose_sentences_spreads_over_short_to_medium_pairs_and_falls_back_to_the_shortest():
    pairs = [([1] * n, [1] * m) for n, m in [(3, 3), (6, 7), (30, 30), (8, 9), (5, 5), (12, 12), (21, 6), (7, 7)]]
    fitting = [1, 3, 4, 5, 7]  # both sides within SHORTEST..LONGEST tokens
    assert all(SHORTEST <= len(pairs[i][0]) <= LONGEST for i in fitting)
    assert choose_sentences(pairs, 2) == [3, 5]  # the middle of each half of the fitting pairs
    assert choose_sentences(pairs, 5) == fitting
    assert choose_sentences(pairs, 6) == [0, 1, 3, 4, 5, 7]  # too few fit: the six shortest, in data order
    assert choose_sentences(pairs, 0) == [] and choose_sentences([], 3) == []
    assert choose_sentences(pairs, 2) == choose_sentences(list(pairs), 2)  # deterministic


def test_a_line_per_evaluation_with_the_same_sentences_and_rows_of_weights(tmp_path):
    trainer = train(tmp_path / "run")
    lines = (tmp_path / "run" / ALIGNMENTS_FILE).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [2, 4, 6]
    assert all(r["epoch"] == 0 for r in records)
    first = records[0]["sentences"]
    assert len(first) == 3
    cfg = trainer.model.config
    for record in records:
        assert [(s["index"], s["src_tokens"], s["tgt_tokens"]) for s in record["sentences"]] == \
            [(s["index"], s["src_tokens"], s["tgt_tokens"]) for s in first]
        for s in record["sentences"]:
            w = np.asarray(s["layers"])
            assert w.shape == (cfg.n_decoder_layers, cfg.n_heads, len(s["tgt_tokens"]), len(s["src_tokens"]))
            assert np.allclose(w.sum(-1), 1.0, atol=0.0005 * w.shape[-1] + 1e-9)  # rounded to 3 decimals
            assert (w >= 0).all()
    # the tokens are the validation pair's: the source pieces, the reference pieces and </s>
    vocab = trainer.vocab
    for s in first:
        src, tgt = trainer.data.valid[s["index"]]
        assert s["src_tokens"] == TokenAxis.from_pieces(vocab.src.pieces(src)).labels
        assert s["tgt_tokens"] == TokenAxis.from_pieces(vocab.tgt.pieces([*tgt, vocab.tgt.eos_id])).labels
        assert s["tgt_tokens"][-1] == "</s>"
    # the weights move with training, and the last ones are what the attention page computes for the
    # reference with the final model (one sentence at a time, where the log pads them into one batch)
    assert records[0]["sentences"][0]["layers"] != records[-1]["sentences"][0]["layers"]
    translator = Translator(trainer.model, vocab)
    try:
        for s in records[-1]["sentences"]:
            source, reference = trainer.data.valid_text[s["index"]]
            expected = collect_attention(translator, source, translation=reference).weights["cross"]
            assert np.asarray(s["layers"]) == pytest.approx(expected, abs=0.0005 + 1e-6)
    finally:
        translator.close()


def test_alignment_sentences_zero_writes_nothing(tmp_path):
    train(tmp_path / "run", "train.alignment_sentences=0", "train.max_steps=2")
    assert not (tmp_path / "run" / ALIGNMENTS_FILE).exists()


def test_a_resumed_run_appends_without_repeating_steps(tmp_path):
    """A run killed after writing step 6's snapshot but before its checkpoint, mid-way through a
    line: the resumed run redoes steps 5 and 6 and the file ends as the uninterrupted one."""
    settings = ["train.save_every=2", "train.tensorboard=true"]
    run = tmp_path / "run"
    train(run, *settings)
    expected = read_alignments(run / ALIGNMENTS_FILE)
    last = list_checkpoints(run)[-1]
    assert last.name.endswith("6")
    shutil.rmtree(last)
    (run / "checkpoints" / "latest.json").unlink(missing_ok=True)
    with (run / ALIGNMENTS_FILE).open("a", encoding="utf-8") as f:
        f.write('{"step": 8, "epoch": 0, "sente')  # cut short by the kill

    resumed = train(run, *settings)
    assert resumed.resumed_from == 4
    records = [json.loads(line) for line in (run / ALIGNMENTS_FILE).read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in records] == [2, 4, 6]
    assert [[s["index"] for s in r["sentences"]] for r in records] == [[s["index"] for s in r["sentences"]] for r in expected]
    assert (run / ALIGNMENTS_FILE).read_text(encoding="utf-8").endswith("\n")
    # TensorBoard hides the events past the checkpoint that the first run wrote: no curve doubles back
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [2, 4, 6]
    assert [s.step for s in acc.Images(acc.Tags()["images"][0])] == [2, 4, 6]
