"""The wheel (what `pip install .`, any non-editable install and an index build install) holds every
file the package reads at run time, and nothing else.

Editable installs read the checkout, so only a built wheel shows a file left out of
``[tool.setuptools.package-data]``: the CPU engine then runs without its kernels, the attention
page cannot be written. The default test builds the wheel and compares its members with the
source tree and with the files the code names beside its modules; the slow test installs it in
a fresh venv with the base dependencies and runs the demo there.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "transformer"
# Outside a git checkout, the walk skips what .gitignore keeps out of one, and hidden folders (.venv, caches).
UNTRACKED_DIRS = {"__pycache__", "build", "dist", "runs", "test-artifacts", "_build", "_generated"}
# Not source: what running, testing or building in a checkout leaves in the package's folders.
JUNK = ["transformer/__pycache__/cli.cpython-311.pyc", "transformer/cpu/cpu_kernels-0123456789abcdef.so",
        "transformer/visualize/page.html.orig", "transformer.egg-info/PKG-INFO"]


@functools.cache
def source_files() -> list[str]:
    """The checkout's files, relative to it: git's tracked and new unignored files, else a walk."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, check=True).stdout.decode().split("\0")
        return sorted(name for name in listed if name and (ROOT / name).is_file())  # not a deleted one
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs
                       if d not in UNTRACKED_DIRS and not d.startswith(".") and not d.endswith(".egg-info")]
            found += [str((Path(folder) / f).relative_to(ROOT)) for f in files if not f.endswith((".pyc", ".so"))]
        return sorted(found)


@functools.cache
def files_named_in_code() -> frozenset[str]:
    """The files the package's modules name beside themselves: in each module, every string that is a file
    name or a glob of one (``"fused.c"``, ``"*.yaml"``) matched in the module's folder, in the packages it
    names (``resources.files("transformer.visualize")``) and in the package folders it names (``"corpus"``)."""
    base = ROOT / PACKAGE
    found: set[str] = set()
    for module in base.rglob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        strings = {node.value for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        folders = {module.parent}
        folders |= {ROOT.joinpath(*s.split(".")) for s in strings if re.fullmatch(rf"{PACKAGE}(\.\w+)+", s)}
        folders |= {base / s for s in strings if re.fullmatch(r"\w+", s) and (base / s / "__init__.py").is_file()}
        names = [s for s in strings if re.fullmatch(r"[\w*.-]*[\w*]\.[\w*]+", s)]
        for folder in folders:
            for name in names:
                found |= {str(p.relative_to(ROOT)) for p in folder.glob(name) if p.is_file()}
    return frozenset(found)


def setuptools_builds_wheels() -> bool:
    """Whether this interpreter's setuptools builds wheels by itself (70.1 and later, >= pyproject's 68)."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2]) >= (70, 1)


def build_wheel(out: Path, *, pyproject: str | None = None) -> Path:
    """Build the package's wheel with this venv's pip from a copy of the source files (``pyproject`` the
    text of its pyproject.toml, if given), with some junk beside them, into ``out``; return its path."""
    source = out / "source"
    for name in source_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    if pyproject is not None:
        (source / "pyproject.toml").write_text(pyproject)
    for name in JUNK:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(b"junk")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out / "dist"), str(source)]
    if setuptools_builds_wheels():
        command.insert(4, "--no-build-isolation")  # fast and offline; else pip fetches setuptools for the build
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"pip wheel failed:\n{result.stdout}\n{result.stderr}"
    (wheel,) = (out / "dist").glob(f"{PACKAGE}-*.whl")
    return wheel


def wheel_members(wheel: Path) -> set[str]:
    """The wheel's files, without its metadata (``*.dist-info/``)."""
    return {n for n in zipfile.ZipFile(wheel).namelist() if not n.split("/")[0].endswith(".dist-info")}


def left_out(members: set[str]) -> list[str]:
    """The package's source files and the files its code names that are not among ``members``."""
    package = {n for n in source_files() if n.startswith(f"{PACKAGE}/")}
    return sorted((package | files_named_in_code()) - members)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_code_names_every_data_file_of_the_package():
    # what the scan below sees: every file of the package that is not Python is named in its code
    data = {n for n in source_files() if n.startswith(f"{PACKAGE}/") and not n.endswith(".py")}
    assert data, "the package has data files (the C kernels, the pages' templates, the recipes)"
    unseen = sorted(data - files_named_in_code())
    assert not unseen, (f"no module names {unseen} beside itself: delete unused files, or teach "
                        "files_named_in_code how the code finds them")


def test_the_wheel_holds_the_whole_package_and_nothing_else(wheel):
    members = wheel_members(wheel)
    missing = left_out(members)
    assert not missing, (f"the wheel lacks {missing}: pip install . (not -e) would leave them out; add their "
                         "patterns to [tool.setuptools.package-data] in pyproject.toml")
    extra = sorted(members - {n for n in source_files() if n.startswith(f"{PACKAGE}/")})
    assert not extra, f"the wheel holds files that are not the package's source: {extra}"


def test_the_comparison_sees_files_left_out(tmp_path):
    # pyproject.toml's package-data as it once was: the kernels' sources looked for in their old folder,
    # no CSS pattern; the wheel then lacks them and the comparison above names them
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = re.search(r"^\[tool\.setuptools\.package-data\]\n(?:.+\n)+", pyproject, re.M)
    assert section, "pyproject.toml has a [tool.setuptools.package-data] table"
    old = ('[tool.setuptools.package-data]\n"transformer.visualize" = ["*.html", "*.js", "*.json"]\n'
           '"transformer.model" = ["*.c"]\n"transformer.recipes" = ["*.yaml"]\n')
    missing = left_out(wheel_members(build_wheel(tmp_path, pyproject=pyproject.replace(section.group(0), old))))
    expected = {"transformer/cpu/fused.c", "transformer/cpu/packed_linear.c", "transformer/visualize/grid.css"}
    assert expected <= set(missing), missing


@pytest.mark.slow
def test_the_wheel_in_a_fresh_venv_runs_the_demo_with_its_kernels_and_page(wheel, tmp_path):
    # the base install (no extras), not editable, run away from the checkout: the package comes from site-packages
    venv, work, cache = tmp_path / "venv", tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-c", str(ROOT / "constraints.txt"),
                                str(wheel)], capture_output=True, text=True, timeout=1800)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TRANSFORMER_FUSED_CPU")}
    env["TRANSFORMER_CACHE"] = str(cache)  # an empty cache: the kernels are compiled by this demo

    def python(code: str) -> str:
        result = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=work, env=env, capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    package = Path(python("import transformer; print(transformer.__file__)")).parent
    site = Path(python("import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    assert package == site / PACKAGE, f"transformer imported from {package}, not the venv's {site}"
    before = {p for p in package.rglob("*") if "__pycache__" not in p.parts}

    demo = subprocess.run([str(venv / "bin" / "transformer"), "demo", "--steps", "60", "--json"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "CPU kernels unavailable" not in demo.stderr, demo.stderr[-3000:]
    summary = json.loads(demo.stdout.strip().splitlines()[-1])

    # the kernels: compiled into the cache by the demo, loadable, and nothing written into site-packages
    built = list(cache.glob("cpu_kernels-*.so"))
    assert len(built) == 1, f"no compiled kernels in {cache}: {sorted(cache.rglob('*'))}"
    loaded = json.loads(python("import json; from transformer.cpu import build; "
                               "print(json.dumps([build.available(), build.library()._name]))"))
    assert loaded == [True, str(built[0])]
    after = {p for p in package.rglob("*") if "__pycache__" not in p.parts}
    assert after == before, f"the run wrote into the installed package: {sorted(after - before)}"

    # the attention page: written, its styles and scripts (grid.css, grid.js, page.js) inlined from the package
    page = work / summary["attention_page"]
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "__GRID_STYLE__" not in html and "__SCRIPT__" not in html
    for asset in ("grid.css", "grid.js", "page.js"):
        text = (package / "visualize" / asset).read_text(encoding="utf-8").strip()
        assert text and text in html, f"the attention page lacks {asset}"
    for reference in re.findall(r"<(?:link[^>]*href|script[^>]*src)=\"([^\"]+)\"", html):
        assert not re.match(r"[a-z]+:", reference), f"the page needs the network: {reference}"
        assert (page.parent / reference).stat().st_size > 0, f"the page references {reference}, empty or missing"
