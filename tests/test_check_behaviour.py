"""``tools/check_behaviour.py``, the check a refactor runs before and after (docs/developers.md):
its comparison of two records and its command line. Recording itself takes about 15 seconds of CPU
and runs the whole package, so it is not run here; the comparison it ends with is."""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "check_behaviour.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("check_behaviour", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def a_record(check) -> dict:
    return {
        "format": check.FORMAT,
        "training": [{"step": 1, "loss": 5.570117792807335}, {"step": 2, "loss": 4.49376026098279}],
        "translations": {"beam4": {"result": ["que " * 60 + "chat", "s"], "warnings": []}},
        "server": {"openapi": {"status": 200, "body": {"paths": {"/v1/translate": {"post": {}}}}}},
        "environment": {"torch": "2.5.0", "python": "3.12.0"},
    }


def compared(check, before: dict, after: dict) -> tuple[int, str]:
    out = io.StringIO()
    return check.compare(before, after, out=out), out.getvalue()


def test_identical_records_pass_in_one_line(check):
    record = a_record(check)
    other = copy.deepcopy(record)
    other["environment"]["torch"] = "2.6.0"  # where it ran is reported with a difference, not one itself
    code, out = compared(check, record, other)
    assert code == 0 and out.count("\n") == 1 and "unchanged" in out


def test_the_last_digit_of_a_loss_is_a_difference(check):
    before = a_record(check)
    after = copy.deepcopy(before)
    after["training"][1]["loss"] = 4.493760260982791
    code, out = compared(check, before, after)
    assert code == 1
    assert "training[1].loss\n    before: 4.49376026098279\n    after:  4.493760260982791" in out


def test_a_long_text_is_shown_where_it_differs(check):
    before = a_record(check)
    after = copy.deepcopy(before)
    after["translations"]["beam4"]["result"][0] = "que " * 60 + "chien"
    code, out = compared(check, before, after)
    assert code == 1 and "translations.beam4.result[0]" in out
    assert "(from character 202)" in out and "que chat'" in out and "que chien'" in out  # 40 before "a"/"i"


def test_missing_and_new_values_are_named(check):
    before = a_record(check)
    after = copy.deepcopy(before)
    after["translations"]["beam4"]["result"].pop()
    after["server"]["openapi"]["body"]["paths"]["/v1/new"] = {"get": {}}
    after["training"][0]["loss"] = 5  # an int where a float was: a difference, though 5 == 5.0 would not be
    before["training"][0]["loss"] = 5.0
    code, out = compared(check, before, after)
    assert code == 1 and "4 difference(s)" in out
    assert "translations.beam4.result.length\n    before: 2\n    after:  1" in out
    assert "translations.beam4.result[1]\n    before: 's'\n    after:  (absent)" in out
    assert "server.openapi.body.paths./v1/new.get\n    before: (absent)\n    after:  {}" in out
    assert "training[0].loss\n    before: 5.0\n    after:  5" in out


def test_only_the_first_differences_are_printed(check):
    before = a_record(check)
    before["training"] = [{"step": i, "loss": float(i)} for i in range(20)]
    after = copy.deepcopy(before)
    for step in after["training"]:
        step["loss"] += 0.5
    code, out = compared(check, before, after)
    assert code == 1 and "20 difference(s); the first 8:" in out
    assert "training[7].loss" in out and "training[8].loss" not in out


def test_command_line(tmp_path):
    shown = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "--record" in shown.stdout and "--compare" in shown.stdout
    not_a_record = tmp_path / "other.json"
    not_a_record.write_text(json.dumps({"something": "else"}))
    refused = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(not_a_record)], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "is not a record of this check" in refused.stderr.splitlines()[-1]
    missing = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(tmp_path / "none.json")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "cannot read the record" in missing.stderr.splitlines()[-1]
