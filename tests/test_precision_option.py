"""The precision a model translates in: one value (fp32, bf16, int8, fp16), given as --precision
and precision=, and every refusal, made in transformer/inference_precision.py."""

import pytest
import torch

from transformer.cli import build_parser, main
from transformer.errors import UserError
from transformer.corpus.builtin import generate_pairs
from transformer.cpu import ENV_SWITCH, build
from transformer.model import RNNSeq2Seq
from transformer.model.rnn_config import RNNConfig
from transformer.inference_precision import PRECISIONS, check_precision, resolve_device
from transformer.translate.translator import Translator, load_translator

kernels_built = pytest.mark.skipif(not build.available(), reason="the CPU kernels are unavailable (no C compiler)")


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    """A tiny untrained Transformer with its tokenizer: enough to compare outputs."""
    return tiny_run(pairs=200, learned_positions=False, languages=None)


# ------------------------------------------------------------------------------------------ the resolver
@pytest.mark.parametrize("device, accepted", [("cpu", ("fp32", "bf16", "int8")), ("cuda", ("fp32", "bf16", "fp16"))])
def test_each_precision_is_accepted_where_it_runs(device, accepted, monkeypatch):
    monkeypatch.setattr(build, "available", lambda: True)  # int8's kernels, whether this machine can build them
    for precision in accepted:
        assert check_precision(precision, torch.device(device)) == precision
    refused = set(PRECISIONS) - set(accepted)
    for precision in refused:
        with pytest.raises(UserError):
            check_precision(precision, device)


@pytest.mark.parametrize("precision, device, kwargs, message", [
    ("int8", "cuda", {}, "int8 quantisation is for fp32 CPU inference: translate on the CPU (--device cpu or auto), "
                         "not cuda"),
    ("fp16", "cpu", {}, "fp16 is for CUDA devices, not cpu: on a CPU use bf16 (or fp32)"),
    ("int4", "cpu", {}, "precision must be one of ('fp32', 'bf16', 'int8', 'fp16'), got 'int4'"),
    ("int8", "cpu", {"model": "rnn"}, "int8 is for Transformer models (the recurrent baseline's layers do not run "
                                      "the CPU kernels)"),
])
def test_each_refusal_is_one_line(precision, device, kwargs, message):
    if kwargs.get("model") == "rnn":
        rnn = RNNSeq2Seq(RNNConfig(src_vocab_size=20, tgt_vocab_size=20, embed_dim=8, hidden_size=8))
        kwargs = {**kwargs, "model": rnn}
    with pytest.raises(UserError) as caught:
        check_precision(precision, device, **kwargs)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_int8_without_the_kernels_is_refused(monkeypatch):
    monkeypatch.setenv(ENV_SWITCH, "0")
    with pytest.raises(UserError, match=f"^int8 needs the compiled CPU kernels \\(a C compiler, and {ENV_SWITCH} "
                                         "not 0\\)$"):
        check_precision("int8", "cpu")


def test_the_device_follows_the_precision(monkeypatch):
    for present in (True, False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
        assert resolve_device("auto").type == ("cuda" if present else "cpu")
        assert resolve_device("auto", precision="int8").type == "cpu"  # int8 is a CPU format
    with pytest.raises(UserError, match=r"^--device cuda: PyTorch sees no CUDA device here .*; use --device cpu "
                                         r"or auto$"):
        resolve_device("cuda")
    with pytest.raises(UserError, match=r"^train.device=cuda: .* use train.device=cpu or auto$"):
        resolve_device("cuda", setting="train.device")
    with pytest.raises(UserError, match="fp16 is for CUDA devices"):
        resolve_device("auto", precision="fp16")  # no GPU: auto is the CPU, where fp16 does not run
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(UserError, match="int8 quantisation is for fp32 CPU inference"):
        resolve_device("cuda", precision="int8")


# ------------------------------------------------------------------------------------------ the options
@pytest.mark.parametrize("command, extra", [("translate", ["x"]), ("evaluate", []), ("serve", []), ("info", [])])
def test_each_command_takes_its_precisions(command, extra):
    parser = build_parser()
    run = [] if command == "info" else ["RUN"]
    values = ("fp32", "bf16") if command == "info" else PRECISIONS
    for value in values:
        assert parser.parse_args([command, *run, *extra, "--precision", value]).precision == value
    assert parser.parse_args([command, *run, *extra]).precision == "fp32"
    if command == "info":  # its forward pass runs in fp32 or bf16 only
        with pytest.raises(SystemExit):
            parser.parse_args(["info", "--precision", "int8"])


@pytest.mark.filterwarnings("ignore:bf16 requested")  # a CPU without bf16 units: emulated, and said so
def test_the_translator_holds_the_weights_of_its_precision(run_dir):
    for precision in ("fp32", "bf16"):
        by_name = Translator.from_run_dir(run_dir, precision=precision)
        assert by_name.precision == precision
        assert by_name.model.output.weight.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
    assert load_translator(run_dir, precision="bf16").precision == "bf16"
    assert Translator.from_run_dir(run_dir).precision == "fp32"


@kernels_built
def test_int8_translates_alike_by_either_loader(run_dir, capsys):
    """``--precision int8`` prints what is not fp32's (its scores differ), and both loaders of the
    Python API give the same int8 translator."""
    sentences = [f for f, _ in generate_pairs(6, seed=3)]
    outputs = {}
    for spelling in (["--precision", "int8"], []):
        assert main(["translate", str(run_dir), "--greedy", "--json", *spelling, *sentences]) == 0
        outputs[" ".join(spelling)] = capsys.readouterr().out
    assert outputs["--precision int8"] != outputs[""]
    translators = [Translator.from_run_dir(run_dir, precision="int8"), load_translator(run_dir, precision="int8")]
    assert all(t.precision == "int8" for t in translators)
    assert len({tuple(t.translate(sentences)) for t in translators}) == 1


def test_a_precision_refused_on_the_device_is_one_error_line(run_dir, capsys):
    assert main(["translate", str(run_dir), "--precision", "fp16", "--device", "cpu", "x"]) == 2
    err = capsys.readouterr().err
    assert "fp16 is for CUDA devices, not cpu" in err and err.count("\n") == 1


def test_export_takes_the_precision_for_ctranslate2_only(run_dir, tmp_path, capsys):
    assert main(["export", str(run_dir), "--format", "onnx", str(tmp_path / "o"), "--precision", "int8"]) == 2
    assert "--precision applies to --format ctranslate2 only" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # CTranslate2's name of a precision of ours is not another spelling of it
        build_parser().parse_args(["export", str(run_dir), "--format", "ctranslate2", "out", "--precision", "float16"])
    args = build_parser().parse_args(["export", "RUN", "--format", "ctranslate2", "out", "--precision", "int8_float16"])
    assert args.precision == "int8_float16"  # a type only CTranslate2 runs
