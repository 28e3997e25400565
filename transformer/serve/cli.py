"""``transformer serve RUN_DIR [RUN_DIR ...]``: the translation API and web page, run by uvicorn.

    transformer serve runs/demo [runs/other-pair ...] [--host 127.0.0.1] [--port 8000] [--max-batch-size 32] [--timeout 30] ...

The address is bound first (a busy port is one line on stderr, exit status 3, before the model
is loaded); then the model is loaded once and uvicorn serves the FastAPI app of
:mod:`transformer.serve.app` through the connection guards of :mod:`transformer.serve.protocol`
(deadlines for request heads and bodies, a cap on connections, a header size limit). The
"listening on" line is printed once the server listens. On SIGTERM the server stops accepting
connections, closes idle and stalled ones, lets the requests in flight finish (at most
--shutdown-grace seconds), prints what it finished and dropped, and the process exits 0; Ctrl-C
(SIGINT) stops it the same way, then exits 130 as an interrupted command. Either way, a worker
thread still busy half a second after the grace (a file being parsed) does not keep the process
alive: it ends at once with its status. SIGHUP reloads every model from its run directory
without a restart (:mod:`transformer.serve.reload`; ``POST /admin/reload`` with ``--admin-key``
does it over HTTP). The command's parser is in ``cli_args.py``.
"""

from __future__ import annotations

import argparse
import errno
import signal
import socket
import sys
from pathlib import Path

from transformer.errors import UserError
from transformer.serve.cli_args import CONNECTION_OPTIONS, LIMIT_OPTIONS
from transformer.serve.limits import ConnectionLimits, ServeLimits
from transformer.cuda import decoding as cuda_decoding
from transformer.inference_precision import resolve_device


def libretranslate_options(args: argparse.Namespace):
    """The LibreTranslate API's set-up from the command line (keys read, suggestions file opened):
    a one-line UserError naming the option for a bad one."""
    from transformer.serve.access import AccessPolicy, KeyRing, KeysFileError
    from transformer.serve.libretranslate import LibreTranslateOptions
    from transformer.serve.libretranslate.suggestions import SuggestionStore, SuggestionStoreError

    if (args.require_api_key or args.require_api_key_origin) and not args.api_keys:
        raise UserError("--require-api-key and --require-api-key-origin need --api-keys FILE")
    for option, value in (("--req-limit", args.req_limit), ("--daily-req-limit", args.daily_req_limit),
                          ("--char-limit", args.char_limit)):
        if value < 1 and value != -1:
            raise UserError(f"{option} must be a positive number or -1 (no limit), got {value}")
    if args.req_flood_threshold < 0:
        raise UserError(f"--req-flood-threshold must be >= 0, got {args.req_flood_threshold}")
    if args.frontend_timeout < 0:
        raise UserError(f"--frontend-timeout must be >= 0, got {args.frontend_timeout}")
    try:
        policy = AccessPolicy(req_limit=args.req_limit, daily_req_limit=args.daily_req_limit,
                              char_limit=args.char_limit, require_key=args.require_api_key,
                              key_origin=args.require_api_key_origin, get_key_link=args.get_api_key_link,
                              ban_threshold=args.req_flood_threshold)
    except UserError as err:
        raise UserError(f"--require-api-key-origin: {err}" if "key_origin" in str(err) else str(err)) from None
    try:
        keys = KeyRing.from_file(args.api_keys, policy)
    except KeysFileError as err:
        raise UserError(f"--api-keys: {err}") from None
    try:
        suggestions = SuggestionStore(args.suggestions, max_chars=args.max_chars,
                                      max_bytes=args.max_suggestions_bytes) if args.suggestions else None
    except SuggestionStoreError as err:
        raise UserError(f"--suggestions: {err}") from None
    return LibreTranslateOptions(keys=keys, suggestions=suggestions, files=not args.disable_files_translation,
                                 frontend_source=args.frontend_language_source.lower(),
                                 frontend_target=args.frontend_language_target,
                                 frontend_timeout_ms=args.frontend_timeout)


def server_memory(args: argparse.Namespace):
    """The translation memory of ``--tm`` opened (None without it): a one-line UserError for a
    missing or damaged one, or a --tm-* option without --tm."""
    from transformer.memory import TMError, TranslationMemory
    from transformer.serve.memory import SUGGESTIONS_PER_MINUTE, ServerMemory
    from transformer.translate.tm import DEFAULT_THRESHOLD

    if args.tm is None:
        if (args.tm_threshold is not None or args.tm_auto_accept or args.tm_suggest_limit is not None
                or args.tm_constraints):
            raise UserError("--tm-threshold, --tm-auto-accept, --tm-suggest-limit and --tm-constraints are for --tm "
                            "PATH, a translation memory")
        return None
    if args.suggestions:
        raise UserError("--suggestions and --tm both take /suggest's suggestions: give one (with --tm they become "
                        "pending entries of the memory)")
    if not Path(args.tm).exists():
        raise UserError(f"no translation memory at {args.tm}: `transformer tm import FILE --tm {args.tm} --src-lang "
                        "CODE --tgt-lang CODE` makes one")
    threshold = DEFAULT_THRESHOLD if args.tm_threshold is None else args.tm_threshold
    limit = SUGGESTIONS_PER_MINUTE if args.tm_suggest_limit is None else args.tm_suggest_limit
    try:
        opened = TranslationMemory(args.tm)
    except TMError as err:
        raise UserError(f"--tm: {err}") from None
    try:
        return ServerMemory(opened, threshold, auto_accept=args.tm_auto_accept, suggestions_per_minute=limit,
                            constraints=args.tm_constraints)
    except UserError:
        opened.close()
        raise


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def stop_message(signal_name: str, stats, grace: float) -> str:
    """The line printed when the server stopped: what it finished and what it dropped, as counted."""
    closed = stats.closed_after_answer
    parts = [f"finished {_plural(stats.finished, 'request')} in flight",
             f"closed {_plural(closed, 'connection')} after {'its answer' if closed == 1 else 'their answers'}",
             f"dropped {stats.dropped_idle} idle and {_plural(stats.dropped_stalled, 'stalled connection')}"]
    if stats.cut:
        parts.append(f"answered 503 to {_plural(stats.cut, 'request')} still running after the {grace:g} s grace")
    if stats.went_away:
        parts.append(f"{_plural(stats.went_away, 'client')} in flight went away before the answer")
    took = f" in {stats.shutdown_s:.1f} s" if stats.shutdown_s is not None else ""
    return f"transformer serve: stopped by {signal_name}{took}: " + ", ".join(parts)


def _bind_error(err: OSError, host: str, port: int) -> tuple[str, int]:
    """A one-line message and exit status for a failure to bind ``host:port``."""
    where = f"{host}:{port}"
    if err.errno == errno.EADDRINUSE:
        return (f"cannot listen on {where}: the address is already in use (another server is running there?): "
                "stop it or choose another --port"), 3
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"cannot listen on {where}: permission denied (ports below 1024 need privileges): choose another --port", 2
    if err.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {where}: {host} is not an address of this machine: check --host", 2
    if isinstance(err, socket.gaierror):
        return f"cannot listen on {where}: unknown host {host!r} ({err.strerror}): check --host", 2
    return f"cannot listen on {where}: {err.strerror or err}", 3


def run_serve(args: argparse.Namespace) -> int:
    """Handler of ``transformer serve``: load the model, build the app, run uvicorn until SIGTERM/SIGINT.

    Without the ``serve`` extra its first imports fail, and the command line names the extra
    (``transformer.errors.MissingExtraError``)."""
    import uvicorn

    from transformer.serve.app import create_app
    from transformer.serve.reload import ReloadOptions, read_admin_key
    from transformer.translate.translator import load_translator

    from transformer.serve.protocol import ConnectionStats, GuardedServer, bind_sockets, uvicorn_config

    pivot = None if args.pivot.lower() == "none" else args.pivot.lower()
    if len(set(map(str, (Path(d).resolve() for d in args.run_dirs)))) != len(args.run_dirs):
        raise UserError("a run directory is given twice: each model is loaded once")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in 0..65535, got {args.port}")
    precision = args.precision
    if args.max_batch_size is None:
        on_gpu = resolve_device(args.device, precision=precision).type == "cuda"
        args.max_batch_size = cuda_decoding.SERVE_BATCH_SIZE if on_gpu else ServeLimits().max_batch_size
    limits = ServeLimits(**{name: getattr(args, name) for name in LIMIT_OPTIONS})
    try:
        connection_limits = ConnectionLimits(**{name: getattr(args, name) for name in CONNECTION_OPTIONS})
    except UserError as err:  # name the option, not the field
        message = str(err)
        name = next((n for n in CONNECTION_OPTIONS if message.startswith(n + " ")), None)
        raise UserError(message if name is None else CONNECTION_OPTIONS[name][0] + message[len(name):]) from None
    if not 1 <= args.beam <= limits.max_beam_size:
        raise UserError(f"--beam must be in 1..{limits.max_beam_size} (--max-beam-size), got {args.beam}")
    _check_forwarded_allow_ips(args.forwarded_allow_ips)
    lt_options = libretranslate_options(args)
    admin_key = read_admin_key(args.admin_key, args.admin_key_file)
    memory = server_memory(args)
    _raise_open_files_limit(connection_limits.max_connections)
    try:  # bind before loading the model: a busy port is one line, at once
        sockets = bind_sockets(args.host, args.port)
    except OSError as err:
        message, status = _bind_error(err, args.host, args.port)
        print(f"transformer serve: error: {message}", file=sys.stderr, flush=True)
        if memory is not None:
            memory.close()
        return status
    port = sockets[0].getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    interrupted = False
    try:
        run_dirs = [Path(d) for d in args.run_dirs]

        def load(run_dir: Path):  # at start, and again on a reload
            return load_translator(run_dir, precision=precision, device=args.device).with_decoding(beam_size=args.beam)

        translators = [load(run_dir) for run_dir in run_dirs]  # each model loaded once
        reload = ReloadOptions(run_dirs, load, admin_key)
        if len(translators) == 1:
            translator = translators[0]
            app = create_app(translator, limits, src_lang=translator.src_lang, tgt_lang=translator.tgt_lang,
                             pivot=pivot, libretranslate_options=lt_options, reload=reload, memory=memory)
        else:
            app = create_app(translators, limits, pivot=pivot, libretranslate_options=lt_options,
                             reload=reload, memory=memory)
        stats = ConnectionStats()
        served = ", ".join(f"{d} ({t.src_lang or '?'} -> {t.tgt_lang or '?'})" for d, t in zip(run_dirs, translators))
        through = [f"{p.source} -> {p.target}" for p in _pivot_pairs(app)]

        def listening() -> None:
            if through:
                print(f"transformer serve: through {pivot}: {', '.join(through)}", flush=True)
            print(f"transformer serve: {served} listening on http://{host}:{port}/", flush=True)

        server = GuardedServer(uvicorn_config(app, connection_limits, stats, log_level=args.log_level,
                                              forwarded_allow_ips=args.forwarded_allow_ips),
                               connection_limits, stats, on_started=listening)
        # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler that
        # was installed before it: with this one the process ends with status 0 instead of dying by it.
        stopped: list[int] = []
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
        reloader = app.state.reloader
        hangup = signal.signal(signal.SIGHUP, lambda signum, frame: reloader.reload_soon()) \
            if hasattr(signal, "SIGHUP") else None
        try:
            server.run(sockets=sockets)
        except KeyboardInterrupt:  # SIGINT, raised again by uvicorn after its graceful shutdown
            if stats.shutdown_s is not None:
                print(stop_message("SIGINT", stats, connection_limits.shutdown_grace_s), flush=True)
            interrupted = True
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
            if hangup is not None:
                signal.signal(signal.SIGHUP, hangup)
    finally:
        for sock in sockets:
            sock.close()
        if lt_options.suggestions is not None:
            lt_options.suggestions.close()
        if memory is not None:
            memory.close()
        if interrupted:  # as after SIGTERM, with the status of an interrupted command
            _exit_if_work_remains(130, note="transformer serve: interrupted")
    if stopped:
        print(stop_message("SIGTERM", stats, connection_limits.shutdown_grace_s), flush=True)
    _exit_if_work_remains(0)
    return 0


def _exit_if_work_remains(status: int, wait_s: float = 0.5, note: str | None = None) -> None:
    """End the process now with ``status`` if a worker thread is still busy after the shutdown (a
    file being parsed, a decode between its steps): the interpreter would wait for it at exit,
    long after --shutdown-grace; nobody waits for its result any more. ``note``: a line for
    standard error before it ends (what the command line would have said)."""
    import os
    import threading
    import time

    deadline = time.monotonic() + wait_s
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        if note:
            print(note, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _check_forwarded_allow_ips(value: str | None) -> None:
    """A one-line UserError for a --forwarded-allow-ips entry that is not an address, a network or *."""
    import ipaddress

    if value is None:
        return
    for entry in (e.strip() for e in value.split(",")):
        if entry == "*":
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise UserError(f"--forwarded-allow-ips: {entry[:60]!r} is not an IP address, a network (10.0.0.0/8) "
                            "or *") from None


def _pivot_pairs(app) -> list:
    """The language pairs the app translates through its pivot language."""
    models = app.state.models
    return [route for s in models.languages() for t in models.targets(s)
            if (route := models.route(s, t)).via is not None] if models.primary.src_lang else []


def _raise_open_files_limit(max_connections: int) -> None:
    """Make room for ``max_connections`` sockets and the server's own files: raise the soft limit
    on open files towards the hard one if needed; refuse a cap the hard limit cannot hold (an
    accept that fails for want of descriptors is logged by asyncio with a traceback)."""
    try:
        import resource
    except ImportError:  # Windows has no resource module
        return
    needed = max_connections + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise UserError(f"--max-connections {max_connections} needs about {needed} open files, more than this "
                        f"process may have ({hard}, ulimit -Hn): lower --max-connections to {max(1, hard - 256)} "
                        "or raise the limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
