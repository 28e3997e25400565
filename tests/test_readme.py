"""The README's quick-start commands and CI stay in step."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_commands_as_written():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.+?)\n```", readme)
    assert len(commands) >= 2, "the README opens with two commands: main job, tests"
    main_command, test_command = commands[:2]
    assert "transformer demo" in main_command and "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text()
    # each in a line that runs it, not in a comment; the main job first
    runs = [line for line in ci.splitlines() if not line.lstrip().startswith("#")]
    assert any(main_command in line for line in runs), ".ci/run does not run the README's first command as written"
    assert any(test_command in line for line in runs), ".ci/run does not run the README's second command as written"
    assert ci.index(main_command) < ci.index(test_command)
    assert "-c constraints.txt" in main_command and "-c constraints.txt" in test_command


def test_readme_is_a_front_door_under_300_lines():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300, "README.md stays under 300 lines: details go on a page under docs/"
    for heading in ("## Translate", "## Train on your own data", "## Serve", "## Import and export"):
        assert heading in readme
    assert "Translator.from_run_dir(" in readme and ".translate([" in readme and ".translate_text(" in readme


def test_readme_links_and_picture_exist():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert any(t.startswith("docs/") for t in local)
    for target in local:
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert pictures, "the README shows a picture"
    for picture in pictures:
        assert (ROOT / picture).stat().st_size < 100_000, f"{picture}: keep committed pictures small"


def test_readme_map_names_every_package_folder():
    readme = (ROOT / "README.md").read_text()
    folders = sorted(p.name for p in (ROOT / "transformer").iterdir() if (p / "__init__.py").is_file())
    for folder in folders:
        assert f"`transformer/{folder}/`" in readme, f"the README's package map has no line for transformer/{folder}/"


# The pages a newcomer follows, besides the history in the changelog.
GUIDES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "changelog.md")]
FRONT_DOORS = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]


def test_every_pip_shown_is_the_venvs():
    # a bare `pip install` outside the activated venv installs into the system's Python
    bare = [f"{page.name}:{number}: {line.strip()}" for page in GUIDES
            for number, line in enumerate(page.read_text().splitlines(), 1)
            if re.search(r"(?<![\w/.-])pip3? install", line)]
    assert not bare


def test_the_quick_start_says_how_the_commands_after_it_run():
    for page in FRONT_DOORS:
        text = page.read_text()
        first_bare = re.search(r"^(\s*)transformer ", text, re.M)  # the first command that needs the venv on PATH
        assert first_bare, page.name
        assert ". .venv/bin/activate" in text[: first_bare.start()], f"{page.name}: say to activate before {first_bare}"


def test_the_cpu_only_install_is_pytorchs_cpu_index_at_the_pinned_version():
    pin = re.search(r"^torch==(\S+)", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    for page in FRONT_DOORS:
        text = page.read_text()
        assert f"pip install torch=={pin} --index-url https://download.pytorch.org/whl/cpu" in text, page.name
        assert "download.pytorch.org/whl/cu" in text.replace("whl/cpu", ""), f"{page.name}: no word on a GPU install"
        assert "nothing pulls a CUDA build" not in text, page.name
