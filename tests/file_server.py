"""A local HTTP server on 127.0.0.1 serving files from memory, for the download tests.

``server`` yields ``(handler, base_url)``: put ``name -> bytes`` in ``handler.files``; a name in
``handler.truncate`` is announced 1,000 bytes longer than it is sent (a download cut short).
"""

import http.server
import threading

import pytest


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    truncate: set[str] = set()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        name = self.path.rsplit("/", 1)[-1]
        data = self.files.get(name)
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data) + (1000 if name in self.truncate else 0)))
        self.end_headers()
        self.wfile.write(data)  # for a truncated file, then close: fewer bytes than announced

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    handler = type("Handler", (_Handler,), {"files": {}, "truncate": set()})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
