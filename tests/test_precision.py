"""``train.precision=auto``: bf16 only where the device multiplies bf16 matrices in hardware."""

import io

import pytest
import torch

from transformer.cpu import training_precision
from transformer.cpu.training_precision import fast_bf16, resolve_precision, slow_bf16_warning
from transformer.errors import UserError
from transformer.run.config import RunConfig
from transformer.training.trainer import Trainer
from transformer.translate.translator import Translator

TINY = ["data.builtin_train=300", "data.builtin_valid=20", "data.builtin_test=20", "data.vocab_size=400",
        "data.max_tokens=600", "model.preset=tiny", "train.threads=1", "train.max_steps=2", "train.eval_sentences=0"]


@pytest.fixture(params=[True, False], ids=["bf16-units", "no-bf16-units"])
def cpu_units(request, monkeypatch):
    """Pretend the CPU has (or lacks) bf16 matrix units."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: request.param)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    return request.param


def test_auto_picks_bf16_only_on_cpus_with_bf16_units(cpu_units):
    assert fast_bf16("cpu") is cpu_units
    assert resolve_precision("auto", "cpu") == ("bf16" if cpu_units else "fp32")
    for explicit in ("fp32", "bf16", "fp16"):
        assert resolve_precision(explicit, "cpu") == explicit  # an explicit choice is kept
    assert (slow_bf16_warning("cpu") is None) is cpu_units


def test_amx_alone_counts_as_bf16_units(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert training_precision.cpu_bf16_units() and resolve_precision("auto", torch.device("cpu")) == "bf16"


def test_this_machine_is_reported_as_torch_reports_it():
    expected = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert training_precision.cpu_bf16_units() == expected


def test_unknown_precision_is_refused():
    with pytest.raises(UserError, match="precision must be one of"):
        resolve_precision("fp8", "cpu")
    with pytest.raises(UserError, match="train.precision must be one of"):
        RunConfig().with_overrides(["precision=fp8"])


def test_default_is_auto():
    assert RunConfig().train.precision == "auto"


def test_trainer_resolves_auto_and_says_so(cpu_units, tmp_path):
    out = io.StringIO()
    trainer = Trainer(RunConfig().with_overrides(TINY), tmp_path / "run", stream=out)
    assert trainer.precision == ("bf16" if cpu_units else "fp32")
    if not cpu_units:  # train only where it is cheap: fp32 (the emulated bf16 step is the slow one)
        trainer.train()
        assert "device cpu, fp32 (auto)" in out.getvalue()
        assert "warning" not in out.getvalue()


def test_trainer_warns_when_bf16_is_asked_for_without_units(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    out = io.StringIO()
    trainer = Trainer(RunConfig().with_overrides(TINY + ["train.precision=bf16", "train.max_steps=1"]),
                      tmp_path / "run", stream=out)
    assert trainer.precision == "bf16"  # honoured, with a warning
    trainer.train()
    assert "device cpu, bf16, " in out.getvalue()
    assert "warning: bf16 requested but this CPU has no bf16 matrix units" in out.getvalue()


def test_bf16_translator_warns_without_units(monkeypatch, tmp_path):
    trainer = Trainer(RunConfig().with_overrides(TINY + ["train.precision=fp32", "train.max_steps=1"]),
                      tmp_path / "run", stream=io.StringIO())
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    with pytest.warns(UserWarning, match="no bf16 matrix units"):
        Translator(trainer.model, trainer.vocab, precision="bf16")
