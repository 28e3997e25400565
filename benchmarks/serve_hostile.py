"""Hostile requests replayed against ``transformer serve``: the server's peak memory, the time to
each answer, whether small requests were answered meanwhile, and the disk the download store uses.

    python benchmarks/serve_hostile.py RUN_DIR [--rows 1,2,3,4,5] [--pythonpath DIR] [--json OUT]

Each row starts its own ``transformer serve RUN_DIR --threads 1`` on 127.0.0.1 (a free port, a
temporary folder of its own for the download store) so that its peak RSS (``VmHWM`` of
/proc/PID/status) is that row's alone:

1. ``/translate_file`` of a .docx whose word/document.xml is 190 MiB of ``<w:p/>`` (about 300 KB
   compressed, under the 200 MiB uncompressed cap);
2. ``/v1/translate`` of 8 texts holding 256 glossary terms each, ``beam_size`` 16, then 8 texts of
   16 terms each (within ``--max-glossary-work``), each followed by small requests until one is
   answered (at most 3; a held model answers them 503 after ``--timeout``);
3. ``/translate_file`` of an .html of 200,000 nested ``<b>`` (1.4 MB) and of a Markdown file of
   400,000 ``*`` each side of a word (800 KB);
4. 60 concurrent ``/translate_file`` uploads of a 10.4 MB corrupt .docx;
5. 100 ``/translate_file`` uploads, one after the other, of a 10 MB .docx without text (a picture);
   the store's bytes on disk after them.

Meanwhile a probe sends a one-sentence ``/v1/translate`` every second: how many were answered
200. ``--pythonpath`` runs the server from another checkout of the package (the code before a
change); ``--server-option`` adds options to the server of a row (``5:--max-stored-bytes=N``).
Only 127.0.0.1 is contacted. The last line printed is a JSON summary; ``os.getloadavg()`` is
recorded beside each row.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_process import ServerProcess  # noqa: E402

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
TYPES = ('<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
         'content-types"><Default Extension="xml" ContentType="application/xml"/><Default Extension="png" '
         'ContentType="image/png"/><Override PartName="/word/document.xml" ContentType="application/'
         'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>')


def docx(document_xml: bytes, *, media: bytes | None = None) -> bytes:
    """A Word document of ``document_xml`` (deflated at level 9), with a stored picture of ``media``."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", TYPES)
        archive.writestr("word/document.xml", document_xml)
        if media is not None:
            archive.writestr(zipfile.ZipInfo("word/media/image1.png"), media, compress_type=zipfile.ZIP_STORED)
    return out.getvalue()


def empty_paragraphs_docx(mib: int = 190) -> bytes:
    """Row 1: ``mib`` MiB of ``<w:p/>`` in one body."""
    head = f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W}"><w:body>'.encode()
    tail = b"</w:body></w:document>"
    count = (mib * 1024 * 1024 - len(head) - len(tail)) // len(b"<w:p/>")
    return docx(head + b"<w:p/>" * count + tail)


def textless_docx(size: int = 10 * 1000 * 1000) -> bytes:
    """Row 5: a document without text beside a picture of ``size`` random bytes."""
    body = f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W}"><w:body/></w:document>'.encode()
    return docx(body, media=random.Random(5).randbytes(size))


def glossary_request(terms_per_text: int, texts: int = 8, terms: int = 256, beam_size: int = 16) -> dict:
    """Row 2: ``texts`` texts of ``terms_per_text`` glossary source terms each (of ``terms``)."""
    glossary = [{"source": f"mot{i:03d}", "target": f"term{i:03d}"} for i in range(terms)]
    body = [" ".join(glossary[(k * terms_per_text + j) % terms]["source"] for j in range(terms_per_text))
            for k in range(texts)]
    return {"text": body, "beam_size": beam_size, "glossary": glossary}


class Probe:
    """A one-sentence /v1/translate every ``every_s`` seconds while it runs: their statuses."""

    def __init__(self, url: str, every_s: float = 1.0) -> None:
        self.url, self.every_s = url, every_s
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                try:
                    status = client.post(self.url + "/v1/translate", json={"text": "Le chat dort.",
                                                                             "max_length": 8}).status_code
                except httpx.HTTPError:
                    status = 0
                self.statuses.append(status)
                self._stop.wait(self.every_s)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=90)
        return {"probes": len(self.statuses), "probes_answered": self.statuses.count(200)}


def upload(client: httpx.Client, url: str, name: str, data: bytes, source: str = "fr", target: str = "en"):
    response = client.post(url + "/translate_file", data={"source": source, "target": target},
                           files={"file": (name, data)})
    return response.status_code, response.headers.get("retry-after"), response.text[:200]


def until_free(client: httpx.Client, url: str, tries: int = 3) -> dict:
    """Small requests one after the other until one is answered 200 (at most ``tries``)."""
    start = time.monotonic()
    for attempt in range(1, tries + 1):
        status = client.post(url + "/v1/translate", json={"text": "Le chat dort.", "max_length": 8}).status_code
        if status == 200:
            return {"free_after_s": round(time.monotonic() - start, 1), "small_requests_tried": attempt}
    return {"free_after_s": None, "small_requests_tried": tries}


def row1(url: str) -> dict:
    data = empty_paragraphs_docx()
    start = time.monotonic()
    with httpx.Client(timeout=600) as client:
        status, _, text = upload(client, url, "empty.docx", data)
    return {"upload_bytes": len(data), "statuses": [status], "answer": text, "seconds": time.monotonic() - start}


def row2(url: str) -> dict:
    out: dict = {}
    begin = time.monotonic()
    with httpx.Client(timeout=600) as client:
        for name, per_text in (("256_terms_a_text", 256), ("16_terms_a_text", 16)):
            body = glossary_request(per_text)
            start = time.monotonic()
            response = client.post(url + "/v1/translate", json=body)
            out[name] = {"request_bytes": len(json.dumps(body)), "status": response.status_code,
                         "answer": response.text[:200] if response.status_code != 200 else "",
                         "seconds": round(time.monotonic() - start, 1), **until_free(client, url)}
    out["statuses"] = [out[k]["status"] for k in ("256_terms_a_text", "16_terms_a_text")]
    out["seconds"] = time.monotonic() - begin
    return out


def row3(url: str) -> dict:
    html = b"<html><body><p>" + b"<b>" * 200_000 + b"Le chat dort." + b"</b>" * 200_000 + b"</p></body></html>"
    markdown = b"*" * 400_000 + b"a" + b"*" * 400_000 + b"\n"
    start = time.monotonic()
    with httpx.Client(timeout=600) as client:
        answers = [upload(client, url, "nested.html", html), upload(client, url, "stars.md", markdown)]
    return {"statuses": [a[0] for a in answers], "answer": [a[2] for a in answers],
            "seconds": time.monotonic() - start}


def row4(url: str, count: int = 60) -> dict:
    data = b"PK\x03\x04" + random.Random(4).randbytes(10_400_000 - 4)
    start = time.monotonic()

    def one(_: int):
        with httpx.Client(timeout=600) as client:
            return upload(client, url, "corrupt.docx", data)

    with ThreadPoolExecutor(count) as pool:
        answers = list(pool.map(one, range(count)))
    statuses = [a[0] for a in answers]
    return {"upload_bytes": len(data), "statuses": statuses,
            "status_counts": {str(s): statuses.count(s) for s in sorted(set(statuses))},
            "retry_after": sorted({a[1] for a in answers if a[0] == 503}), "seconds": time.monotonic() - start}


def row5(url: str, server: ServerProcess, count: int = 100) -> dict:
    data = textless_docx()
    start = time.monotonic()
    with httpx.Client(timeout=600) as client:
        statuses = [upload(client, url, "picture.docx", data)[0] for _ in range(count)]
    return {"upload_bytes": len(data), "statuses": statuses,
            "status_counts": {str(s): statuses.count(s) for s in sorted(set(statuses))},
            "store_mb": round(server.store_bytes() / 1e6, 1), "seconds": time.monotonic() - start}


ROWS = {1: row1, 2: row2, 3: row3, 4: row4, 5: row5}


def replay(run_dir: Path, rows: list[int], *, pythonpath: str | None = None,
           options: dict[int, list[str]] | None = None) -> dict[int, dict]:
    """Each row against a server of its own; its figures, the server's peak RSS and log's tail."""
    results = {}
    for row in rows:
        env = {"OMP_NUM_THREADS": "1", **({"PYTHONPATH": pythonpath} if pythonpath else {})}
        server = ServerProcess(run_dir, ["--threads", "1", *(options or {}).get(row, [])], env=env)
        load_before = os.getloadavg()
        try:
            probe = Probe(server.url)
            result = ROWS[row](server.url, server) if row == 5 else ROWS[row](server.url)
            result.update(probe.stop())
        finally:
            peak = server.peak_rss_mb()
            server.stop(grace=60)
            log = server.log()
        result["seconds"] = round(result["seconds"], 1)
        result.update(peak_rss_mb=round(peak), loadavg=[round(x, 1) for x in load_before],
                      traceback_in_log="Traceback" in log, log_tail=log[-600:])
        results[row] = result
        print(f"row {row}: {json.dumps({k: v for k, v in result.items() if k not in ('statuses', 'log_tail')})}",
              flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--rows", default="1,2,3,4,5", help="rows to replay, comma-separated")
    parser.add_argument("--pythonpath", help="run the server from this checkout (PYTHONPATH)")
    parser.add_argument("--server-option", action="append", default=[], metavar="ROW:OPTION",
                        help="an option for that row's server, e.g. 5:--max-stored-bytes=268435456")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    options: dict[int, list[str]] = {}
    for item in args.server_option:
        row, _, option = item.partition(":")
        options.setdefault(int(row), []).append(option)
    results = replay(args.run_dir, [int(r) for r in args.rows.split(",")], pythonpath=args.pythonpath,
                     options=options)
    summary = json.dumps({str(k): {n: v for n, v in r.items() if n != "statuses"} for k, r in results.items()})
    if args.json:
        args.json.write_text(summary)
    print(summary)


if __name__ == "__main__":
    main()
