"""The command line loads only what a command uses.

Building the parser and printing any command's ``--help`` imports neither torch nor an optional
extra, and every command but those that need an extra works on a base install: without the
``serve`` or ``interop`` extra, ``serve``, ``import-hf`` and ``export`` exit 2 with one line
naming the extra and its install command, while their ``--help`` and the other commands work.
Each check runs in a fresh interpreter (a test's own process has imported everything already).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from transformer.cli import _handler, build_parser
from transformer.errors import EXTRA_MODULES, install_hint

ROOT = Path(__file__).resolve().parents[1]
# What building the parser and --help must not load: torch, numpy and the modules of the extras.
HEAVY = ("torch", "numpy", "matplotlib", "sacrebleu", "fastapi", "pydantic", "starlette", "uvicorn", "multipart",
         "python_multipart", "transformers", "huggingface_hub", "sentencepiece", "ctranslate2", "onnx",
         "onnxruntime", "onnxscript", "tensorboard")


TM_SUBCOMMANDS = ("import", "export", "list", "stats", "review")


def subcommands() -> dict:
    return build_parser()._subparsers._group_actions[0].choices


def run_python(script: str) -> dict:
    """Run ``script`` in a fresh interpreter from the project's root; the JSON object it prints last."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_help_of_every_command_loads_nothing_heavy():
    found = run_python(f"""
        import contextlib, io, json, sys
        from transformer.cli import build_parser, main

        commands = list(build_parser()._subparsers._group_actions[0].choices)
        statuses = {{}}
        # tm's subcommands too: each has a parser of its own
        for argv in [[]] + [[command] for command in commands] + [["tm", sub] for sub in {TM_SUBCOMMANDS!r}]:
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    main([*argv, "--help"])
            except SystemExit as exit_:
                statuses[" ".join(argv) or "transformer"] = (exit_.code, len(out.getvalue()))
        print(json.dumps({{"statuses": statuses, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
    """)
    assert set(found["statuses"]) == {"transformer", *subcommands(), *(f"tm {sub}" for sub in TM_SUBCOMMANDS)}
    assert all(code == 0 and size > 200 for code, size in found["statuses"].values()), found["statuses"]
    assert found["loaded"] == []


def test_every_handler_names_a_function():
    for name, parser in subcommands().items():
        reference = parser.get_default("handler")
        assert callable(reference) or (isinstance(reference, str) and ":" in reference), name
        assert callable(_handler(reference)), name


def test_calibrate_describes_the_confidence_it_fits():
    from transformer.translate.calibration import ADEQUATE_CHRF

    assert f"reaches chrF {ADEQUATE_CHRF:g} " in " ".join(subcommands()["calibrate"].format_help().split())


def test_the_extras_modules_are_those_of_pyproject():
    """EXTRA_MODULES names a module of every package of the extras it lists (protobuf is a file
    format that sentencepiece's own module imports)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    modules_of: dict[str, set[str]] = {}
    for module, distributions in packages_distributions().items():
        for distribution in distributions:
            modules_of.setdefault(distribution.lower().replace("_", "-"), set()).add(module)
    for extra, modules in EXTRA_MODULES.items():
        for requirement in extras[extra]:
            distribution = requirement.split(">")[0].split("=")[0].split("[")[0].strip().lower().replace("_", "-")
            if distribution != "protobuf":
                assert modules_of[distribution] & set(modules), (extra, distribution)


# A base install: the modules of the serve and interop extras are not there. A None in sys.modules
# is what Python takes for a module that cannot be imported: importing it (or one of its submodules)
# raises ModuleNotFoundError, and importlib.util.find_spec says None, as torch asks of onnx.
WITHOUT_EXTRAS = """
    import contextlib, io, json, sys

    sys.modules.update(dict.fromkeys({blocked!r}))
    from transformer.cli import main

    results = {{}}
    for argv in {commands!r}:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as exit_:
                status = exit_.code
        results[" ".join(argv[:2])] = [status, out.getvalue(), err.getvalue()]
    print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def run_dir(tiny_run) -> Path:
    return tiny_run()


def test_a_base_install_runs_every_command_but_those_of_the_extras(run_dir, tmp_path):
    blocked = sorted({module for modules in EXTRA_MODULES.values() for module in modules} | {"tensorboard"})
    commands = [
        ["serve", str(run_dir)],
        ["import-hf", "Helsinki-NLP/opus-mt-fr-en", str(tmp_path / "imported")],
        ["export", str(run_dir), "--format", "hf", str(tmp_path / "exported")],
        ["serve", "--help"],
        ["export", "--help"],
        ["info", "--preset", "tiny", "--vocab", "100", "--batch", "1", "--length", "4", "--threads", "1"],
        ["translate", str(run_dir), "le chat dort", "--greedy", "--threads", "1"],
    ]
    results = run_python(WITHOUT_EXTRAS.format(blocked=blocked, commands=commands))
    for command, extra in (("serve " + str(run_dir), "serve"), ("import-hf Helsinki-NLP/opus-mt-fr-en", "interop"),
                           ("export " + str(run_dir), "interop")):
        status, out, err = results[command]
        name = command.split()[0]
        assert status == 2 and out == "", (command, err)
        assert err.count("\n") == 1 and err.startswith(f"transformer {name}: error: "), err
        assert f"needs the '{extra}' extra" in err and install_hint(extra) in err, err
    for command in ("serve --help", "export --help"):
        status, out, err = results[command]
        assert status == 0 and out.startswith("usage: transformer") and err == "", (command, err)
    status, out, err = results["info --preset"]
    assert status == 0 and "parameters:" in out and "forward pass" in out, err
    status, out, err = results["translate " + str(run_dir)]
    assert status == 0 and out.strip(), err
