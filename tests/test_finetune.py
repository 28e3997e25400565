"""Fine-tuning (train.init_from): the initial run's weights, tokenizer and architecture, the fine-tuning
schedules, frozen parts, exact resume, imported Marian models, and what the other commands do with the run."""

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from interop_helpers import write_marian_model
from transformer.cli import main
from transformer.run.model import load_model, unique_state_dict
from transformer.run.config import RunConfig
from transformer.training.finetune import InitFromError
from transformer.training.schedule import constant_lr, inverse_sqrt_lr, lr_function, noam_lr
from transformer.training.trainer import Trainer

COMMON = ["data.builtin_written=0", "data.builtin_valid=20", "data.builtin_test=20", "data.max_tokens=800",
          "train.precision=fp32", "train.threads=1", "train.log_every=1", "train.eval_sentences=0", "train.eval_every=100"]
BASE = COMMON + ["data.builtin_train=600", "data.vocab_size=400", "model.preset=tiny", "train.warmup=20",
                 "train.lr_scale=2", "train.max_steps=10"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A tiny run trained for 10 steps: the model the tests fine-tune."""
    run = tmp_path_factory.mktemp("base") / "run"
    Trainer(RunConfig().with_overrides(BASE), run, show_progress=False).train()
    return run


def fine_tune(base: Path, *extra: str) -> RunConfig:
    # data.seed=1: other sentences of the built-in generator than the base run saw
    return RunConfig().with_overrides(COMMON + ["data.builtin_train=600", "data.seed=1", f"train.init_from={base}", *extra])


def train_losses(run_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["kind"] == "train"}


def test_fine_tuning_starts_from_the_initial_weights_tokenizer_and_architecture(base, tmp_path):
    run = tmp_path / "ft"
    untouched = {p: p.stat().st_mtime_ns for p in base.rglob("*")}
    trainer = Trainer(fine_tune(base, "train.max_steps=3"), run, show_progress=False)
    initial = load_file(str(base / "model.safetensors"))
    now = unique_state_dict(trainer.model)
    assert initial.keys() == now.keys() and all(torch.equal(initial[k], now[k]) for k in initial)
    # the base run's tokenizer, not a new BPE of data.vocab_size=8000 (the default) on the new data
    assert (run / "tokenizer.json").read_bytes() == (base / "tokenizer.json").read_bytes()
    assert json.loads((run / "config.json").read_text()) == json.loads((base / "config.json").read_text())
    assert trainer.optimizer.state_dict()["state"] == {}  # a fresh optimizer
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(2e-4 / 100)  # inverse_sqrt, warmup 100, step 1
    trainer.train()
    trained = load_file(str(run / "checkpoints" / "step-00000003" / "model.safetensors"))
    assert not all(torch.equal(initial[k], trained[k]) for k in initial)
    record = json.loads((run / "run_config.json").read_text())["initialized_from"]
    assert record["weights_sha256"] == hashlib.sha256((base / "model.safetensors").read_bytes()).hexdigest()
    assert (record["path"], record["checkpoint"], record["step"]) == (str(base.resolve()), None, 10)
    assert {p: p.stat().st_mtime_ns for p in base.rglob("*")} == untouched  # the initial run is only read


def test_a_checkpoint_of_the_initial_run_can_be_named(base, tmp_path):
    checkpoint = base / "checkpoints" / "step-00000010"
    trainer = Trainer(fine_tune(checkpoint, "train.max_steps=1"), tmp_path / "ft", show_progress=False)
    initial = load_file(str(checkpoint / "model.safetensors"))
    assert all(torch.equal(initial[k], v) for k, v in unique_state_dict(trainer.model).items())
    assert trainer.initialized_from["checkpoint"] == "step-00000010" and trainer.initialized_from["step"] == 10
    trainer.close()


def test_schedules_follow_their_formulas():
    # inverse_sqrt: linear warmup to the peak, then lr * sqrt(warmup / step); constant: warmup, then flat
    assert inverse_sqrt_lr(50, lr=1e-3, warmup=100) == pytest.approx(5e-4)
    assert inverse_sqrt_lr(100, lr=1e-3, warmup=100) == pytest.approx(1e-3)
    assert inverse_sqrt_lr(400, lr=1e-3, warmup=100) == pytest.approx(5e-4)
    assert constant_lr(25, lr=1e-3, warmup=100) == pytest.approx(2.5e-4)
    assert constant_lr(10_000, lr=1e-3, warmup=100) == pytest.approx(1e-3)
    assert lr_function("noam", d_model=512, warmup=4000)(4000) == noam_lr(4000, d_model=512, warmup=4000)
    with pytest.raises(ValueError, match="needs a learning rate"):
        lr_function("constant", d_model=512, warmup=10)
    # train.schedule=auto: the paper's schedule from scratch, inverse_sqrt when fine-tuning
    assert RunConfig().train.effective_schedule() == ("noam", 4000)
    assert RunConfig().with_overrides(["train.init_from=x"]).train.effective_schedule() == ("inverse_sqrt", 100)
    cfg = RunConfig().with_overrides(["train.init_from=x", "train.schedule=constant", "train.warmup=7"])
    assert cfg.train.effective_schedule() == ("constant", 7)
    with pytest.raises(ValueError, match="train.schedule must be one of"):
        RunConfig().with_overrides(["train.schedule=cosine"])


def test_a_run_config_saved_before_the_schedule_keys_still_resumes():
    old = RunConfig().to_dict()
    del old["train"]["schedule"], old["train"]["lr"], old["train"]["init_from"], old["train"]["freeze"]
    old["train"]["warmup"] = 4000  # what run_config.json held when the warmup had a number as default
    assert RunConfig.from_dict(old).effective_settings() == RunConfig().effective_settings()
    assert RunConfig.from_dict(old).settings() != RunConfig().settings()


def test_trainer_steps_follow_the_fine_tuning_schedule(base, tmp_path):
    trainer = Trainer(fine_tune(base, "train.max_steps=4", "train.warmup=2", "train.lr=1e-3"), tmp_path / "ft",
                      show_progress=False)
    trainer.train()
    records = [json.loads(l) for l in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in records if r["kind"] == "train"]
    assert lrs == pytest.approx([inverse_sqrt_lr(s, lr=1e-3, warmup=2) for s in (1, 2, 3, 4)])


@pytest.mark.parametrize("setting, message", [
    ("model.d_model=64", r"model.d_model=64 contradicts the initial model of train.init_from \(d_model=32\)"),
    ("model.preset=base", r"model.preset=base contradicts the initial model .*d_model 512 in the preset, 32 there"),
    ("model=rnn", r"model.architecture=rnn contradicts train.init_from"),
    ("data.src_lang=de", r"data.src_lang/data.tgt_lang say de->en but the initial model .* translates fr->en"),
    ("data.joint_vocab=false", r"data.joint_vocab=false contradicts train.init_from"),
])
def test_settings_that_contradict_the_initial_model_are_refused(base, tmp_path, setting, message):
    with pytest.raises(InitFromError, match=message):
        Trainer(fine_tune(base, setting), tmp_path / "ft", show_progress=False)
    assert not (tmp_path / "ft").exists()


def test_dropout_may_change_when_fine_tuning(base, tmp_path):
    trainer = Trainer(fine_tune(base, "model.dropout=0.3"), tmp_path / "ft", show_progress=False)
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert config["dropout"] == 0.3 and config["d_model"] == 32
    trainer.close()


def test_frozen_parts_stay_bit_identical_and_leave_the_optimizer(base, tmp_path):
    run = tmp_path / "ft"
    trainer = Trainer(fine_tune(base, "train.freeze=embeddings,encoder", "train.max_steps=4", "train.lr=1e-2",
                                "train.warmup=1"), run, show_progress=False)
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    optimized = trainer.optimizer.param_groups[0]["params"]
    assert len(optimized) == len(trainable) < len(list(trainer.model.parameters()))
    assert {id(p) for p in optimized} == {id(p) for p in trainable}
    trainer.train()
    before = load_file(str(base / "model.safetensors"))
    after = load_file(str(run / "checkpoints" / "step-00000004" / "model.safetensors"))
    frozen = [k for k in before if k.startswith("encoder.")]  # the shared, tied embedding is stored under encoder.embed
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)
    changed = [k for k in before if k.startswith("decoder.layers.") and not torch.equal(before[k], after[k])]
    assert len(changed) > 10  # the decoder layers trained


def test_interrupted_fine_tuning_with_a_mix_resumes_exactly(base, tmp_path):
    # a small first corpus, so that the 8 steps cross epochs and the mix draws its second corpus again
    pairs = "".join(f"phrase numéro {i} .\tsentence number {i} .\n" for i in range(60))
    (tmp_path / "extra.tsv").write_text(pairs, encoding="utf-8")
    cfg = fine_tune(base, "data.builtin_train=120", f"data.mix=builtin:0.7,{tmp_path / 'extra.tsv'}:0.3",
                    "data.max_unknown=1", "data.max_tokens=1600", "train.max_steps=8", "train.save_every=2", "model.dropout=0.1",
                    "train.lr=3e-3", "train.warmup=2")
    straight = tmp_path / "straight"
    Trainer(cfg, straight, show_progress=False).train()
    reference = train_losses(straight)
    assert sorted(reference) == list(range(1, 9))

    interrupted = tmp_path / "interrupted"
    trainer = Trainer(cfg, interrupted, show_progress=False)
    assert len(trainer.batches) < 8  # more than one epoch
    step, calls = trainer._step, []

    def crash_at_step_6(*args):
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("killed")
        return step(*args)

    trainer._step = crash_at_step_6
    with pytest.raises(RuntimeError, match="killed"):
        trainer.train()
    resumed = Trainer(cfg, interrupted, show_progress=False)
    assert resumed.resumed_from == 4 and resumed.initialized_from == trainer.initialized_from
    resumed.train()
    assert train_losses(interrupted) == reference
    a = load_file(str(straight / "checkpoints" / "step-00000008" / "model.safetensors"))
    b = load_file(str(interrupted / "checkpoints" / "step-00000008" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_an_imported_marian_model_is_fine_tuned_with_its_sentencepiece_tokenizer(tmp_path):
    from transformer.interop.hf import import_hf

    write_marian_model(tmp_path / "marian", steps=20)
    imported = import_hf(tmp_path / "marian", tmp_path / "imported")
    run = tmp_path / "ft"
    trainer = Trainer(fine_tune(imported, "train.max_steps=2"), run, show_progress=False)
    assert type(trainer.vocab.src).__name__ == "SentencePieceTokenizer"
    trainer.train()
    for name in ("tokenizer.src.json", "tokenizer.tgt.json"):
        assert (run / name).read_bytes() == (imported / name).read_bytes()
    assert json.loads((run / "run_config.json").read_text())["initialized_from"]["imported_from"] == "huggingface-marian"
    assert load_model(run).config.extra["imported_from"] == "huggingface-marian"


def test_a_fine_tuned_run_translates_serves_attends_and_exports(base, tmp_path, capsys):
    run = tmp_path / "ft"
    Trainer(fine_tune(base, "train.max_steps=3"), run, show_progress=False).train()
    capsys.readouterr()
    assert main(["translate", str(run), "je suis étudiant", "il fait beau"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # (a model of 13 steps may well say nothing)
    from fastapi.testclient import TestClient

    from transformer.serve.app import create_app
    from transformer.translate.translator import load_translator

    translator = load_translator(run)
    with TestClient(create_app(translator, src_lang="fr", tgt_lang="en")) as client:
        response = client.post("/v1/translate", json={"text": "je suis étudiant"})
    assert response.status_code == 200, response.text
    assert response.json()["translations"][0]["translation"] == translator.translate(["je suis étudiant"])[0]
    assert main(["attend", str(run), "je suis étudiant", "--out", str(tmp_path / "attention"), "--format", "png"]) == 0
    assert list((tmp_path / "attention").glob("*.png"))
    assert main(["export", str(run), "--format", "hf", str(tmp_path / "hf")]) == 0
    from transformers import MarianMTModel

    from transformer.text import Vocabularies

    vocab, model = Vocabularies.load(run), load_model(run)
    src = torch.tensor([vocab.src.encode("je suis étudiant")])
    tgt = torch.tensor([[vocab.tgt.bos_id, *vocab.tgt.encode("i am a student")]])
    hf = MarianMTModel.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        expected = model(src, tgt, torch.ones_like(src, dtype=torch.bool))
        got = hf(input_ids=src, attention_mask=torch.ones_like(src), decoder_input_ids=tgt).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_two_process_fine_tuning_equals_one_process_with_the_same_global_batch(base, tmp_path):
    import os
    import subprocess
    import sys

    settings = COMMON + ["data.builtin_train=600", "data.seed=1", f"train.init_from={base}", "train.max_steps=4",
                         "train.freeze=embeddings", "model.dropout=0.0"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
                          "transformer.cli", "train", "--run-dir", str(tmp_path / "ddp"), "--quiet", *settings],
                         capture_output=True, text=True, env=env, timeout=600)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = subprocess.run([sys.executable, "-m", "transformer.cli", "train", "--run-dir", str(tmp_path / "single"),
                             "--quiet", *settings, "train.accumulate=2"], capture_output=True, text=True, env=env)
    assert single.returncode == 0, single.stderr[-3000:]
    a = load_file(str(tmp_path / "ddp" / "checkpoints" / "step-00000004" / "model.safetensors"))
    b = load_file(str(tmp_path / "single" / "checkpoints" / "step-00000004" / "model.safetensors"))
    initial = load_file(str(base / "model.safetensors"))
    for name in a:
        assert (a[name] - b[name]).abs().max() < 1e-5, name
    assert torch.equal(a["encoder.embed.tokens.weight"], initial["encoder.embed.tokens.weight"])  # frozen on both ranks
    assert json.loads((tmp_path / "ddp" / "run_config.json").read_text())["initialized_from"]["step"] == 10


def test_the_step_recorded_is_the_step_of_the_weights_loaded(tmp_path, monkeypatch):
    """The initial run's model file is its best checkpoint (step 2 here, validation getting worse after it),
    not its newest (step 6): ``initialized_from.step`` names the step whose weights were loaded."""
    validate = Trainer.validate

    def worse_each_time(self):
        record = validate(self)
        return dict(record, loss=record["loss"] + self.state.step)  # the first validation stays the best

    monkeypatch.setattr(Trainer, "validate", worse_each_time)
    initial = tmp_path / "initial"
    Trainer(RunConfig().with_overrides(BASE + ["train.max_steps=6", "train.eval_every=2"]), initial,
            show_progress=False).train()
    monkeypatch.setattr(Trainer, "validate", validate)
    trainer = Trainer(fine_tune(initial, "train.max_steps=1"), tmp_path / "ft", show_progress=False)
    trainer.close()
    loaded, best = load_file(str(initial / "model.safetensors")), load_file(
        str(initial / "checkpoints" / "step-00000002" / "model.safetensors"))
    assert all(torch.equal(loaded[k], best[k]) for k in loaded)
    assert trainer.initialized_from["checkpoint"] is None and trainer.initialized_from["step"] == 2
