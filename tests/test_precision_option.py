"""The precision a model translates in: one value (fp32, bf16, int8, fp16), its older spellings
(--int8, --bf16, bf16=True, int8=True, quantize="int8", export --quantization) and every
refusal, made in transformer/precision.py."""

import argparse

import pytest
import torch

from transformer.cli import build_parser, main
from transformer.config import preset
from transformer.errors import UserError
from transformer.corpus.builtin import generate_pairs
from transformer.cpu import ENV_SWITCH, build
from transformer.model import RNNSeq2Seq, Transformer
from transformer.model.rnn_config import RNNConfig
from transformer.precision import (
    PRECISIONS, add_precision_option, check_precision, precision_from, precision_option, resolve_device,
)
from transformer import save_model
from transformer.text import Vocabularies
from transformer.translate.translator import Translator, decoding_device, load_translator

kernels_built = pytest.mark.skipif(not build.available(), reason="the CPU kernels are unavailable (no C compiler)")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny untrained Transformer with its tokenizer: enough to compare outputs."""
    directory = tmp_path_factory.mktemp("run")
    pairs = generate_pairs(200, seed=1)
    vocab = Vocabularies.train(pairs, vocab_size=400)
    torch.manual_seed(0)
    save_model(Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size)), directory)
    vocab.save(directory)
    return directory


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
    ("int8", "cpu", {"model": "rnn", "name": "quantize='int8'"}, "quantize='int8' is for Transformer models"),
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


def test_spellings_make_one_value_and_two_that_disagree_are_refused():
    assert precision_from({}) == "fp32"
    assert precision_from({"--precision None": None, "--int8": None}) == "fp32"
    assert precision_from({"--precision int8": "int8", "--int8": "int8"}) == "int8"  # the same value twice
    with pytest.raises(UserError, match=r"^int8 quantisation is for fp32 CPU inference: give --int8 or --bf16, "
                                         r"not both$"):
        precision_from({"--int8": "int8", "--bf16": "bf16"})
    with pytest.raises(UserError, match=r"^give one precision: --precision fp32 and --int8 disagree$"):
        precision_from({"--precision fp32": "fp32", "--int8": "int8"})


def test_the_device_follows_the_precision(monkeypatch):
    for present in (True, False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
        assert resolve_device("auto").type == ("cuda" if present else "cpu")
        assert resolve_device("auto", precision="int8").type == "cpu"  # int8 is a CPU format
        assert decoding_device("auto", int8=True) == resolve_device("auto", precision="int8")  # the older name
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
def test_older_flags_give_the_value_of_precision(command, extra):
    parser = build_parser()
    run = [] if command == "info" else ["RUN"]
    values = ("fp32", "bf16") if command == "info" else PRECISIONS
    for value in values:
        assert precision_option(parser.parse_args([command, *run, *extra, "--precision", value])) == value
    assert precision_option(parser.parse_args([command, *run, *extra])) == "fp32"
    for flag in ("bf16", "int8"):
        if flag in values:
            args = parser.parse_args([command, *run, *extra, f"--{flag}"])
            assert precision_option(args) == flag
    if command == "info":  # its forward pass runs in fp32 or bf16 only
        with pytest.raises(SystemExit):
            parser.parse_args(["info", "--precision", "int8"])


def test_the_help_says_an_older_flag_is_precision():
    parser = argparse.ArgumentParser()
    add_precision_option(parser)
    text = " ".join(parser.format_help().split())
    assert "--int8 the same as --precision int8" in text and "--bf16 the same as --precision bf16" in text


@pytest.mark.filterwarnings("ignore:bf16 requested")  # a CPU without bf16 units: emulated, and said so
def test_the_python_spellings_give_the_same_translator(run_dir):
    for precision in ("fp32", "bf16"):
        by_name = Translator.from_run_dir(run_dir, precision=precision)
        assert by_name.precision == precision
        assert by_name.model.output.weight.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
    assert Translator.from_run_dir(run_dir, bf16=True).precision == "bf16"
    assert load_translator(run_dir, bf16=True).precision == "bf16"
    with pytest.raises(UserError, match="give precision='fp32' or bf16=True|disagree"):
        Translator.from_run_dir(run_dir, precision="fp32", bf16=True)
    with pytest.raises(UserError, match=r"^int8 quantisation is for fp32 CPU inference: give int8=True or "
                                         r"bf16=True, not both$"):
        load_translator(run_dir, int8=True, bf16=True)


@kernels_built
def test_int8_by_either_name_translates_alike(run_dir, capsys):
    """``--precision int8`` and ``--int8`` print the same bytes; so do ``precision="int8"``,
    ``quantize="int8"`` and ``int8=True`` in Python, and they are not fp32's."""
    sentences = [f for f, _ in generate_pairs(6, seed=3)]
    outputs = {}
    for spelling in (["--precision", "int8"], ["--int8"], []):
        assert main(["translate", str(run_dir), "--greedy", "--json", *spelling, *sentences]) == 0
        outputs[" ".join(spelling)] = capsys.readouterr().out
    assert outputs["--precision int8"] == outputs["--int8"] != outputs[""]
    translators = [Translator.from_run_dir(run_dir, precision="int8"),
                   Translator.from_run_dir(run_dir, quantize="int8"), load_translator(run_dir, int8=True)]
    assert all(t.precision == "int8" and t.quantize == "int8" for t in translators)
    assert len({tuple(t.translate(sentences)) for t in translators}) == 1


def test_disagreeing_options_are_one_error_line(run_dir, capsys):
    assert main(["translate", str(run_dir), "--precision", "fp32", "--int8", "x"]) == 2
    err = capsys.readouterr().err
    assert "give one precision: --precision fp32 and --int8 disagree" in err and err.count("\n") == 1
    assert main(["translate", str(run_dir), "--precision", "bf16", "--int8", "x"]) == 2
    assert "int8 quantisation is for fp32 CPU inference: give --precision bf16 or --int8, not both" in \
        capsys.readouterr().err
    assert main(["translate", str(run_dir), "--precision", "fp16", "--device", "cpu", "x"]) == 2
    assert "fp16 is for CUDA devices, not cpu" in capsys.readouterr().err
    assert main(["info", "--preset", "tiny", "--vocab", "50", "--precision", "fp32", "--bf16"]) == 2
    assert "give one precision" in capsys.readouterr().err


def test_export_takes_the_precision_for_ctranslate2_only(run_dir, tmp_path, capsys):
    assert main(["export", str(run_dir), "--format", "onnx", str(tmp_path / "o"), "--precision", "int8"]) == 2
    assert "--precision applies to --format ctranslate2 only" in capsys.readouterr().err
    out = str(tmp_path / "c")
    assert main(["export", str(run_dir), "--format", "ctranslate2", out, "--precision", "fp16", "--quantization",
                 "int8"]) == 2
    assert "give one weight type: precision fp16 and quantization int8 disagree" in capsys.readouterr().err
