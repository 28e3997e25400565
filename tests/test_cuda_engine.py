"""The CUDA engine (transformer/cuda/), checked on the CPU: what it does is device-neutral code
(padding batches to few shapes, compiling the forward pass, a training step that never reads a
value back), so each part is compared here with the plain model; tests/test_cuda.py runs the
same on a GPU, where the copies are really asynchronous and a host sync really raises.
"""

import copy
from dataclasses import replace

import pytest
import torch
from dispatch_helpers import OperatorLog
from trainer_helpers import TINY
from transformer.config import preset
from transformer.cuda import DeviceBatches, accelerate_training, pad_batch
from transformer.data import make_batch
from transformer.model import Transformer
from transformer.run.config import RunConfig
from transformer.model.loss import LabelSmoothedCrossEntropy
from transformer.training.trainer import Trainer

V, PAD, BOS, EOS = 50, 0, 1, 2


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return Transformer(preset("tiny", src_vocab_size=V, dropout=0.0, attention_dropout=0.0)).train()


def batches(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        examples = [(torch.randint(4, V, (int(torch.randint(3, 12, (), generator=g)),), generator=g).tolist(),
                     torch.randint(4, V, (int(torch.randint(2, 11, (), generator=g)),), generator=g).tolist())
                    for _ in range(3 + i)]
        out.append(make_batch(examples, pad_id=PAD, bos_id=BOS, eos_id=EOS))
    return out


def step(model, batch):
    """The trainer's GPU step: logits at every position, the loss ignoring padding; (loss, gradients)."""
    model.zero_grad(set_to_none=True)
    loss, _ = LabelSmoothedCrossEntropy(smoothing=0.1, ignore_index=PAD)(
        model(batch.src, batch.tgt_in, batch.src_mask), batch.tgt_out)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def assert_same_step(got, want):
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=0)
    assert got[1].keys() == want[1].keys()
    for name, grad in want[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=1e-4, atol=1e-5 * grad.abs().max().item(),
                                   msg=lambda m: f"{name}: {m}")


# ------------------------------------------------------------------------------ batches
def test_padding_to_a_multiple_changes_the_shapes_and_not_the_step():
    model = tiny_model()
    for batch in batches():
        padded = pad_batch(batch, 8, pad_id=PAD)
        assert padded.src.shape[1] % 8 == 0 and padded.tgt_in.shape[1] % 8 == 0
        assert padded.src.shape[1] > batch.src.shape[1] or batch.src.shape[1] % 8 == 0
        assert (padded.n_src_tokens, padded.n_tgt_tokens) == (batch.n_src_tokens, batch.n_tgt_tokens)
        assert int(padded.src_mask.sum()) == batch.n_src_tokens and int((padded.tgt_out != PAD).sum()) == batch.n_tgt_tokens
        assert_same_step(step(model, padded), step(model, batch))


def test_device_batches_on_a_cpu_are_the_batches_padded_in_order():
    original = batches(4)
    got = list(DeviceBatches(iter(original), torch.device("cpu"), pad_id=PAD))
    assert len(got) == 4
    for g, b in zip(got, original):
        want = pad_batch(b, 8, pad_id=PAD)
        assert all(torch.equal(x, y) for x, y in zip((g.src, g.src_mask, g.tgt_in, g.tgt_out),
                                                      (want.src, want.src_mask, want.tgt_in, want.tgt_out)))


# ------------------------------------------------------------------------------ compile
@pytest.fixture
def compiling(monkeypatch):
    """A compiler with nothing cached (Dynamo keeps its graphs per function, for every model of the class,
    and counts them against its recompile limit), and the model's id range check on shapes and dtypes
    only, as on CUDA (on CPU tensors it reads the ids, which would break a compiled graph in two)."""
    from transformer.model.transformer import Transformer as Model

    torch._dynamo.reset()
    check_ids = Model._check_ids
    monkeypatch.setattr(Model, "_check_ids",
                        staticmethod(lambda ids, name, vocab: check_ids(ids.to("meta"), name, vocab)))
    yield
    torch._dynamo.reset()


def one_layer_model(seed=0):
    """The tiny model with one layer each side: compiling it takes half the time, and compiles the same way."""
    torch.manual_seed(seed)
    return Transformer(preset("tiny", src_vocab_size=V, dropout=0.0, attention_dropout=0.0, n_encoder_layers=1,
                              n_decoder_layers=1)).train()


def shapes(n=4):
    """``n`` padded batches of as many sentences and lengths: every batch a new (batch, length) shape."""
    return [pad_batch(make_batch(_lengthened(b, 8 * i), pad_id=PAD, bos_id=BOS, eos_id=EOS), 8, pad_id=PAD)
            for i, b in enumerate(batches(n, seed=2))]


def _lengthened(batch, extra):
    """``batch``'s examples with ``extra`` more tokens on each side."""
    examples = []
    for src, mask, tgt_out in zip(batch.src.tolist(), batch.src_mask.tolist(), batch.tgt_out.tolist()):
        src = [t for t, real in zip(src, mask) if real]
        tgt = [t for t in tgt_out if t not in (PAD, EOS)]
        examples.append((src + [5] * extra, tgt + [6] * extra))
    return examples


def graphs_compiled():
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def test_the_compiled_step_equals_eager_compiles_once_and_evaluation_compiles_nothing(compiling):
    """torch.compile traced through AOTAutograd (the inductor backend's front half, without code generation):
    batches of four shapes give the plain model's loss and gradients from one compilation (the batch and
    length dimensions marked dynamic); evaluation and calls without gradients run eagerly and compile
    nothing; the state_dict keeps its keys, and undo makes the model eager again."""
    model = one_layer_model()
    keys = list(model.state_dict())
    compiled = copy.deepcopy(model)
    said = []
    engine = accelerate_training(compiled, compile=True, backend="aot_eager", say=said.append)
    assert engine.compiled and compiled._compiled_call_impl is not None
    padded = shapes(4)
    assert len({(b.src.shape, b.tgt_in.shape) for b in padded}) == 4
    for batch in padded:
        assert_same_step(engine.run(lambda: step(compiled, batch)), step(model, batch))
    assert (engine.compiles, engine.recompiles) == (1, 0) and engine.compile_seconds > 0
    assert len(said) == 1 and said[0].startswith("torch.compile: compiled the training step in")
    before = graphs_compiled()
    compiled.eval()
    model.eval()
    with torch.no_grad():
        for batch in padded[:2]:
            torch.testing.assert_close(compiled(batch.src, batch.tgt_in, batch.src_mask),
                                       model(batch.src, batch.tgt_in, batch.src_mask), rtol=1e-5, atol=1e-6)
        compiled.train()
        compiled(padded[0].src, padded[0].tgt_in, padded[0].src_mask)  # training mode, but no gradients
    assert graphs_compiled() == before and engine.compiles == 1 and engine.compiled
    assert list(compiled.state_dict()) == keys
    engine.undo()
    assert compiled._compiled_call_impl is None and not engine.compiled


def test_compiling_past_the_recompile_limit_falls_back_to_eager_and_says_so(compiling):
    """Dynamo alone would run the model eagerly past its recompile limit without a word; the engine
    notices, stops calling the graph and reports it (``engine.compiled`` false from then on)."""
    said = []
    model, plain = one_layer_model(), one_layer_model()
    engine = accelerate_training(model, compile=True, backend="eager", say=said.append)
    first, second = shapes(2)
    with torch._dynamo.config.patch(recompile_limit=1, cache_size_limit=1):
        assert_same_step(engine.run(lambda: step(model, first)), step(plain, first))
        assert engine.compiled and engine.compiles == 1
        int32 = replace(second, src=second.src.int())  # another dtype: a guard fails, a recompilation is due
        assert_same_step(engine.run(lambda: step(model, int32)), step(plain, int32))
    assert not engine.compiled and model._compiled_call_impl is None
    assert len(said) == 2 and "recompile_limit (1)" in said[1] and "training goes on without it" in said[1]


def test_a_backward_pass_that_fails_to_compile_falls_back_and_runs_the_batch_again(compiling):
    """AOTAutograd compiles the backward graph at the first backward(), outside the forward's fallback:
    ``engine.run`` catches it, and the batch's gradients are the eager ones, counted once."""
    from torch._dynamo.backends.common import aot_autograd

    def no_backward_compiler(graph_module, example_inputs):
        raise RuntimeError("no backward compiler here")

    said = []
    model, plain = one_layer_model(), one_layer_model()
    engine = accelerate_training(model, compile=True, say=said.append,
                                 backend=aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=no_backward_compiler))
    batch = shapes(1)[0]
    assert_same_step(engine.run(lambda: step(model, batch)), step(plain, batch))
    assert not engine.compiled and model._compiled_call_impl is None
    assert len(said) == 1 and "no backward compiler here" in said[0]


def test_a_compiler_failure_falls_back_to_eager_with_one_warning():
    def broken_backend(graph_module, example_inputs):
        raise RuntimeError("no compiler here")

    said = []
    model, plain = tiny_model(), tiny_model()
    engine = accelerate_training(model, compile=True, backend=broken_backend, say=said.append)
    batch = batches(1)[0]
    assert_same_step(step(model, batch), step(plain, batch))
    assert not engine.compiled and model._compiled_call_impl is None
    assert len(said) == 1 and "torch.compile failed" in said[0] and "no compiler here" in said[0]
    step(model, batch)
    assert len(said) == 1


def test_without_compile_the_engine_changes_nothing():
    model = tiny_model()
    engine = accelerate_training(model)
    assert not engine.compiled and model._compiled_call_impl is None


def test_compile_is_refused_for_cpu_training(tmp_path):
    with pytest.raises(ValueError, match="train.compile applies to training on CUDA"):
        Trainer(RunConfig().with_overrides(TINY + ["train.compile=true", "train.device=cpu"]), tmp_path / "run",
                show_progress=False)


# ------------------------------------------------------------------------------ no host sync
@pytest.mark.parametrize("settings", [[], ["train.word_dropout=0.1", "train.clip_norm=1.0"], ["train.rdrop=1.0"]],
                         ids=["recipe", "word-dropout-and-clipping", "rdrop"])
def test_a_training_step_on_the_gpu_path_reads_nothing_back(tmp_path, monkeypatch, settings):
    """The trainer's step as it runs on CUDA (logits at every position; the CPU engine off, as it is there;
    the model's id range check, which runs on CPU tensors only, skipped as on a GPU) dispatches no
    operator that makes the host wait: the loss is summed on the device and read on the logging cadence."""
    from transformer.model.transformer import Transformer as Model

    trainer = Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=3"] + settings), tmp_path / "run",
                      show_progress=False)
    try:
        trainer.engine.undo()  # the CPU engine's kernels: not on a GPU
        trainer.sparse_logits = False
        check_ids = Model._check_ids
        monkeypatch.setattr(Model, "_check_ids", staticmethod(
            lambda ids, name, vocab: check_ids(ids.to("meta"), name, vocab)))  # shapes and dtypes only, as on CUDA
        group = list(DeviceBatches(trainer.batches.iter_from(0, 0), trainer.device, pad_id=PAD))[:1]
        with OperatorLog() as seen:
            loss, tokens = trainer._step(trainer.model, group)
        assert seen.names and not seen.syncs()
        assert loss.dtype == torch.float64 and float(loss) > 0 and tokens == group[0].n_tgt_tokens
        trainer.sparse_logits = True  # what the guard catches: the CPU's selection of real positions
        with OperatorLog() as seen:
            trainer._step(trainer.model, group)
        assert any("nonzero" in n for n in seen.names)
    finally:
        trainer.close()


def test_the_time_limit_leaves_out_the_time_compiling_took(tmp_path):
    """A run stops once train.time_limit seconds of training are past, the batches that compiled a graph
    not counted: here the first step compiles for 5 of the clock's seconds (one second per step)."""
    from transformer.cuda.training import CudaTraining
    from trainer_helpers import Clock

    class CompilingFirst(CudaTraining):
        def run(self, batch_step):
            if not self.compiles:
                self.compiles, self.compile_seconds = 1, 5.0
            return batch_step()

    def trained(run_dir, engine):
        trainer = Trainer(RunConfig().with_overrides(TINY + ["train.time_limit=8"]), run_dir, show_progress=False)
        trainer.clock = Clock()
        if engine:
            trainer.engine.undo()  # the CPU engine's kernels out, the CUDA engine's way in (uncompiled)
            trainer.engine = CompilingFirst(trainer.model)
        trainer.train()
        return trainer.state

    plain, compiling = trained(tmp_path / "plain", False), trained(tmp_path / "compiling", True)
    assert (plain.step, plain.seconds) == (9, 9.0)  # stops once 8 seconds are past
    assert (compiling.step, compiling.seconds) == (14, 9.0)  # 14 of the clock's seconds, 5 of them compiling
