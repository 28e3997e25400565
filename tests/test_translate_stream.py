"""``transformer translate --input FILE --output FILE`` on large files: chunks, progress, --resume.

The output is written a chunk at a time, each chunk synced and recorded in ``OUTPUT.resume``; a
run killed mid-way leaves complete lines, and ``--resume`` ends with the very bytes an
uninterrupted run writes. The model is the random tiny one of the ``tiny_run`` fixture.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import run_cli

from transformer.cli import main
from transformer.corpus.builtin import generate_pairs
from transformer.translate import cli as translate_cli

FAST = ["--greedy", "--max-len-b", "1", "--no-progress"]
LINES = 2000


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run()


@pytest.fixture(scope="module")
def big_input(tmp_path_factory) -> Path:
    """A few thousand short lines: one or two sentences, blank lines, a CRLF line now and then."""
    words = [f.split()[:4] for f, _ in generate_pairs(300, seed=11)]
    lines = []
    for i in range(LINES):
        w = words[i % len(words)]
        if i % 17 == 5:
            lines.append("")
        elif i % 5 == 0:
            lines.append(f"{' '.join(w[:2]).capitalize()}. {' '.join(w[2:]).capitalize()}.")
        else:
            lines.append(" ".join(w) + (".\r" if i % 23 == 0 else "."))
    path = tmp_path_factory.mktemp("stream-input") / "big.fr"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def reference(run_dir, big_input, tmp_path_factory) -> bytes:
    """The uninterrupted run's output, in chunks of 100 lines."""
    out = tmp_path_factory.mktemp("stream-ref") / "ref.en"
    assert main(["translate", str(run_dir), "--input", str(big_input), "--output", str(out), "--chunk-lines", "100",
                 *FAST]) == 0
    return out.read_bytes()


def command(run_dir, *args) -> list[str]:
    return [sys.executable, "-m", "transformer.cli", "translate", str(run_dir), *map(str, args)]


def lines_done(output: Path) -> int:
    state = output.with_name(output.name + ".resume")
    try:
        return json.loads(state.read_text())["lines"]
    except (OSError, ValueError, KeyError):
        return 0


def start_and_stop(run_dir, big_input, output, how: signal.Signals, *extra) -> subprocess.CompletedProcess:
    """Start translating in a subprocess, and stop it with ``how`` once a few chunks are written."""
    process = subprocess.Popen(command(run_dir, "--input", big_input, "--output", output, "--chunk-lines", 100,
                                       *FAST, *extra),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = lines_done(output)
    deadline = time.monotonic() + 300
    while lines_done(output) < start + 300 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(how)
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_killed_and_resumed_gives_the_uninterrupted_output_byte_for_byte(run_dir, big_input, reference, tmp_path):
    output = tmp_path / "out.en"
    killed = start_and_stop(run_dir, big_input, output, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # stopped mid-way, not finished
    left = output.read_bytes()
    done = lines_done(output)
    assert 300 <= done < LINES
    # the state names complete lines; a chunk written after its last update (the kill can fall
    # between the two) is a prefix of what follows, and --resume cuts it off
    kept = json.loads(output.with_name(output.name + ".resume").read_text())["output_bytes"]
    assert left[:kept].endswith(b"\n") and left[:kept].count(b"\n") == done
    assert reference.startswith(left)
    # Stopped again, with SIGTERM (as Ctrl-C): the run cuts off what it had half written and says so.
    stopped = start_and_stop(run_dir, big_input, output, signal.SIGTERM, "--resume")
    assert stopped.returncode == 130, stopped.stderr
    assert "--resume continues from the next line" in stopped.stderr and "Traceback" not in stopped.stderr
    left = output.read_bytes()
    assert lines_done(output) >= done + 300 and left.count(b"\n") == lines_done(output)
    assert reference.startswith(left)
    # the rest in this process (tests/cli_helpers.py)
    finished = run_cli("translate", run_dir, "--input", big_input, "--output", output, "--chunk-lines", 100, "--resume",
                       *FAST)
    assert finished.returncode == 0, finished.stderr
    assert output.read_bytes() == reference
    assert not output.with_name("out.en.resume").exists()


def interrupt_after(monkeypatch, chunks: int) -> None:
    """Ctrl-C while translating chunk ``chunks + 1``."""
    calls = []
    translate_chunk = translate_cli._translate_chunk

    def counting(*args):
        calls.append(1)
        if len(calls) > chunks:
            raise KeyboardInterrupt
        return translate_chunk(*args)

    monkeypatch.setattr(translate_cli, "_translate_chunk", counting)


@pytest.fixture
def interrupted(run_dir, tmp_path, monkeypatch, capsys):
    """A small input and the output of a run stopped after its first chunk."""
    source = tmp_path / "in.fr"
    source.write_text("".join(f"{f}.\n" for f, _ in generate_pairs(12, seed=5)), encoding="utf-8")
    output = tmp_path / "out.en"
    interrupt_after(monkeypatch, 1)
    assert main(["translate", str(run_dir), "--input", str(source), "--output", str(output), "--chunk-lines", "4",
                 *FAST]) == 130
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert f"{output} holds the translations of the first 4 lines, all complete" in err
    return source, output


def resume(run_dir, source, output, *extra) -> int:
    return main(["translate", str(run_dir), "--input", str(source), "--output", str(output), "--chunk-lines", "4",
                 "--resume", *FAST, *extra])


@pytest.mark.parametrize("change, message", [
    ("input", "is not the input"),
    ("mtime", "its mtime_ns changed"),
    ("settings", "other settings than the interrupted run (beam: 4 then, 3 now)"),
    ("output", "no longer starts with the 4 lines"),
    ("state", "nothing to resume"),
    ("offset", "its checksum does not match"),
])
def test_resume_refuses_what_does_not_continue_the_run(run_dir, interrupted, capsys, change, message):
    source, output = interrupted
    extra = []
    if change == "input":
        source.write_text(source.read_text().replace("a", "b"), encoding="utf-8")
    elif change == "mtime":
        os.utime(source, ns=(time.time_ns(), time.time_ns() + 10**9))
    elif change == "settings":
        extra = ["--beam", "3"]
    elif change == "output":
        output.write_text("something else\n" * 4)
    elif change == "offset":  # resuming at another line would give wrong output without a word
        state = output.with_name(output.name + ".resume")
        state.write_text(json.dumps({**json.loads(state.read_text()), "input_offset": 3}))
    else:
        output.with_name(output.name + ".resume").unlink()
    before = output.read_bytes()
    assert resume(run_dir, source, output, *extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert output.read_bytes() == before  # a refused resume touches nothing


def test_a_torn_chunk_is_cut_off_on_resume(run_dir, interrupted):
    """What a kill inside a write leaves after the last recorded chunk goes before resuming."""
    source, output = interrupted
    whole = output.with_name("whole.en")
    assert main(["translate", str(run_dir), "--input", str(source), "--output", str(whole), *FAST]) == 0
    with open(output, "ab") as f:
        f.write("half a li".encode())
    assert resume(run_dir, source, output) == 0
    assert output.read_bytes() == whole.read_bytes()


def test_resume_and_overwrite(run_dir, interrupted, capsys):
    source, output = interrupted
    assert resume(run_dir, source, output) == 0
    resumed = output.read_bytes()
    assert resumed.count(b"\n") == 12 and not output.with_name("out.en.resume").exists()
    assert main(["translate", str(run_dir), "--input", str(source), "--output", str(output), "--overwrite",
                 *FAST]) == 0
    assert output.read_bytes() == resumed  # one chunk of 12 lines: the same bytes as three of 4
    fresh = output.with_name("fresh.en")
    assert resume(run_dir, source, fresh) == 0 and fresh.read_bytes() == resumed  # nothing to resume: starts


def test_chunks_and_gzip_input_change_nothing(run_dir, big_input, reference, tmp_path, capsys):
    import gzip

    text = big_input.read_bytes()[:1500]
    text = text[: text.rfind(b"\n") + 1]
    small, packed = tmp_path / "small.fr", tmp_path / "small.fr.gz"
    small.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    outputs = []
    for source, chunk in ((small, 7), (small, 100000), (packed, 13)):
        capsys.readouterr()
        assert main(["translate", str(run_dir), "--input", str(source), "--chunk-lines", str(chunk), *FAST]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] == outputs[2]
    assert reference.startswith(outputs[0].encode())


def test_progress_lines_when_standard_error_is_not_a_terminal(run_dir, big_input, tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.fr"
    source.write_bytes(b"".join(big_input.read_bytes().splitlines(keepends=True)[:40]))
    monkeypatch.setattr(translate_cli, "PROGRESS_EVERY", 0.0)
    assert main(["translate", str(run_dir), "--input", str(source), "--output", str(tmp_path / "out"),
                 "--chunk-lines", "20", "--greedy", "--max-len-b", "1"]) == 0
    err = capsys.readouterr().err
    assert "progress: 20/40 lines (50.0%), " in err and "sentences/s, ETA 0:" in err
    assert "progress: 40/40 lines (100.0%)" in err and "translated 40 lines (" in err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal():
    stream = Terminal()
    progress = translate_cli.Progress(100, 10, enabled=True, stream=stream)
    progress.update(40, 60)
    progress.close()
    shown = stream.getvalue()
    assert "50/100" in shown and "line" in shown and "sentences/s" in shown
    quiet = Terminal()
    translate_cli.Progress(100, 0, enabled=False, stream=quiet).update(40, 60)
    assert quiet.getvalue() == ""


def test_standard_input_streams_chunk_by_chunk(run_dir):
    """Lines piped in come out a chunk at a time, before the input ends: nothing waits for the whole file."""
    process = subprocess.Popen(command(run_dir, "--chunk-lines", 2, *FAST), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    try:
        process.stdin.write("je suis étudiant.\n\n")
        process.stdin.flush()
        first = process.stdout.readline()  # arrives while standard input is still open
        assert first.strip() and process.stdout.readline() == "\n"
        process.stdin.write("nous mangeons.\n")
        process.stdin.close()
        assert process.stdout.read().count("\n") == 1
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
