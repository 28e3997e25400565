"""Swapping a served model for a newer run without a restart, and naming the version each pair serves.

A server remembers the run directory of each pair it serves. :meth:`Reloader.reload` loads a run
again (the same directory, whose ``model.safetensors`` training or ``transformer adapt`` has
replaced, or another run of the same pair), off the event loop: the translator is loaded, set to
the server's decoding and tried on one short sentence, and a new
:class:`~transformer.serve.service.TranslationService` (its own batcher) is built for it. Then the
pair's service is replaced in the :class:`~transformer.serve.model_set.ModelSet` in one step of the
event loop: requests that arrive after it get the new model, and those already queued or running on
the old one finish on it; the old batcher is closed once nothing uses it any more. A load that fails
(a damaged run, a run of another pair) changes nothing: the old model goes on serving, and the
failure is one line in the answer and the log.

Triggers: ``SIGHUP`` reloads every pair from its run directory (:meth:`Reloader.reload_soon`), and
``POST /admin/reload`` (:func:`admin_router`), guarded by a key of its own (``--admin-key`` or
``--admin-key-file``), reloads one pair or every one.

:class:`ModelVersion`: what ``/v1/model``, ``/health`` and ``/v1/translate`` name a model by: the
step of the run's newest checkpoint and a short hash of the weights file that was loaded.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from transformer.errors import UserError
from transformer.run.checkpoints import STEP_DIR, latest_checkpoint
from transformer.run.layout import WEIGHTS_FILE
from transformer.serve.model_set import UNKNOWN, ModelSet
from transformer.serve.service import TranslationService, _off_the_loop
from transformer.translate.translator import Translator

log = logging.getLogger("uvicorn.error")

HASH_CHARS = 12  # hex digits of the weights' SHA-256 a version shows
MIN_ADMIN_KEY_CHARS = 16  # a shorter key is refused at start: it could be guessed
WARM_UP = "ok"  # the sentence a newly loaded model translates before it is served


@dataclass(frozen=True)
class ModelVersion:
    """Which model a pair serves.

    Attributes:
        step: the step of the run's newest checkpoint (None: the run keeps no checkpoints).
        checkpoint: the first :data:`HASH_CHARS` hex digits of the SHA-256 of ``model.safetensors``.
    """

    step: int | None
    checkpoint: str

    @property
    def label(self) -> str:
        """``"step-40.3f9c2a1b7d0e"`` (``"3f9c2a1b7d0e"`` without a step): what answers carry."""
        return self.checkpoint if self.step is None else f"step-{self.step}.{self.checkpoint}"

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "checkpoint": self.checkpoint, "label": self.label}


def model_version(run_dir: str | Path) -> ModelVersion:
    """The version of the model in ``run_dir``: its newest checkpoint's step and its weights' hash
    (OSError when the weights cannot be read)."""
    run_dir = Path(run_dir)
    digest = hashlib.sha256()
    with open(run_dir / WEIGHTS_FILE, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    latest = latest_checkpoint(run_dir)
    found = STEP_DIR.match(latest.name) if latest is not None else None
    return ModelVersion(int(found.group(1)) if found else None, digest.hexdigest()[:HASH_CHARS])


def pair_name(service: TranslationService) -> str:
    """A service's pair as ``/health`` names it: ``"fr-en"`` (``"und-und"`` for a run without languages)."""
    return f"{service.src_lang or UNKNOWN}-{service.tgt_lang or UNKNOWN}"


def read_admin_key(key: str | None, key_file: str | None) -> str | None:
    """The admin key of ``--admin-key`` or ``--admin-key-file`` (the file's one line), or None for
    neither; a one-line UserError for both, an unreadable file, or a key that is too short."""
    if key is not None and key_file is not None:
        raise UserError("give --admin-key or --admin-key-file, not both")
    option = "--admin-key" if key is not None else "--admin-key-file"
    if key_file is not None:
        try:
            lines = [line.strip() for line in Path(key_file).read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(f"--admin-key-file: cannot read {key_file}: {getattr(err, 'strerror', None) or err}") \
                from None
        if len(lines) != 1:
            raise UserError(f"--admin-key-file: {key_file} must hold the key on one line, found {len(lines)} "
                            "non-empty lines")
        key = lines[0]
    if key is None:
        return None
    key = key.strip()
    if len(key) < MIN_ADMIN_KEY_CHARS or any(c.isspace() for c in key):
        raise UserError(f"{option}: the admin key must be at least {MIN_ADMIN_KEY_CHARS} characters without "
                        "spaces (for example: python -c 'import secrets; print(secrets.token_urlsafe(24))')")
    return key


@dataclass(frozen=True)
class ReloadOptions:
    """What a server needs to reload its models (``create_app(reload=...)``).

    Attributes:
        run_dirs: the run directory of each model, in the order the translators were given.
        load: ``load(run_dir)``: a run's translator as the server loads it (precision, device, beam).
        admin_key: the key of ``POST /admin/reload`` (None: the route answers 403 ``admin_disabled``).
    """

    run_dirs: Sequence[str | Path]
    load: Callable[[Path], Translator]
    admin_key: str | None = None


class ReloadFailed(UserError):
    """A reload that changed nothing: the old model goes on serving (the message says why, in one line)."""


@dataclass(frozen=True)
class Reloaded:
    """One pair swapped: from which run, the versions before and after, how long the load took."""

    pair: str
    run: str
    version: ModelVersion
    previous: ModelVersion | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"pair": self.pair, "run": self.run, "version": self.version.label,
                "previous_version": self.previous.label if self.previous else None, "seconds": round(self.seconds, 3)}


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class Reloader:
    """Reloads the models of a :class:`ModelSet` (see the module docstring).

    Args:
        models: the server's models; each service's pair is swapped in place.
        run_dirs: the run directory of each service, in the order of ``models.services``.
        load: ``load(run_dir)``: the translator of a run, as the server loaded it at start (its
            precision, device and default beam).
        service_for: ``service_for(translator, version)``: the service of a newly loaded model, as the
            server builds its services (its limits, its memory).
    """

    def __init__(self, models: ModelSet, run_dirs: Sequence[str | Path], load: Callable[[Path], Translator],
                 service_for: Callable[[Translator, ModelVersion], TranslationService]) -> None:
        if len(run_dirs) != len(models.services):
            raise ValueError("one run directory per model")
        self.models, self.load, self.service_for = models, load, service_for
        self.runs = {pair_name(s): Path(d) for s, d in zip(models.services, run_dirs)}
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, set when it starts
        self._lock: asyncio.Lock | None = None
        self._retiring: set[asyncio.Task] = set()

    async def reload(self, run: str | Path | None = None, pair: str | None = None) -> list[Reloaded]:
        """Load ``run`` (or the run directory of ``pair``, or of every pair when neither is
        given) and swap it in. A :class:`ReloadFailed` names what failed (every pair is tried; the
        others are swapped); nothing is swapped for a pair whose load failed."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one reload at a time: two would race for the same pair
            if pair is not None and pair.lower() not in self.runs:
                raise ReloadFailed(f"this server serves no {pair} model: it serves {', '.join(self.runs)}")
            if run is not None:
                jobs = [(pair.lower() if pair else None, Path(run))]
            elif pair is not None:
                jobs = [(pair.lower(), self.runs[pair.lower()])]
            else:
                jobs = list(self.runs.items())
            done, failed = [], []
            for wanted, run_dir in jobs:
                try:
                    done.append(await self._swap(wanted, run_dir))
                except ReloadFailed as err:
                    failed.append(str(err))
                    log.error("transformer serve: %s", err)
            if failed:
                raise ReloadFailed("; ".join(failed) + (
                    f" (reloaded: {', '.join(d.pair for d in done)})" if done else ""))
            return done

    async def _swap(self, wanted: str | None, run_dir: Path) -> Reloaded:
        start = time.perf_counter()
        try:
            translator, version = await _off_the_loop(self._prepare, run_dir)
        except Exception as err:  # whatever a damaged run raises, the old model stays
            raise ReloadFailed(f"reload{f' of {wanted}' if wanted else ''} from {run_dir} failed, the model served before is "
                               f"kept: {_one_line(err)}") from None
        new = self.service_for(translator, version)
        pair = pair_name(new)
        if wanted is not None and pair != wanted:
            raise ReloadFailed(f"reload of {wanted} from {run_dir} failed, the model served before is kept: the run "
                               f"translates {pair}")
        if pair not in self.runs:
            raise ReloadFailed(f"reload from {run_dir} failed, the model served before is kept: the run translates "
                               f"{pair}, and this server serves {', '.join(self.runs)}")
        old = self.models.swap(new)  # one step of the event loop: no request sees half of it
        self.runs[pair] = run_dir
        task = asyncio.get_running_loop().create_task(self._retire(old))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        done = Reloaded(pair, str(run_dir), version, old.version, time.perf_counter() - start)
        log.info("transformer serve: reloaded %s from %s: %s (was %s) in %.1f s", pair, run_dir, version.label,
                 old.version.label if old.version else "unknown", done.seconds)
        return done

    def _prepare(self, run_dir: Path) -> tuple[Translator, ModelVersion]:
        """The translator of ``run_dir``, tried on one sentence, and its version (on a worker thread)."""
        translator = self.load(run_dir)  # first: it names a missing or incomplete run directory best
        version = model_version(run_dir)
        translator.translate([WARM_UP])  # a model that loads but cannot translate is refused here
        return translator, version

    @staticmethod
    async def _retire(old: TranslationService, poll_s: float = 0.05) -> None:
        """Close ``old``'s batcher once no request uses it (those that had it finish on it)."""
        await asyncio.sleep(poll_s)  # requests routed to it in the step before the swap get to start
        while old.busy():
            await asyncio.sleep(poll_s)
        await old.close()

    def reload_soon(self) -> None:
        """Reload every pair from its run directory, from a signal handler: scheduled on the server's
        loop; the outcome goes to the log."""
        loop = self.loop
        if loop is None or loop.is_closed():
            log.warning("transformer serve: SIGHUP before the server started: nothing reloaded")
            return
        loop.call_soon_threadsafe(self._reload_logged)

    def _reload_logged(self) -> None:
        async def run() -> None:
            try:
                await self.reload()
            except ReloadFailed:
                pass  # each failure is logged where it happened
        task = asyncio.get_running_loop().create_task(run())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        """Stop what is left of reloads (the app's shutdown): the old services still draining are closed."""
        for task in list(self._retiring):
            task.cancel()
        await asyncio.gather(*self._retiring, return_exceptions=True)


class _ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    run: str | None = None
    pair: str | None = None


def admin_router(reloader: Reloader, admin_key: str | None):
    """``POST /admin/reload`` on the native API: ``{"run": PATH, "pair": "fr-en"}`` (both optional;
    neither: every pair from its run directory), with the ``X-Admin-Key`` header. Without an admin
    key the route answers 403 ``admin_disabled``; a missing or wrong key 403 ``invalid_admin_key``;
    a failed reload 422 ``reload_failed`` (the old models keep serving)."""
    from transformer.serve.middleware import error_json
    from transformer.serve.routes import NATIVE

    router = NATIVE.router()
    expected = admin_key.encode("utf-8") if admin_key else None

    @router.post("/admin/reload", include_in_schema=False)
    async def reload(request: Request) -> JSONResponse:
        if expected is None:
            return error_json(403, "admin_disabled", "reloading through the API is off: start the server with "
                              "--admin-key or --admin-key-file")
        given = request.headers.get("x-admin-key", "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, expected):  # constant time: the key is not guessed a byte at a time
            return error_json(403, "invalid_admin_key", "a valid admin key is needed (X-Admin-Key header)")
        raw = await request.body()
        try:
            asked = _ReloadRequest.model_validate_json(raw) if raw.strip() else _ReloadRequest()
        except ValidationError as err:
            problem = err.errors()[0]
            where = ".".join(map(str, problem.get("loc", ()))) or "body"
            return error_json(422, "invalid_request", f"{where}: {problem.get('msg', 'invalid')}")
        try:
            done = await reloader.reload(asked.run, asked.pair)
        except ReloadFailed as err:
            return error_json(422, "reload_failed", str(err))
        return JSONResponse({"reloaded": [d.to_dict() for d in done]})

    return router
