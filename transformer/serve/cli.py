"""``transformer serve RUN_DIR [RUN_DIR ...]``: the translation API and web page, run by uvicorn.

    transformer serve runs/demo [runs/other-pair ...] [--host 127.0.0.1] [--port 8000] [--max-batch-size 32] [--timeout 30] ...

The address is bound first (a busy port is one line on stderr, exit status 3, before the model
is loaded); then the model is loaded once and uvicorn serves the FastAPI app of
:mod:`transformer.serve.app` through the connection guards of :mod:`transformer.serve.protocol`
(deadlines for request heads and bodies, a cap on connections, a header size limit). The
"listening on" line is printed once the server listens. On SIGTERM the server stops accepting
connections, closes idle and stalled ones, lets the requests in flight finish (at most
--shutdown-grace seconds), prints what it finished and dropped, and the process exits 0; Ctrl-C
(SIGINT) stops it the same way, then exits 130 as an interrupted command.
"""

from __future__ import annotations

import argparse
import errno
import signal
import socket
import sys
from dataclasses import fields
from pathlib import Path

from transformer.errors import UserError
from transformer.serve.limits import ConnectionLimits, ServeLimits
from transformer.serve.models import PIVOT
from transformer.cuda import decoding as cuda_decoding
from transformer.precision import DEVICES, add_precision_option, precision_option, resolve_device
from transformer.translate.cli import DEVICE_HELP

_DEFAULTS = ServeLimits()
_OPTIONS = {  # field -> (option, type, help)
    "max_chars": ("--max-chars", int, "characters (Unicode code points) per text; a text may hold paragraphs"),
    "max_texts": ("--max-texts", int, "texts per request (/v1/translate; a list in LibreTranslate's q)"),
    "max_sentences": ("--max-sentences", int, "sentences per request, all its texts together"),
    "max_body_bytes": ("--max-body-bytes", int, "request body size in bytes (413 beyond)"),
    "max_input_tokens": ("--max-input-tokens", int, "source tokens per model input; a longer sentence is "
                         "translated in pieces (cut at clause punctuation, then between words) with a warning"),
    "max_output_tokens": ("--max-output-tokens", int, "the largest max_length a request may ask for"),
    "max_beam_size": ("--max-beam-size", int, "the largest beam_size and n_best a request may ask for"),
    "max_alternatives": ("--max-alternatives", int, "the most alternatives (distinct translations besides the "
                         "translation) a request may ask for; 0: none. A text has at most beam_size - 1"),
    "max_glossary_terms": ("--max-glossary-terms", int, "glossary terms (source and target pairs) per request"),
    "max_batch_size": ("--max-batch-size", int, "sentences of one or more requests merged into one model call "
                       "(1: no dynamic batching); a request with more runs in calls of its own of up to "
                       "max(this, --max-texts) sentences"),
    "batch_wait_ms": ("--batch-wait-ms", float, "milliseconds the batcher waits for more requests"),
    "max_queue": ("--max-queue", int, "sentences allowed to wait for the model; beyond it requests get 503 at once"),
    "timeout_s": ("--timeout", float, "seconds before a request gets 503 instead of its translation"),
    "confidence_threshold": ("--confidence-threshold", float, "the web page marks the sentences whose confidence "
                             "is below this (0 to 1) with a dotted underline and 'check this sentence'; where "
                             "RUN_DIR is calibrated (transformer calibrate)"),
    "max_file_bytes": ("--max-file-bytes", int, "the size of a file sent to /translate_file (413 beyond)"),
    "max_file_sentences": ("--max-file-sentences", int, "sentences in a file sent to /translate_file (400 beyond); "
                           "they are translated a model call at a time, between other requests"),
    "file_ttl_s": ("--file-ttl", float, "seconds a translated file can be downloaded (/download_file) before it "
                   "is deleted"),
}
assert set(_OPTIONS) == {f.name for f in fields(ServeLimits)}

_CONNECTION_DEFAULTS = ConnectionLimits()
_CONNECTION_OPTIONS = {  # field -> (option, type, help)
    "max_connections": ("--max-connections", int, "connections open at once; a connection beyond them is answered "
                        "503 at once and closed"),
    "header_timeout_s": ("--header-timeout", float, "seconds a client has to send a request's line and headers "
                         "(from the connection's opening or its previous response): then 408 and closed (closed "
                         "quietly if it sent nothing)"),
    "body_timeout_s": ("--body-timeout", float, "seconds a client has to send a request's body once its headers "
                       "are in: then 408 and closed"),
    "keep_alive_s": ("--keep-alive-timeout", float, "seconds an idle connection is kept open after a response"),
    "max_header_bytes": ("--max-header-bytes", int, "bytes of a request's line and headers together (431 beyond)"),
    "shutdown_grace_s": ("--shutdown-grace", float, "on SIGTERM, seconds the requests in flight get to finish "
                         "(idle and stalled connections are closed at once); a request still running then gets "
                         "503"),
}
assert set(_CONNECTION_OPTIONS) == {f.name for f in fields(ConnectionLimits)}


def register_serve_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand (handler in ``set_defaults(handler=...)``)."""
    p = subparsers.add_parser(
        "serve",
        help="serve a trained model over HTTP: a JSON API and a web page with its attention",
        description="Serve the models of one or more RUN_DIRs (one per language pair; a pair without a model of "
        "its own is translated through --pivot) over HTTP with uvicorn: POST /v1/translate (texts of any length: "
        "cut into sentences, translated, put back in their structure, with the sentence alignment), "
        "POST /v1/attention (one sentence of a text), GET /health, GET /v1/model, GET /v1/models, the LibreTranslate "
        "API (POST /translate, /detect, /translate_file, /suggest; GET /languages, /download_file/NAME, "
        "/frontend/settings, /spec), the OpenAPI schema at /openapi.json and a web page at /. The sentences "
        "of requests arriving within --batch-wait-ms are translated in the same model calls. Every limit below "
        "gives a 4xx JSON error when exceeded (503 for --max-queue and --timeout). See docs/serving.md. Needs the "
        "'serve' extra (fastapi, uvicorn).",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="run directory with config.json, model.safetensors and the tokenizer; several: one per "
                   "language pair (each run's data.src_lang and data.tgt_lang), the first being what a request "
                   "naming no languages gets")
    p.add_argument("--pivot", default=PIVOT, metavar="CODE",
                   help=f"a language pair without a model of its own is translated through this language when "
                   f"one model translates into it and another out of it (default: {PIVOT}; 'none': never)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    p.add_argument("--beam-size", type=int, default=4, help="default beam size of requests (default: 4, the paper's)")
    add_precision_option(p, what="decode")
    p.add_argument("--device", choices=DEVICES, default="auto", help=DEVICE_HELP)
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default: info)")
    for name, (option, kind, what) in _OPTIONS.items():
        if name == "max_batch_size":  # a GPU wants larger model calls: the default follows --device
            p.add_argument(option, dest=name, type=kind, default=None,
                           help=f"{what} (default: {_DEFAULTS.max_batch_size} on a CPU, "
                           f"{cuda_decoding.SERVE_BATCH_SIZE} on a GPU)")
            continue
        p.add_argument(option, dest=name, type=kind, default=getattr(_DEFAULTS, name),
                       help=f"{what} (default: {getattr(_DEFAULTS, name)})")
    connections = p.add_argument_group("connections", "bounds on slow, idle and abusive clients and on the "
                                       "shutdown (see docs/serving.md)")
    for name, (option, kind, what) in _CONNECTION_OPTIONS.items():
        connections.add_argument(option, dest=name, type=kind, default=getattr(_CONNECTION_DEFAULTS, name),
                                 metavar="SECONDS" if name.endswith("_s") else "N",
                                 help=f"{what} (default: {getattr(_CONNECTION_DEFAULTS, name):g})")
    lt = p.add_argument_group("LibreTranslate API", "API keys, request limits, suggestions, files and the web page's "
                              "defaults of the LibreTranslate routes (see docs/serving.md)")
    lt.add_argument("--api-keys", metavar="FILE", help="the API keys and their own limits, one key a line (see "
                    "docs/serving.md); without it, a request's api_key is ignored")
    lt.add_argument("--require-api-key", action="store_true", help="every LibreTranslate request needs a valid key "
                    "(needs --api-keys)")
    lt.add_argument("--require-api-key-origin", metavar="REGEX", help="a key is required, except from a web page "
                    "whose Origin header matches REGEX from its start (needs --api-keys)")
    lt.add_argument("--get-api-key-link", metavar="URL", help="where users get a key, named when one is required")
    lt.add_argument("--req-limit", type=int, default=-1, metavar="N",
                    help="requests per minute per client (per key, for a valid key); -1: none (default)")
    lt.add_argument("--daily-req-limit", type=int, default=-1, metavar="N",
                    help="requests per day per client; -1: none (default)")
    lt.add_argument("--char-limit", type=int, default=-1, metavar="N",
                    help="characters per text on the LibreTranslate routes; -1: none but --max-chars (default)")
    lt.add_argument("--req-flood-threshold", type=int, default=0, metavar="N",
                    help="a client refused for a limit N times within an hour is refused everything (403) until "
                    "then; 0: never (default)")
    lt.add_argument("--suggestions", metavar="FILE", help="POST /suggest appends the suggestions it takes to FILE "
                    "(JSON lines); without it, /suggest answers 403")
    lt.add_argument("--disable-files-translation", action="store_true", help="no /translate_file and /download_file")
    lt.add_argument("--frontend-language-source", default="auto", metavar="CODE",
                    help="the source language LibreTranslate's web page starts with (default: auto)")
    lt.add_argument("--frontend-language-target", default=None, metavar="CODE",
                    help="the target language LibreTranslate's web page starts with (default: the first model's)")
    lt.add_argument("--frontend-timeout", type=int, default=500, metavar="MS",
                    help="milliseconds LibreTranslate's web page waits after typing before it translates "
                    "(default: 500)")
    p.set_defaults(handler=run_serve)
    return p


def libretranslate_options(args: argparse.Namespace):
    """The LibreTranslate API's set-up from the command line (keys read, suggestions file opened):
    a one-line UserError naming the option for a bad one."""
    from transformer.serve.access import AccessPolicy, KeyRing, KeysFileError
    from transformer.serve.libretranslate import LibreTranslateOptions
    from transformer.serve.suggestions import SuggestionStore, SuggestionStoreError

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
        suggestions = SuggestionStore(args.suggestions, max_chars=args.max_chars) if args.suggestions else None
    except SuggestionStoreError as err:
        raise UserError(f"--suggestions: {err}") from None
    return LibreTranslateOptions(keys=keys, suggestions=suggestions, files=not args.disable_files_translation,
                                 frontend_source=args.frontend_language_source.lower(),
                                 frontend_target=args.frontend_language_target,
                                 frontend_timeout_ms=args.frontend_timeout)


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
    """Handler of ``transformer serve``: load the model, build the app, run uvicorn until SIGTERM/SIGINT."""
    try:
        import uvicorn

        from transformer.serve.app import create_app
    except ImportError as err:
        raise UserError("serving needs fastapi and uvicorn: "
                        f'pip install -c constraints.txt -e ".[serve]" ({err})') from None
    from transformer.translate.translator import load_translator

    from transformer.serve.protocol import ConnectionStats, GuardedServer, bind_sockets, uvicorn_config

    pivot = None if args.pivot.lower() == "none" else args.pivot.lower()
    if len(set(map(str, (Path(d).resolve() for d in args.run_dirs)))) != len(args.run_dirs):
        raise UserError("a run directory is given twice: each model is loaded once")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in 0..65535, got {args.port}")
    precision = precision_option(args)
    if args.max_batch_size is None:
        on_gpu = resolve_device(args.device, precision=precision).type == "cuda"
        args.max_batch_size = cuda_decoding.SERVE_BATCH_SIZE if on_gpu else _DEFAULTS.max_batch_size
    limits = ServeLimits(**{name: getattr(args, name) for name in _OPTIONS})
    try:
        connection_limits = ConnectionLimits(**{name: getattr(args, name) for name in _CONNECTION_OPTIONS})
    except UserError as err:  # name the option, not the field
        message = str(err)
        name = next((n for n in _CONNECTION_OPTIONS if message.startswith(n + " ")), None)
        raise UserError(message if name is None else _CONNECTION_OPTIONS[name][0] + message[len(name):]) from None
    if not 1 <= args.beam_size <= limits.max_beam_size:
        raise UserError(f"--beam-size must be in 1..{limits.max_beam_size} (--max-beam-size), got {args.beam_size}")
    lt_options = libretranslate_options(args)
    _raise_open_files_limit(connection_limits.max_connections)
    try:  # bind before loading the model: a busy port is one line, at once
        sockets = bind_sockets(args.host, args.port)
    except OSError as err:
        message, status = _bind_error(err, args.host, args.port)
        print(f"transformer serve: error: {message}", file=sys.stderr, flush=True)
        return status
    port = sockets[0].getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    try:
        run_dirs = [Path(d) for d in args.run_dirs]
        translators = []
        for run_dir in run_dirs:  # each model loaded once
            translator = load_translator(run_dir, precision=precision, device=args.device)
            translators.append(translator.with_decoding(beam_size=args.beam_size))
        if len(translators) == 1:
            translator = translators[0]
            app = create_app(translator, limits, src_lang=translator.src_lang, tgt_lang=translator.tgt_lang,
                             pivot=pivot, libretranslate_options=lt_options)
        else:
            app = create_app(translators, limits, pivot=pivot, libretranslate_options=lt_options)
        stats = ConnectionStats()
        served = ", ".join(f"{d} ({t.src_lang or '?'} -> {t.tgt_lang or '?'})" for d, t in zip(run_dirs, translators))
        through = [f"{p.source} -> {p.target}" for p in _pivot_pairs(app)]

        def listening() -> None:
            if through:
                print(f"transformer serve: through {pivot}: {', '.join(through)}", flush=True)
            print(f"transformer serve: {served} listening on http://{host}:{port}/", flush=True)

        server = GuardedServer(uvicorn_config(app, connection_limits, stats, log_level=args.log_level),
                               connection_limits, stats, on_started=listening)
        # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler that
        # was installed before it: with this one the process ends with status 0 instead of dying by it.
        stopped: list[int] = []
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
        try:
            server.run(sockets=sockets)
        except KeyboardInterrupt:  # SIGINT, raised again by uvicorn after its graceful shutdown
            if stats.shutdown_s is not None:
                print(stop_message("SIGINT", stats, connection_limits.shutdown_grace_s), flush=True)
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        for sock in sockets:
            sock.close()
        if lt_options.suggestions is not None:
            lt_options.suggestions.close()
    if stopped:
        print(stop_message("SIGTERM", stats, connection_limits.shutdown_grace_s), flush=True)
    return 0


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
