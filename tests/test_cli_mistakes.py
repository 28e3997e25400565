"""User mistakes around translate and evaluate end in one line and exit 2, and nothing is lost
(issue 27: output paths, empty inputs, the decoding named in evaluate's summary)."""

from __future__ import annotations

import pytest

from transformer.cli import main


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run()


@pytest.fixture
def files(tmp_path):
    (tmp_path / "in.txt").write_text("le chat dort.\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "existing.txt").write_text("keep me\n", encoding="utf-8")
    (tmp_path / "dir").mkdir()
    return tmp_path


CASES = [
    (["translate", "{run}", "--input", "{t}/in.txt", "--output", "{t}/dir"], "is a directory"),
    (["translate", "{run}", "--input", "{t}/in.txt", "--output", "{t}/in.txt"], "is the --input file"),
    (["translate", "{run}", "--input", "{t}/in.txt", "--output", "{t}/existing.txt"], "--overwrite"),
    (["evaluate", "{run}", "--src", "{t}/empty.txt", "--ref", "{t}/empty.txt"], "is empty"),
    (["evaluate", "{run}", "--src", "{t}/in.txt", "--ref", "{t}/in.txt", "--output", "{t}/in.txt"], "is the --src file"),
    (["evaluate", "{run}", "--src", "{t}/in.txt", "--ref", "{t}/in.txt", "--output", "{t}/existing.txt"],
     "--overwrite"),
]


@pytest.mark.parametrize("argv, message", CASES, ids=[" ".join(a[:1] + a[-2:]) + f" ({m})" for a, m in CASES])
def test_a_mistake_is_one_line_and_exit_2(argv, message, run_dir, files, capsys):
    argv = [a.format(run=run_dir, t=files) for a in argv] + ["--greedy"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert (files / "existing.txt").read_text(encoding="utf-8") == "keep me\n"  # nothing written over
    assert (files / "in.txt").read_text(encoding="utf-8") == "le chat dort.\n"


def test_an_empty_input_gives_an_empty_output(run_dir, files, capsys):
    assert main(["translate", str(run_dir), "--input", str(files / "empty.txt"), "--output", str(files / "out.txt"),
                 "--greedy"]) == 0
    assert (files / "out.txt").read_bytes() == b""  # zero lines in, zero lines out


def test_evaluate_names_the_decoding_it_used(run_dir, files, capsys):
    assert main(["evaluate", str(run_dir), "--src", str(files / "in.txt"), "--ref", str(files / "in.txt"),
                 "--greedy", "--output", str(files / "hyp.txt")]) == 0
    out = capsys.readouterr().out
    assert "(greedy)" in out and "beam" not in out
    assert len((files / "hyp.txt").read_text(encoding="utf-8").splitlines()) == 1
    assert main(["evaluate", str(run_dir), "--src", str(files / "in.txt"), "--ref", str(files / "in.txt"),
                 "--beam", "3"]) == 0
    assert "(beam 3)" in capsys.readouterr().out


def test_serve_without_its_extra_names_the_whole_install_line(run_dir, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # the serve extra not installed
    assert main(["serve", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert 'pip install -c constraints.txt -e ".[serve]"' in err, err
