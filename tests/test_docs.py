"""The documentation site builds strictly, and every command it shows works.

* The Sphinx build with warnings as errors (``-W``: broken links, missing references, malformed
  docstrings), into a temporary directory: with Sphinx's plain theme by default, with the site's
  theme (furo) under ``-m slow``. Skipped only where Sphinx is not installed and CI is not set;
  under ``CI=true`` a missing Sphinx fails.
* Every shell command shown in ``README.md`` and ``docs/*.md`` (a line of a ``bash``/``sh``
  code block starting with ``transformer ``, ``python benchmarks/...`` or ``torchrun ... -m
  transformer.cli``) is parsed by the command's own argparse parser; ``train`` overrides are
  read by ``RunConfig``. The cheap ones (``translate``, ``attend``, ``info``, ``data list`` on
  ``runs/demo``, and ``tm`` on a small ``memory.db``) are run in a scratch directory whose
  ``runs/demo`` is a run ``transformer demo`` made (once per session, in conftest.py).
* Where a page shows what an example prints, the output is checked: in a ``console`` block the
  lines after a ``$ transformer ...`` line are that command's standard output; in a Python block
  ``EXPRESSION  # -> VALUE`` means ``EXPRESSION == VALUE``.
* Python blocks compile; those that use ``runs/demo`` or the model API are run there too.
  YAML run configurations are read by ``RunConfig``.
* Every configuration key of the generated reference has a default, a meaning and, for numbers,
  a range.

The default run makes ``runs/demo`` a 40-step demo (``short_demo_run``, seconds): every command and
block runs on it, and what a page shows it prints is checked for its shape (a console block's number
of lines; a quoted translation is a string, a list of them as long; other values exactly). The
figures themselves come from the model the demo trains in its 900 steps (``demo_run``, minutes): the
same checks on it, exactly, are marked ``slow`` (``pytest -m slow tests/test_docs.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}
RUN_DIR = "runs/demo"
EXECUTED = {"translate", "attend", "info", "data list", "tm"}  # run on the demo model when they name RUN_DIR or none
TM_SUBCOMMANDS = ("import", "export", "list", "stats", "review")  # tm's, each run (on the sandbox's memory.db)
ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

sys.path.insert(0, str(DOCS / "_ext"))


# ---------------------------------------------------------------------------------------------
# Code blocks and commands
def code_blocks(path: Path) -> list[tuple[str, str, int]]:
    """``(language, text, line)`` of each fenced code block of a Markdown file."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if match and not lines[i].strip().startswith("```{"):
            fence, language, start = match.group(2), match.group(3), i + 1
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                i += 1
            blocks.append((language, "\n".join(lines[start:i]), start + 1))
        i += 1
    return blocks


def shell_commands(path: Path) -> list[tuple[list[str], str]]:
    """``(argv, where)`` of each documented command: ``["transformer", ...]`` or ``["python", "benchmarks/x.py", ...]``."""
    found = []
    for language, text, line in code_blocks(path):
        if language not in SHELL:
            continue
        for command in re.sub(r"\\\n\s*", " ", text).splitlines():
            command = command.strip().removeprefix("$ ")
            for part in re.split(r"\s*&&\s*", command):
                argv = shlex.split(part, comments=True)
                if "-m" in argv and "transformer.cli" in argv:  # torchrun ... -m transformer.cli train ...
                    argv = ["transformer", *argv[argv.index("transformer.cli") + 1:]]
                if argv[:1] == ["transformer"] or (argv[:1] == ["python"] and argv[1:2]
                                                   and argv[1].startswith("benchmarks/")):
                    found.append((argv, f"{path.relative_to(ROOT)}:{line}: {part}"))
    return found


ALL_COMMANDS = [c for page in PAGES for c in shell_commands(page)]


def parse_transformer(argv: list[str]) -> argparse.Namespace:
    """Parse as ``transformer.cli.main`` does (late positionals after options included); raise on error."""
    from transformer.cli import build_parser

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    late = next((name for name in ("sentences", "overrides") if hasattr(args, name)), None)
    if extra and late and not any(e.startswith("-") and e != "-" for e in extra):
        setattr(args, late, list(getattr(args, late)) + extra)
    elif extra:
        raise AssertionError(f"unrecognized arguments: {extra}")
    assert getattr(args, "handler", None) is not None, "no subcommand"
    return args


class _Parsed(Exception):
    pass


def parse_benchmark(script: Path, argv: list[str]) -> None:
    """Run the benchmark's ``main()`` up to its ``parse_args`` and stop there (nothing is measured)."""
    spec = importlib.util.spec_from_file_location(f"_doc_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(script.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(script.parent))
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        raise _Parsed(original(self, argv, namespace))

    argparse.ArgumentParser.parse_args = parse_args
    try:
        module.main()
    except _Parsed:
        return
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError(f"{script.name}: main() never parsed its arguments")


@pytest.mark.parametrize("argv, where", ALL_COMMANDS, ids=[w.split(": ", 1)[0] for _, w in ALL_COMMANDS])
def test_documented_command_parses(argv, where):
    if argv[0] == "python":
        script = ROOT / argv[1]
        assert script.is_file(), f"{where}: no such script"
        try:
            parse_benchmark(script, argv[2:])
        except SystemExit as exit_:
            raise AssertionError(f"{where}: the script's parser refused it (exit {exit_.code})") from None
        return
    try:
        args = parse_transformer(argv[1:])
    except SystemExit as exit_:
        raise AssertionError(f"{where}: transformer's parser refused it (exit {exit_.code})") from None
    if args.command == "train" and not args.config:
        from transformer.run.config import RunConfig

        shortcuts = [f"data.{key}={value}" for key, value in (("corpus", args.corpus), ("src_lang", args.src_lang),
                                                              ("tgt_lang", args.tgt_lang), ("data_dir", args.data_dir))
                     if value is not None]
        RunConfig().with_overrides(shortcuts + list(args.overrides))  # unknown keys, bad values raise


def test_the_docs_show_commands_of_every_kind():
    commands = {" ".join(argv[:2]) for argv, _ in ALL_COMMANDS}
    for expected in ("transformer demo", "transformer train", "transformer translate", "transformer serve",
                     "transformer attend", "transformer export", "transformer import-hf"):
        assert expected in commands, f"no documented {expected!r} command"
    assert any(argv[0] == "python" for argv, _ in ALL_COMMANDS)


# ---------------------------------------------------------------------------------------------
# Commands and Python blocks run on the demo model, and the outputs the pages show
class Sandbox(NamedTuple):
    root: Path
    trained: bool  # runs/demo is the demo's 900-step model (its outputs are the pages'), not the 40-step one


@pytest.fixture(scope="module", params=["short", pytest.param("trained", marks=pytest.mark.slow)])
def sandbox(request, tmp_path_factory):
    """A scratch directory holding ``runs/demo`` (a demo run, as ``transformer demo`` leaves it: the
    40-step one, or under ``-m slow`` the 900-step one), ``text.fr`` and ``mixed.txt`` (French and
    English lines)."""
    trained = request.param == "trained"
    run_dir = request.getfixturevalue("demo_run" if trained else "short_demo_run")[0]
    root = tmp_path_factory.mktemp("docs-sandbox")
    shutil.copytree(run_dir, root / RUN_DIR, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    (root / "text.fr").write_text("Je suis étudiant. Le chat dort.\n\nNous allons manger.\n", encoding="utf-8")
    (root / "mixed.txt").write_text("Je suis étudiant.\nThe cat sleeps.\nLe chat dort.\n", encoding="utf-8")
    # A translation memory (entries 1 and 2, pending) and the files the memory page imports.
    (root / "pairs.tsv").write_text("Je suis étudiant.\tI am a student.\nLe chat dort.\tThe cat is sleeping.\n",
                                    encoding="utf-8")
    (root / "legacy.tmx").write_text(
        '<tmx version="1.4"><header srclang="fr-FR"/><body><tu><tuv xml:lang="fr-FR"><seg>Nous allons manger.</seg>'
        '</tuv><tuv xml:lang="en-US"><seg>We are going to eat.</seg></tuv></tu></body></tmx>\n', encoding="utf-8")
    from transformer.memory import TranslationMemory

    with TranslationMemory(root / "memory.db") as memory:
        memory.import_tsv(root / "pairs.tsv", "fr", "en", status="pending")
    return Sandbox(root, trained)


def _runs_here(argv: list[str]) -> bool:
    if argv[0] != "transformer":
        return False
    sub = " ".join(argv[1:3]) if argv[1:2] == ["data"] else argv[1]
    if sub not in EXECUTED:
        return False
    if sub == "info":
        return "--preset" not in argv or argv[argv.index("--preset") + 1] in ("tiny", "small", "base")
    return sub in ("data list", "tm") or RUN_DIR in argv


def _kind(argv: list[str]) -> tuple[str, ...]:
    """A command's subcommand and option names: commands that differ only in their texts run once."""
    return tuple(a for a in argv[:3] if not a.startswith("-")
                 and a in ("transformer", "data", "list", *EXECUTED, *TM_SUBCOMMANDS)) \
        + tuple(sorted(a for a in argv if a.startswith("--")))


CHEAP = list({_kind(c[0]): c for c in ALL_COMMANDS if _runs_here(c[0])}.values())


@pytest.mark.parametrize("argv, where", CHEAP, ids=[w.split(": ", 1)[0] for _, w in CHEAP])
def test_documented_command_runs_on_the_demo_model(argv, where, sandbox, monkeypatch, capsys):
    from transformer.cli import main

    monkeypatch.chdir(sandbox.root)
    for path in ("text.en", "memory.tmx", "memory.tsv"):  # outputs of an earlier command are not overwritten
        (sandbox.root / path).unlink(missing_ok=True)
    status = main(argv[1:])
    out = capsys.readouterr()
    assert status == 0, f"{where}: exit {status}\n{out.err[-2000:]}"


def python_blocks() -> list[tuple[str, str]]:
    return [(text, f"{page.relative_to(ROOT)}:{line}") for page in PAGES
            for language, text, line in code_blocks(page) if language in ("python", "py")]


@pytest.mark.parametrize("text, where", python_blocks(), ids=[w for _, w in python_blocks()])
def test_python_block_compiles(text, where):
    compile(text, where, "exec")


RUNNABLE = [(t, w) for t, w in python_blocks()
            if f'from_run_dir("{RUN_DIR}")' in t or "from transformer import" in t]


@pytest.mark.parametrize("text, where", RUNNABLE, ids=[w for _, w in RUNNABLE])
def test_python_block_runs_on_the_demo_model(text, where, sandbox, monkeypatch):
    monkeypatch.chdir(sandbox.root)
    checks = []

    def check(line: int, value, expected) -> None:
        checks.append(line)
        same = value == expected if sandbox.trained else same_shape(value, expected)
        assert same, f"{where} (line {line} of the block): the page says {expected!r}, it gives {value!r}"

    with contextlib.redirect_stdout(None):
        exec(compile(with_checks(text), where, "exec"), {"__name__": "__doc_example__", "__check__": check})
    assert len(checks) == text.count("# -> ")


def same_shape(value, expected) -> bool:
    """What a page shows, as far as an untrained model can give it: a string for a string (a
    translation), a list or tuple as long with each item of that shape; any other value exactly."""
    if isinstance(expected, str):
        return isinstance(value, str)
    if isinstance(expected, (list, tuple)):
        return (type(value) is type(expected) and len(value) == len(expected)
                and all(same_shape(v, e) for v, e in zip(value, expected)))
    return value == expected


def with_checks(text: str) -> str:
    """``EXPRESSION  # -> VALUE`` lines of a Python block made into checks (same line numbers)."""
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        match = re.match(r"^(\s*)(.+?)\s*# -> (.+)$", line)
        lines.append(f"{match.group(1)}__check__({number}, ({match.group(2)}), ({match.group(3)}))" if match else line)
    return "\n".join(lines)


def shown_outputs(path: Path) -> list[tuple[list[str], list[str], str]]:
    """``(argv, output lines, where)`` of each ``$ transformer ...`` line of a console block with its output."""
    found = []
    for language, text, line in code_blocks(path):
        if language != "console":
            continue
        command, output, start = None, [], line
        for number, row in enumerate([*text.splitlines(), "$ "], line):
            if row.startswith("$ "):
                if command and command[:1] == ["transformer"]:
                    found.append((command, output, f"{path.relative_to(ROOT)}:{start}"))
                command, output, start = shlex.split(row[2:], comments=True), [], number
            else:
                output.append(row)
    return found


SHOWN = [c for page in PAGES for c in shown_outputs(page)]


def test_the_pages_show_outputs():
    assert len(SHOWN) >= 3 and sum(text.count("# -> ") for text, _ in RUNNABLE) >= 5


@pytest.mark.parametrize("argv, output, where", SHOWN, ids=[w for _, _, w in SHOWN])
def test_documented_output_is_what_the_demo_model_prints(argv, output, where, sandbox, monkeypatch, capsys):
    from transformer.cli import main

    monkeypatch.chdir(sandbox.root)
    status = main(argv[1:])
    out = capsys.readouterr()
    assert status == 0, f"{where}: exit {status}\n{out.err[-2000:]}"
    if sandbox.trained:
        assert out.out.rstrip("\n").splitlines() == output, \
            f"{where}: the page shows\n{output}\nthe command prints\n{out.out}"
    else:  # an untrained model's words, one line for each line the page shows
        assert len(out.out.splitlines()) == len(output), f"{where}: the page shows\n{output}\nthe command prints\n{out.out}"


def yaml_blocks() -> list[tuple[str, str]]:
    return [(text, f"{page.relative_to(ROOT)}:{line}") for page in PAGES
            for language, text, line in code_blocks(page) if language in ("yaml", "yml")]


@pytest.mark.parametrize("text, where", yaml_blocks(), ids=[w for _, w in yaml_blocks()])
def test_yaml_run_config_is_read(text, where):
    from transformer.run.config import SECTIONS, RunConfig

    raw = yaml.safe_load(text)
    if isinstance(raw, dict) and set(raw) <= set(SECTIONS):
        RunConfig.from_dict(raw)


# ---------------------------------------------------------------------------------------------
# The generated references
def test_every_config_key_has_a_default_a_meaning_and_a_range():
    import configref
    from transformer import config_dict
    from transformer.config import ModelConfig
    from transformer.model.rnn_config import RNNConfig
    from transformer.run.config import DataConfig, TrainConfig

    for cls in (DataConfig, TrainConfig, ModelConfig, RNNConfig):
        ranges = config_dict.ranges(cls) if hasattr(config_dict, "ranges") else {}
        for row in configref.config_rows(cls):
            if not row["settable"]:
                continue
            where = f"{cls.__name__}.{row['key']}"
            assert row["meaning"], f"{where} has no meaning: add a comment on the field (docs/_ext/configref.py reads it)"
            assert row["default"] != "(required)", where
            assert row["valid"], f"{where}: no valid values"
            if row["key"] in ranges:
                assert row["valid"] == ranges[row["key"]].describe()
    text = configref.config_reference()
    assert "`train.label_smoothing` | `0.1`" in text and "`model.d_model` | `512`" in text


def test_cli_reference_lists_every_subcommand():
    import cliref

    text = cliref.cli_reference()
    for name in cliref.subcommand_parsers():
        assert f"## `transformer {name}`" in text


# ---------------------------------------------------------------------------------------------
# The strict build
def _sphinx_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("sphinx", "myst_parser", "furo", "autoapi"))


# The site's theme (furo) draws every page's navigation from the whole table of contents: 40% of
# the build. The default run builds with Sphinx's plain theme (the same pages, references and
# warnings); the build with furo, as the site is published, is marked slow.
@pytest.mark.parametrize("theme", ["basic", pytest.param("furo", marks=pytest.mark.slow)])
def test_site_builds_strictly(tmp_path, theme):
    if not _sphinx_available():
        if ON_CI:
            pytest.fail("Sphinx (the docs extra) is not installed under CI: pip install -e '.[docs]'")
        pytest.skip("Sphinx is not installed (pip install -c constraints.txt -e '.[docs]'); CI builds the site")
    # A copy of docs/: the build writes autoapi's pages and the generated references into its
    # source folder, which concurrent test runs in one checkout must not share.
    source = tmp_path / "docs"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("_build", "_generated", "api", "__pycache__"))
    out = tmp_path / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-D", f"html_theme={theme}",
         "-d", str(tmp_path / "doctrees"), str(source), str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "TRANSFORMER_DOCS_SOURCE": str(ROOT)})
    assert result.returncode == 0, f"sphinx-build -W failed:\n{result.stderr[-6000:]}\n{result.stdout[-2000:]}"
    for page in ("index", "getting-started", "paper-to-code", "training", "decoding", "http-api", "attention",
                 "interop", "rnn", "benchmarks", "quality", "performance", "cli", "library", "api", "changelog",
                 "developers", "api/transformer/index"):
        assert (out / f"{page}.html").is_file(), f"{page}.html was not built"
    training = (out / "training.html").read_text(encoding="utf-8")
    assert "train.label_smoothing" in training and "model.d_model" in training
    api = (out / "http-api.html").read_text(encoding="utf-8")
    assert "/v1/translate" in api and "TranslateRequest" in api
    assert (out / "_downloads").is_dir(), "openapi.json is offered for download"


def test_links_named_serving_go_to_the_serving_page():
    # the serving guide, not the HTTP API reference it links to, is what "serving" promises
    wrong = [f"{page.name}: [{text}]({target})" for page in PAGES
             for text, target in re.findall(r"\[([^\]]+)\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
             if text.lower().startswith(("serving", "serve ")) and not target.split("#")[0].endswith("serving.md")]
    assert not wrong
