"""Files on the LibreTranslate API: a document translated whole, then downloaded once it is ready.

``POST /translate_file`` reads an uploaded file with :mod:`transformer.translate.files` (its
format chosen by its name: .txt, .html, .md, .srt, .po, .docx, .pptx, .odt, .epub), cuts every
unit of text into sentences as the command line does (``FileSentences``: plain text as
``translate_document``, HTML fragments as ``translate_html``), translates all the sentences along the request's
:class:`~transformer.serve.model_set.Route` (:func:`translate_upload`: through the batcher a call
at a time, so other requests keep their turn), writes the file back with the translations in
place, and keeps it in a :class:`FileStore`; the answer is the URL of ``GET
/download_file/<name>``, which serves it until ``file_ttl_s`` has passed.
"""

from __future__ import annotations

import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from transformer.serve.documents import Unprocessable
from transformer.serve.service import _off_the_loop
from transformer.translate.files import FileSentences, TooManySentences, TranslatableFile, translated_name

_STORED = re.compile(r"[0-9a-f]{32}\.[^/\\]{1,255}")


class FileStore:
    """Translated files kept for download for ``ttl_s`` seconds, in a private temporary folder.

    A stored file's name is a random token, a dot and its download name (``<token>.report_de.docx``);
    the token cannot be guessed, so one client cannot fetch another's file. Expired files are
    deleted by a timer (every ``sweep_s`` seconds), whenever a file is stored or asked for, and
    the folder when the store is closed. The store holds at most ``max_files`` files and
    ``max_bytes`` bytes: storing one more first removes the expired files, then the oldest ones
    until it fits (an empty store takes any one file).

    Args:
        ttl_s: how long a file can be downloaded.
        max_files, max_bytes: the most files and bytes kept.
        sweep_s: seconds between the timer's sweeps (default: the TTL, at most 60 s; 0: no timer).
        clock: the time in seconds (``time.monotonic``; injectable for tests).
    """

    def __init__(self, ttl_s: float, *, max_files: int = 1000, max_bytes: int = 1 << 30,
                 sweep_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.sweep_s = min(ttl_s, 60.0) if sweep_s is None else sweep_s
        self.clock = clock
        self.evicted = 0  # files removed before their time to make room
        self._folder: Path | None = None
        self._expires: dict[str, float] = {}  # in the order stored: the oldest first
        self._sizes: dict[str, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    def _path(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="transformer-serve-files-"))
        return self._folder

    def put(self, download_name: str, data: bytes) -> str:
        """Keep ``data``; returns the name to download it by."""
        stored = f"{secrets.token_hex(16)}.{download_name}"
        with self._lock:
            self._sweep()
            while self._expires and (len(self._expires) >= self.max_files
                                     or self._bytes + len(data) > self.max_bytes):
                self._remove(next(iter(self._expires)))  # the oldest: the first to expire
                self.evicted += 1
            path = self._path() / stored
            path.write_bytes(data)
            self._expires[stored] = self.clock() + self.ttl_s
            self._sizes[stored] = len(data)
            self._bytes += len(data)
            self._start_timer()
        return stored

    def _start_timer(self) -> None:
        if self.sweep_s > 0 and self._timer is None:
            self._stop.clear()
            self._timer = threading.Thread(target=self._sweep_every, name="transformer-serve-file-sweep", daemon=True)
            self._timer.start()

    def _sweep_every(self) -> None:
        while not self._stop.wait(self.sweep_s):
            with self._lock:
                self._sweep()

    def get(self, stored: str) -> tuple[str, bytes] | None:
        """The download name and bytes of a stored file; None when unknown or expired."""
        if not _STORED.fullmatch(stored):
            return None
        with self._lock:
            self._sweep()
            if stored not in self._expires:
                return None
            return stored.split(".", 1)[1], (self._path() / stored).read_bytes()

    def _sweep(self) -> None:
        now = self.clock()
        for stored in [s for s, expires in self._expires.items() if expires <= now]:
            self._remove(stored)

    def _remove(self, stored: str) -> None:
        del self._expires[stored]
        self._bytes -= self._sizes.pop(stored)
        (self._path() / stored).unlink(missing_ok=True)

    def __len__(self) -> int:
        return len(self._expires)

    @property
    def bytes(self) -> int:
        """The bytes of the files kept."""
        return self._bytes

    def close(self) -> None:
        """Delete every stored file and the folder, and stop the timer."""
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
            self._timer = None
        with self._lock:
            self._expires.clear()
            self._sizes.clear()
            self._bytes = 0
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None


async def translate_upload(route, document: TranslatableFile, name: str, *, max_sentences: int,
                           run: Callable = _off_the_loop) -> tuple[str, bytes]:
    """Translate an uploaded file along ``route``.

    Args:
        route: the :class:`~transformer.serve.model_set.Route` of the request's language pair.
        document: the file as :func:`~transformer.translate.files.read_file` read it; ``name`` its name.
        max_sentences: the most sentences the file may hold (:class:`Unprocessable` beyond).
        run: runs the parsing and writing off the event loop (``run(fn, *args)``; the server's
            :meth:`~transformer.serve.libretranslate.uploads.Uploads.run`).

    Returns:
        The translated file's name (LibreTranslate's: the target's code after the stem) and bytes.
    """
    try:  # counted as the units are cut: a file far over the limit is not cut whole first
        cut = await run(FileSentences, document.units(), route.steps[0].segment_lang,
                        max_sentences=max_sentences, whole=route.steps[0].kept_whole())
    except TooManySentences as err:
        raise Unprocessable(f"{err} (--max-file-sentences)") from None
    sentences = cut.texts
    translated = await route.translate_sentences(sentences)
    texts = await run(cut.rebuild, translated)
    out = await run(document.write, texts, target_lang=route.target)
    return translated_name(name, route.target or "translated"), out
