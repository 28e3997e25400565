"""A crafted or damaged run directory ends in one line naming the problem (exit status 2), never
a traceback, a hang or gigabytes of memory: sizes a config.json implies are checked against the
weights file's header before anything is allocated, a run's files are read only when they are
regular files under a size cap, and weights of the wrong dtype or holding NaN are refused.

The commands run in a worker process under a memory cap and a time limit
(``tests/run_dir_helpers.py``), so a regression fails here instead of taking the machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from run_dir_helpers import Worker, build_run, check_answer, copy_run, resume_argv, translate_argv

from transformer.config import preset
from transformer.model import build_model
from transformer.run.model import CheckpointError, load_model
from transformer.training.state import load_checkpoint


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return build_run(tmp_path_factory.mktemp("hostile") / "run")


@pytest.fixture(scope="module")
def worker(run_dir, tmp_path_factory):
    warm = copy_run(run_dir, tmp_path_factory.mktemp("warm") / "run")
    w = Worker([translate_argv(warm), resume_argv(warm)], cwd=warm.parent)
    yield w
    w.close()


def edit_json(name: str, **changes):
    def edit(run: Path) -> None:
        data = json.loads((run / name).read_text())
        data.update(changes)
        (run / name).write_text(json.dumps(data))
    return edit


def edit_state(**changes):
    def edit(run: Path) -> None:
        path = run / "checkpoints" / "step-00000002" / "trainer_state.json"
        data = json.loads(path.read_text())
        data["trainer"].update(changes)
        path.write_text(json.dumps(data))
    return edit


def link_to(name: str, target: str):
    def edit(run: Path) -> None:
        (run / name).unlink()
        os.symlink(target, run / name)
    return edit


def fifo(name: str):
    def edit(run: Path) -> None:
        (run / name).unlink()
        os.mkfifo(run / name)
    return edit


def raw(name: str, text: str):
    def edit(run: Path) -> None:
        (run / name).write_text(text)
    return edit


def weights(change):
    def edit(run: Path) -> None:
        path = run / "model.safetensors"
        save_file({k: change(v) for k, v in load_file(path).items()}, path)
    return edit


TRANSLATE, RESUME, INIT_FROM = "translate", "resume", "init-from"
DEEP = '{"data": ' + "[" * 100_000 + "]" * 100_000 + "}"
# (what is changed, the command, a word of the one-line error; None: the command works)
CASES = {
    "config n_encoder_layers=1000000": (edit_json("config.json", n_encoder_layers=1_000_000), TRANSLATE,
                                        "more than the 1024 layers"),
    "config d_model=10**9": (edit_json("config.json", d_model=10**9), TRANSLATE, "config.json"),
    "config d_ff=10**12": (edit_json("config.json", d_ff=10**12), TRANSLATE, "but the config needs"),
    "config vocabulary 10**12": (edit_json("config.json", src_vocab_size=10**12, tgt_vocab_size=10**12), TRANSLATE,
                                 "but the config needs"),
    "config n_decoder_layers=1000000, --init-from": (edit_json("config.json", n_decoder_layers=1_000_000), INIT_FROM,
                                                     "more than the 1024 layers"),
    "config d_ff=10**12, --init-from": (edit_json("config.json", d_ff=10**12), INIT_FROM, "but the config needs"),
    "run_config.json -> /dev/zero": (link_to("run_config.json", "/dev/zero"), TRANSLATE, "not a regular file"),
    "run_config.json a FIFO": (fifo("run_config.json"), TRANSLATE, "not a regular file"),
    "run_config.json -> /dev/zero, resume": (link_to("run_config.json", "/dev/zero"), RESUME, "not a regular file"),
    "run_config.json a FIFO, --init-from": (fifo("run_config.json"), INIT_FROM, None),
    "tokenizer decoder [1, 2]": (edit_json("tokenizer.json", decoder=[1, 2]), TRANSLATE, "tokenizer"),
    'run_config "data": "x"': (raw("run_config.json", '{"data": "x"}'), TRANSLATE, None),
    "run_config 100,000 deep": (raw("run_config.json", DEEP), TRANSLATE, None),
    "run_config 100,000 deep, resume": (raw("run_config.json", DEEP), RESUME, "nested too deeply"),
    'trainer_state "step": "abc"': (edit_state(step="abc"), RESUME, "step must be an integer >= 0"),
    "trainer_state step -5": (edit_state(step=-5), RESUME, "step must be an integer >= 0"),
    "trainer_state seconds NaN": (edit_state(seconds=float("nan")), RESUME, "seconds must be a finite number"),
    "weights stored as I32": (weights(lambda t: t.to(torch.int32)), TRANSLATE, "is stored as I32"),
    "weights all NaN": (weights(lambda t: torch.full_like(t, float("nan"))), TRANSLATE, "holds NaN or infinite"),
    "weights all NaN, --init-from": (weights(lambda t: torch.full_like(t, float("nan"))), INIT_FROM,
                                     "holds NaN or infinite"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_run_directory_gets_one_line(case, run_dir, worker, tmp_path):
    edit, command, message = CASES[case]
    run = copy_run(run_dir, tmp_path / "run")
    edit(run)
    if command == TRANSLATE:
        argv = translate_argv(run)
    elif command == RESUME:
        argv = resume_argv(run)
    else:  # a fine-tuning run from the crafted one, into a new directory (one step if it loads)
        argv = ["train", "--run-dir", str(tmp_path / "tuned"), "--init-from", str(run), "--quiet",
                *[a for a in resume_argv(run)[4:] if not a.startswith("model.")], "train.max_steps=1"]
    answer = worker.run(argv)
    check_answer(answer, argv, case)
    if message is None:
        assert answer["rc"] == 0, answer["err"]
    else:
        last = answer["err"].strip().splitlines()[-1]
        assert answer["rc"] == 2 and message in last, answer["err"]


def test_import_hf_checks_sizes_before_building(tmp_path, worker):
    """A Hugging Face config.json asking for a million layers or d_model=2**20 is refused before
    the model is built (it was allocated, then compared with the weights)."""
    from interop_helpers import write_marian_model

    source = tmp_path / "marian"
    write_marian_model(source, steps=0)
    config = json.loads((source / "config.json").read_text())
    for change, message in (({"encoder_layers": 1_000_000}, "more than the 1024 layers"),
                            ({"d_model": 2**20}, "weights do not fit config.json")):
        (source / "config.json").write_text(json.dumps({**config, **change}))
        argv = ["import-hf", str(source), str(tmp_path / f"out-{len(message)}")]
        answer = worker.run(argv)
        check_answer(answer, argv, str(change))
        assert answer["rc"] == 2 and message in answer["err"], answer["err"]


def test_loading_names_the_non_finite_tensor(tmp_path):
    model = build_model(preset("tiny", src_vocab_size=40))
    from transformer.run.model import save_model

    save_model(model, tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["decoder.layers.1.ffn.linear2.bias"][3] = float("inf")
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"'decoder\.layers\.1\.ffn\.linear2\.bias' holds NaN or infinite"):
        load_model(tmp_path)


@pytest.mark.parametrize("change, message", [({"step": -5}, "step must be an integer >= 0"),
                                             ({"step": "abc"}, "step must be an integer >= 0"),
                                             ({"best_step": 2.5}, "best_step"),
                                             ({"target_tokens": True}, "target_tokens")])
def test_trainer_state_is_checked(run_dir, tmp_path, change, message):
    run = copy_run(run_dir, tmp_path / "run")
    edit_state(**change)(run)
    model = load_model(run)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(run / "checkpoints" / "step-00000002", model=model, restore_rng=False)


@pytest.mark.parametrize("dtype", [["F32"], {"F32": 1}, 32, None])
def test_a_header_entry_whose_dtype_is_not_a_name_is_refused(tmp_path, dtype):
    """A dtype that is a list or a mapping (found by the fuzz test) is a one-line error, not a TypeError."""
    from transformer.run_files import RunFileError, read_safetensors_header

    path = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(2, 3)}, str(path))
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header["w"]["dtype"] = dtype
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size :])
    with pytest.raises(RunFileError, match="unknown dtype"):
        read_safetensors_header(path)
