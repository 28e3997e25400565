"""Hostile uploads and requests replayed against a real ``transformer serve`` process (slow).

benchmarks/serve_hostile.py's five rows, each against a server of its own (``--threads 1``, the
demo's model shape from ``transformer demo --steps 40``, default limits but for row 5's store):
a .docx of 190 MiB of ``<w:p/>`` (300 KB), a glossary request of 8 texts x 256 terms at beam 16,
200,000 nested ``<b>`` and 400,000 ``*``, 60 concurrent 10.4 MB corrupt uploads, 100 uploads of a
10 MB .docx without text. Each is refused or answered as the server's bounds say, no answer is
a 500 and no log holds a traceback, the model is free after the glossary requests (a small
request is answered at its first try), the store stays under its cap, and the server's peak
memory (VmHWM) stays under PEAK_RSS_MB: a bound on memory, none on time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import serve_hostile  # noqa: E402

PEAK_RSS_MB = 1500  # docs/serving.md, "Files: memory and disk"
STORE_CAP = 256 * 1024 * 1024  # row 5's --max-stored-bytes: 100 files of 10 MB would be 1 GB

pytestmark = pytest.mark.slow


def test_rows_1_to_5_stay_within_the_servers_bounds(short_demo_run):
    run_dir, made = short_demo_run
    assert made.returncode == 0, made.stderr
    results = serve_hostile.replay(run_dir, [1, 2, 3, 4, 5], options={5: [f"--max-stored-bytes={STORE_CAP}"]})
    for row, result in results.items():
        assert result["peak_rss_mb"] < PEAK_RSS_MB, (row, result["peak_rss_mb"])
        assert not result["traceback_in_log"], (row, result["log_tail"])
        assert 500 not in result["statuses"], (row, result["statuses"])
        assert result["probes_answered"] == result["probes"], (row, "a small request went unanswered meanwhile")
    assert results[1]["statuses"] == [400] and "XML elements" in results[1]["answer"]
    glossary = results[2]
    assert glossary["256_terms_a_text"]["status"] == 422  # over --max-glossary-work: refused at once
    assert glossary["16_terms_a_text"]["status"] in (200, 503)  # within it: translated, or timed out
    for request in ("256_terms_a_text", "16_terms_a_text"):
        assert glossary[request]["small_requests_tried"] == 1, glossary[request]  # the model was free
    assert results[3]["statuses"] == [400, 400]  # too deep for HTML and for Markdown
    uploads = results[4]
    assert set(uploads["statuses"]) <= {400, 503} and uploads["retry_after"] in ([], ["5"]), uploads["status_counts"]
    store = results[5]
    assert store["statuses"] == [200] * 100 and store["store_mb"] * 1e6 <= STORE_CAP, store
