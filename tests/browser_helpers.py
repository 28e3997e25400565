"""The headless Chromium the browser tests drive (Playwright over the system's /usr/bin/chromium;
the ``browser`` fixture in conftest.py starts it). Without either, those tests are skipped, unless
the environment variable CI is set: then they fail instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(ok: bool, reason: str) -> None:
    """Skip with ``reason``, or fail when running in CI (which must run these tests)."""
    if not ok:
        if IN_CI:
            pytest.fail(f"{reason}; CI is set, so the browser tests must run", pytrace=False)
        pytest.skip(reason)
