"""The README's quick-start commands and CI stay in step."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.+?)\n```", readme)
    assert len(commands) >= 2, "the README opens with two commands: main job, tests"
    test_command = commands[1]
    assert "pytest" in test_command
    assert test_command in (ROOT / ".ci" / "run").read_text()
    assert "-c constraints.txt" in commands[0] and "-c constraints.txt" in test_command
