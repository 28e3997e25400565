"""Fuzzing the files of a run directory through the real commands.

Each example takes a copy of a tiny trained run, damages one of its files (a value of another
type or size, a deleted key, NaN or infinity, deep nesting, cut bytes, bytes that are not UTF-8;
a symbolic link to /dev/zero, a FIFO or a directory in its place; a safetensors header that lies)
and runs the commands that read that file: ``translate`` (config.json, the weights, the
tokenizer, run_config.json), ``translate --resume`` (the ``.resume`` file), ``train`` resuming
(trainer_state.json, latest.json, run_config.json, metrics.jsonl, alignments.jsonl) and
``report`` (metrics.jsonl, alignments.jsonl). Each must work or end in one line with exit status
2: never a traceback, a hang or a few hundred MB more memory. The commands run in a worker process
with its address space capped and a time limit per command (``tests/run_dir_helpers.py``).

The default run tries a few dozen examples; ``pytest -m slow tests/test_run_dir_fuzz.py`` many more.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Callable, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from run_dir_helpers import Worker, build_run, check_answer, copy_run, resume_argv, translate_argv

CHECKPOINT = Path("checkpoints") / "step-00000002"
JSON_FILES = {  # file -> the commands that read it
    "config.json": ("translate",),
    "run_config.json": ("translate", "train"),
    "tokenizer.json": ("translate",),
    str(CHECKPOINT / "trainer_state.json"): ("train",),
    "checkpoints/latest.json": ("train",),
    "out.en.resume": ("resume",),
}
LINE_FILES = {"metrics.jsonl": ("train", "report"), "alignments.jsonl": ("train", "report")}
WEIGHT_FILES = {"model.safetensors": ("translate",), str(CHECKPOINT / "model.safetensors"): ("train",)}
ALL_FILES = {**JSON_FILES, **LINE_FILES, **WEIGHT_FILES}
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)

# ------------------------------------------------------------------------------------------------ values
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, -5, 1, 2**31, 2**63, 10**9, 10**12, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12))
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=6), scalars, max_size=3))
# whole-file replacements: nesting, digits, bytes that are not UTF-8, nothing
raw_files = st.one_of(
    st.integers(min_value=60, max_value=100_000).map(lambda n: b'{"a": ' + b"[" * n + b"]" * n + b"}"),
    st.integers(min_value=4_000, max_value=6_000).map(lambda n: b'{"step": 1' + b"0" * n + b"}"),
    st.binary(max_size=40),
    st.just(b"\xff\xfe{}"),
    st.just(b""),
)
kinds = st.sampled_from(["/dev/zero", "fifo", "directory", "sparse"])


def paths(value, prefix=()):
    """Every place inside a JSON value, as key/index paths (the value itself first)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:5]):
            yield from paths(v, prefix + (i,))


def put(value, path, new, delete=False):
    if not path:
        return new
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        parent.pop(path[-1]) if isinstance(parent, dict) else parent.pop(path[-1])
    else:
        parent[path[-1]] = new
    return value


# ------------------------------------------------------------------------------------------------ damage
def replace_kind(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "/dev/zero":
        os.symlink("/dev/zero", path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:  # a sparse file of 4 GiB: no disk, but reading it would take the memory
        with open(path, "wb") as f:
            f.truncate(4 << 30)


class Damage(NamedTuple):
    """What an example does to the run: ``apply(run_dir)`` damages the file ``name``."""

    name: str
    how: str
    apply: Callable[[Path], None]

    def __repr__(self) -> str:
        return f"{self.name}: {self.how}"


@st.composite
def damage(draw):
    """``(file, how, apply)``: apply(run_dir) damages that file of the run."""
    name = draw(st.sampled_from(sorted(ALL_FILES)))
    how = draw(st.sampled_from(["value", "value", "value", "raw", "cut", "kind"] if name not in WEIGHT_FILES
                               else ["header", "header", "values", "cut", "kind"]))
    if how == "kind":
        kind = draw(kinds)
        return Damage(name, f"kind {kind}", lambda run: replace_kind(run / name, kind))
    if how == "raw":
        text = draw(raw_files)
        return Damage(name, f"raw {text[:30]!r}", lambda run: (run / name).write_bytes(text))
    cut = draw(st.floats(min_value=0.0, max_value=1.0))
    if how == "cut":
        def cut_file(run):
            data = (run / name).read_bytes()
            (run / name).write_bytes(data[:int(len(data) * cut)])
        return Damage(name, f"cut at {cut:.2f}", cut_file)
    if how == "values":  # the tensors' values: NaN, infinity, huge
        special = draw(st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e38]))

        def poison(run):
            from safetensors.torch import load_file, save_file

            tensors = load_file(run / name)
            key = sorted(tensors)[int(cut * (len(tensors) - 1))]
            tensors[key].view(-1)[0] = special
            save_file({k: v.contiguous() for k, v in tensors.items()}, run / name)
        return Damage(name, f"value {special} in a tensor", poison)
    seed = draw(st.randoms(use_true_random=False))

    if how == "header":
        def lie(run):
            blob = (run / name).read_bytes()
            size = struct.unpack("<Q", blob[:8])[0]
            header = json.loads(blob[8:8 + size])
            header = _mutate_with(seed, header)
            text = json.dumps(header).encode()
            (run / name).write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + size:])
        return Damage(name, "header", lie)

    def edit(run):
        path = run / name
        if name in LINE_FILES:
            lines = path.read_text(encoding="utf-8").splitlines()
            i = seed.randrange(len(lines))
            lines[i] = json.dumps(_mutate_with(seed, json.loads(lines[i])))
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        else:
            path.write_text(json.dumps(_mutate_with(seed, json.loads(path.read_text(encoding="utf-8")))),
                            encoding="utf-8")
    return Damage(name, "value", edit)


def _mutate_with(rnd, data):
    """``data`` with one place replaced by a value drawn from ``rnd`` (or deleted)."""
    where = rnd.choice(list(paths(data))[:400])
    if where and rnd.random() < 0.2:
        return put(data, where, None, delete=True)
    return put(data, where, _value(rnd))


def _value(rnd):
    pool = [None, True, False, 0, -1, -5, 2**31, 2**63, 10**12, 10**30, -(10**30), float("nan"), float("inf"),
            -float("inf"), 1e-300, "", "x", "<pad>", "F32", "I32", [], [1, 2], [-1], [10**12, 10**12], {},
            {"type": "Sequence"}, {"a": [1, {"b": None}]}]
    return rnd.choice(pool)


# ------------------------------------------------------------------------------------------------ running
@pytest.fixture(scope="module")
def places(tmp_path_factory) -> tuple[Path, Path]:
    """``(pristine, work)``: the tiny run with an interrupted translation (its output and ``.resume``
    file, as a killed run leaves them), and where each example damages a copy of it. The copy is
    always made at the same path, so the ``.resume`` file's settings (the run's path) fit it."""
    from transformer.cli import build_parser
    from transformer.translate.cli import _settings
    from transformer.translate.stream import STATE_VERSION, FileSink, _input_identity

    root = tmp_path_factory.mktemp("fuzz")
    work = build_run(root / "work")
    (work / "in.fr").write_text("le chat dort .\nnous allons manger .\nje suis étudiant .\n", encoding="utf-8")
    args = build_parser().parse_args(resume_translation(work)[:-1])
    state = {"version": STATE_VERSION, "input": _input_identity(str(work / "in.fr")), "settings": _settings(args)}
    sink = FileSink(work / "out.en", state)
    sink.write("the cat sleeps .\n", 1, len("le chat dort .\n"))
    os.close(sink.fd)
    return copy_run(work, root / "pristine"), work


def resume_translation(run: Path) -> list[str]:
    return ["translate", str(run), "--input", str(run / "in.fr"), "--output", str(run / "out.en"), "--chunk-lines",
            "1", "--greedy", "--max-len-b", "1", "--no-progress", "--resume"]


@pytest.fixture(scope="module")
def worker(places, tmp_path_factory):
    warm = copy_run(places[0], tmp_path_factory.mktemp("warm") / "run")
    w = Worker([translate_argv(warm), resume_argv(warm), ["report", str(warm), "--output", str(warm / "r.html")]],
               cwd=warm.parent)
    yield w
    w.close()


def commands(run: Path, name: str) -> list[list[str]]:
    out = []
    for command in ALL_FILES[name]:
        if command == "translate":
            out.append(translate_argv(run))
        elif command == "train":
            out.append(resume_argv(run))
        elif command == "report":
            out.append(["report", str(run), "--output", str(run / "report.html")])
        else:
            out.append(resume_translation(run))
    return out


def check(worker: Worker, places: tuple[Path, Path], case) -> None:
    name, how, apply = case
    run = copy_run(*places)
    apply(run)
    for argv in commands(run, name):
        check_answer(worker.run(argv, timeout=120), argv, f"{name} ({how})")


@settings(max_examples=24, **{**SETTINGS, "derandomize": True})  # the default run: the same examples every time
@given(case=damage())
def test_a_damaged_run_directory_works_or_says_why(case, places, worker):
    check(worker, places, case)


@pytest.mark.slow
@settings(max_examples=600, **SETTINGS)
@given(case=damage())
def test_a_damaged_run_directory_works_or_says_why_long(case, places, worker):
    check(worker, places, case)
