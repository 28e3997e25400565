"""On a CUDA GPU: training in each precision, exact resume (the CUDA RNG and fp16's loss scale
included), checkpoints that load on the CPU, decoding that agrees with the CPU's, the translate
command's --device, a one-process torchrun over NCCL, and the CUDA engine (a step that never waits
for the GPU, batches copied ahead of their step, compiled training following eager training).

Skipped where PyTorch sees no CUDA device (CI has none, and the pinned torch is the CPU build);
on a GPU machine: ``pytest tests/test_cuda.py``."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from trainer_helpers import TINY, records, train
from transformer.demo import demo_config
from transformer.decoding import DecodeConfig
from transformer.model.masks import padding_mask
from transformer.run.model import load_model
from transformer.run.config import RunConfig
from transformer.training.trainer import SCALER_KEY, Trainer
from transformer.run.checkpoints import latest_checkpoint
from transformer.run.layout import TRAINER_STATE_FILE as STATE_FILE
from transformer.translate.evaluation import score
from transformer.translate.translator import Translator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device: these check the GPU paths on a machine with one")

GPU = ("train.device=cuda",)


def losses(run_dir) -> list[float]:
    return [r["loss"] for _, r in sorted(records(run_dir).items())]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_training_on_the_gpu_learns_in_each_precision(tmp_path, precision):
    run = tmp_path / "run"
    trainer = train(run, *GPU, f"train.precision={precision}", "train.max_steps=60", "train.save_every=30")
    assert trainer.device.type == "cuda" and trainer.precision == precision
    assert all(p.device.type == "cuda" for p in trainer.model.parameters())
    assert (trainer.scaler is not None) == (precision == "fp16")
    curve = losses(run)
    assert len(curve) == 60 and all(math.isfinite(x) for x in curve)
    assert sum(curve[-10:]) / 10 < sum(curve[:10]) / 10 - 0.5, curve  # it learns
    model = load_model(run)  # a GPU run's files load on the CPU
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_a_resumed_gpu_run_matches_one_run_dropout_masks_included(tmp_path):
    """The CUDA generator draws the dropout masks: a resume restores it with the rest."""
    settings = (*GPU, "train.save_every=8", "model.dropout=0.3")
    train(tmp_path / "straight", *settings, "train.max_steps=16")
    train(tmp_path / "resumed", *settings, "train.max_steps=8")
    train(tmp_path / "resumed", *settings, "train.max_steps=16")
    straight, resumed = losses(tmp_path / "straight"), losses(tmp_path / "resumed")
    assert len(resumed) == 16
    assert resumed == pytest.approx(straight, rel=1e-4)  # GPU sums may differ in the last bits, not more


def test_fp16_resume_keeps_the_loss_scale(tmp_path):
    run = tmp_path / "run"
    settings = [*TINY, *GPU, "train.precision=fp16", "train.save_every=6"]
    first = train(run, *GPU, "train.precision=fp16", "train.save_every=6", "train.max_steps=12")
    reached = first.scaler.state_dict()
    fresh = torch.amp.GradScaler("cuda").state_dict() or {"scale": 65536.0, "_growth_tracker": 0}
    assert (reached["scale"], reached["_growth_tracker"]) != (fresh["scale"], fresh["_growth_tracker"])
    saved = json.loads((latest_checkpoint(run) / STATE_FILE).read_text())["trainer"]["extra"][SCALER_KEY]
    assert saved == reached
    second = Trainer(RunConfig().with_overrides(settings + ["train.max_steps=24"]), run, show_progress=False)
    try:
        assert second.resumed_from == 12 and second.scaler.state_dict() == reached
    finally:
        second.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's recipe trained on the GPU in fp32: its run directory and its test pairs."""
    run = tmp_path_factory.mktemp("gpu") / "run"
    cfg = demo_config(time_limit=None).with_overrides([*GPU, "train.precision=fp32"])
    trainer = Trainer(cfg, run, show_progress=False)
    trainer.train()
    return run, trainer.data.test_text[:100]


@pytest.fixture(scope="module")
def trained(demo):
    return demo[0]


@pytest.fixture(scope="module")
def sentences(demo):
    return [s for s, _ in demo[1][:40]]


def test_the_demo_trained_on_the_gpu_meets_the_demos_quality(demo):
    run, pairs = demo
    hypotheses = Translator.from_run_dir(run, decoding=DecodeConfig(strategy="greedy"), device="cuda").translate(
        [s for s, _ in pairs])
    assert score(hypotheses, [r for _, r in pairs]).bleu >= 85


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_gpu_decoding_agrees_with_the_cpu(trained, sentences, strategy):
    decoding = DecodeConfig(strategy=strategy, beam_size=4)
    cpu = Translator.from_run_dir(trained, decoding=decoding, device="cpu").translate_n_best(sentences)
    gpu = Translator.from_run_dir(trained, decoding=decoding, device="cuda").translate_n_best(sentences)
    assert all(len(a[0].tokens) > 2 for a in cpu)  # real translations, not a model that stops at once
    same = [a[0].tokens == b[0].tokens for a, b in zip(cpu, gpu)]
    assert sum(same) >= len(sentences) - 2, same  # fp32 on both: a near-tie may flip, not more
    for a, b, equal in zip(cpu, gpu, same):
        if equal:
            assert a[0].score == pytest.approx(b[0].score, abs=1e-3)


@pytest.mark.parametrize("decoding", [DecodeConfig(strategy="greedy", max_len_b=20),
                                      DecodeConfig(strategy="beam", beam_size=4, max_len_b=20)], ids=["greedy", "beam"])
def test_gpu_decoding_of_a_small_model_equals_the_cpus(decoding):
    """The Translator's CUDA plan against the CPU's on a small untrained model whose sentences end at many
    different steps (no training needed: the GPU check runs this one, tests/test_cuda_decoding.py's model)."""
    from functools import partial

    from transformer.config import ModelConfig
    from transformer.corpus.builtin import generate_pairs
    from transformer.model import Transformer
    from transformer.text import Vocabularies

    pairs = partial(generate_pairs, written_share=0)
    vocab = Vocabularies.train(pairs(400, seed=1), vocab_size=400)
    cfg = ModelConfig(src_vocab_size=vocab.src.vocab_size, tgt_vocab_size=vocab.tgt.vocab_size, d_model=32,
                      n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, tie_output=False, output_bias=True)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        model.output.bias[vocab.tgt.eos_id] = 0.5  # sentences end at many different steps
    sentences = [src for src, _ in pairs(60, seed=7)]
    cpu = Translator(model, vocab, decoding=decoding, device="cpu")
    want = cpu.translate_n_best(sentences)
    cpu.close()
    got = Translator(model, vocab, decoding=decoding, device="cuda").translate_n_best(sentences)
    assert len({len(h[0].tokens) for h in want}) > 2  # endings at many steps
    same = [a[0].tokens == b[0].tokens for a, b in zip(want, got)]
    assert sum(same) >= len(sentences) - 2, same  # fp32 on both: a near-tie may flip, not more
    for a, b, equal in zip(want, got, same):
        if equal:
            assert a[0].score == pytest.approx(b[0].score, abs=1e-3)


@pytest.mark.parametrize("decoding", [DecodeConfig(strategy="beam", beam_size=4, n_best=3),
                                      DecodeConfig(strategy="sample", n_best=2, seed=5, top_p=0.9)],
                         ids=["n-best", "sample"])
def test_the_translator_decodes_the_cuda_engines_way_with_the_cpus_results(trained, sentences, decoding):
    """On CUDA the Translator takes the GPU's batches and checks finished sentences every few steps
    (transformer/cuda/decoding.py); its n-best lists and samples are the CPU's (fp32 both)."""
    from transformer.cuda import decoding as cuda_decoding

    gpu = Translator.from_run_dir(trained, decoding=decoding, device="cuda")
    assert (gpu.sync_every, gpu.max_tokens) == (cuda_decoding.SYNC_EVERY, cuda_decoding.BATCH_TOKENS)
    cpu = Translator.from_run_dir(trained, decoding=decoding, device="cpu").translate_n_best(sentences)
    got = gpu.translate_n_best(sentences)
    same = [[h.tokens for h in a] == [h.tokens for h in b] for a, b in zip(cpu, got)]
    assert sum(same) >= len(sentences) - 2, same  # a near-tie may flip, not more


def test_gpu_logits_equal_the_cpu_logits(trained):
    model = load_model(trained)
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(4, model.config.src_vocab_size, (2, 2, 9), generator=g)
    mask = padding_mask(src, pad_id=0)
    with torch.inference_mode():
        expected = model(src, tgt, mask)
        got = model.to("cuda")(src.cuda(), tgt.cuda(), mask.cuda()).cpu()
    assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_bf16_decoding_on_the_gpu_mostly_agrees_with_fp32(trained, sentences):
    fp32 = Translator.from_run_dir(trained, device="cuda").translate(sentences)
    bf16 = Translator.from_run_dir(trained, device="cuda", precision="bf16").translate(sentences)
    assert all(bf16) and sum(a == b for a, b in zip(fp32, bf16)) >= 0.8 * len(sentences)


def test_fp16_decoding_on_the_gpu_mostly_agrees_with_fp32(trained, sentences):
    """``precision="fp16"``: a float16 copy of the weights, on a GPU only (transformer/inference_precision.py)."""
    fp32 = Translator.from_run_dir(trained, device="cuda").translate(sentences)
    fp16 = Translator.from_run_dir(trained, device="cuda", precision="fp16")
    assert all(p.dtype == torch.float16 for p in fp16.model.parameters())
    got = fp16.translate(sentences)
    assert all(got) and sum(a == b for a, b in zip(fp32, got)) >= 0.8 * len(sentences)
    text = "".join(s + "\n" for s in sentences[:10])
    done = cli("translate", str(trained), "--greedy", "--precision", "fp16", input=text)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 10, done.stderr


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transformer.cli", *args], capture_output=True, text=True, **kwargs)


def test_translate_command_decodes_on_the_gpu_by_default(trained, sentences):
    text = "".join(s + "\n" for s in sentences[:10])
    auto = cli("translate", str(trained), "--greedy", input=text)
    cuda = cli("translate", str(trained), "--greedy", "--device", "cuda", input=text)
    cpu = cli("translate", str(trained), "--greedy", "--device", "cpu", input=text)
    assert auto.returncode == cuda.returncode == cpu.returncode == 0, auto.stderr + cuda.stderr + cpu.stderr
    assert auto.stdout == cuda.stdout and len(auto.stdout.splitlines()) == 10
    assert all(line.strip() for line in auto.stdout.splitlines())
    assert sum(a == b for a, b in zip(auto.stdout.splitlines(), cpu.stdout.splitlines())) >= 9
    refused = cli("translate", str(trained), "--precision", "int8", "--device", "cuda", input=text)
    assert refused.returncode == 2 and "int8" in refused.stderr


def test_one_process_torchrun_trains_over_nccl(tmp_path):
    run = tmp_path / "ddp"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m", "transformer.cli",
         "train", "--run-dir", str(run), "--quiet", *TINY, *GPU, "train.max_steps=6"],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(losses(run)) == 6 and all(math.isfinite(x) for x in losses(run))


# ------------------------------------------------------------------------------ the CUDA engine
def test_a_gpu_training_step_never_waits_for_the_gpu(tmp_path):
    """With CUDA's sync debug mode set to raise, a whole step (word dropout and clipping included) runs:
    no .item(), no nonzero(), no value read back; the loss stays on the device until it is logged."""
    from transformer.cuda import DeviceBatches

    trainer = Trainer(RunConfig().with_overrides(TINY + [*GPU, "train.max_steps=3", "train.word_dropout=0.1",
                                                         "train.clip_norm=1.0", "train.precision=bf16"]),
                      tmp_path / "run", show_progress=False)
    try:
        group = list(DeviceBatches(trainer.batches.iter_from(0, 0), trainer.device, pad_id=trainer.vocab.tgt.pad_id))
        trainer._step(trainer.model, group[:1])  # the first step sets up the optimizer's state
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            loss, _ = trainer._step(trainer.model, group[1:2])
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert loss.device.type == "cuda" and math.isfinite(float(loss))
    finally:
        trainer.close()


def test_device_batches_copy_the_padded_batches_to_the_gpu(tmp_path):
    from transformer.cuda import DeviceBatches, pad_batch

    trainer = Trainer(RunConfig().with_overrides(TINY + [*GPU, "train.max_steps=1"]), tmp_path / "run",
                      show_progress=False)
    try:
        pad = trainer.vocab.tgt.pad_id
        cpu = [pad_batch(b, 8, pad_id=pad) for b in trainer.batches.iter_from(0, 0)]
        gpu = list(DeviceBatches(trainer.batches.iter_from(0, 0), trainer.device, pad_id=pad))
        assert len(gpu) == len(cpu)
        for g, c in zip(gpu, cpu):
            assert g.src.device.type == "cuda"
            assert torch.equal(g.src.cpu(), c.src) and torch.equal(g.tgt_out.cpu(), c.tgt_out)
            assert torch.equal(g.src_mask.cpu(), c.src_mask) and torch.equal(g.tgt_in.cpu(), c.tgt_in)
    finally:
        trainer.close()


def test_compiled_training_follows_eager_training(tmp_path):
    """train.compile=true (inductor) trains the same run as eager within GPU rounding, without dropout, from
    one compilation for every batch shape."""
    same = (*GPU, "model.dropout=0", "train.max_steps=20", "train.precision=fp32")
    eager = train(tmp_path / "eager", *same)
    compiled = train(tmp_path / "compiled", *same, "train.compile=true")
    assert compiled.engine.compiled and compiled.engine.failure is None
    assert (compiled.engine.compiles, compiled.engine.recompiles) == (1, 0)
    assert losses(tmp_path / "compiled") == pytest.approx(losses(tmp_path / "eager"), rel=2e-3)
    assert not eager.engine.compiled
