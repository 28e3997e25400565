"""``transformer serve RUN_DIR``: the translation API and web page, run by uvicorn.

    transformer serve runs/demo [--host 127.0.0.1] [--port 8000] [--max-batch-size 32] [--timeout 30] ...

The model is loaded once; uvicorn serves the FastAPI app of :mod:`transformer.serve.app`. On
SIGTERM uvicorn stops accepting connections, lets the requests in flight finish (at most 60 s), and
the process exits 0; Ctrl-C (SIGINT) does the same.
"""

from __future__ import annotations

import argparse
import signal
from dataclasses import fields
from pathlib import Path

from transformer.serve.limits import ServeLimits
from transformer.translate.cli import INT8_HELP

_DEFAULTS = ServeLimits()
_OPTIONS = {  # field -> (option, type, help)
    "max_chars": ("--max-chars", int, "characters (Unicode code points) per text; a text may hold paragraphs"),
    "max_texts": ("--max-texts", int, "texts per request (/v1/translate; a list in LibreTranslate's q)"),
    "max_sentences": ("--max-sentences", int, "sentences per request, all its texts together"),
    "max_body_bytes": ("--max-body-bytes", int, "request body size in bytes (413 beyond)"),
    "max_input_tokens": ("--max-input-tokens", int, "source tokens per sentence"),
    "max_output_tokens": ("--max-output-tokens", int, "the largest max_length a request may ask for"),
    "max_beam_size": ("--max-beam-size", int, "the largest beam_size and n_best a request may ask for"),
    "max_batch_size": ("--max-batch-size", int, "sentences of one or more requests merged into one model call "
                       "(1: no dynamic batching); a request with more runs in calls of its own of up to "
                       "max(this, --max-texts) sentences"),
    "batch_wait_ms": ("--batch-wait-ms", float, "milliseconds the batcher waits for more requests"),
    "max_queue": ("--max-queue", int, "sentences allowed to wait for the model; beyond it requests get 503 at once"),
    "timeout_s": ("--timeout", float, "seconds before a request gets 503 instead of its translation"),
}
assert set(_OPTIONS) == {f.name for f in fields(ServeLimits)}


def register_serve_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand (handler in ``set_defaults(handler=...)``)."""
    p = subparsers.add_parser(
        "serve",
        help="serve a trained model over HTTP: a JSON API and a web page with its attention",
        description="Serve the model of RUN_DIR over HTTP with uvicorn: POST /v1/translate (texts of any length: "
        "cut into sentences, translated, put back in their structure, with the sentence alignment), "
        "POST /v1/attention (one sentence of a text), GET /health, GET /v1/model, the LibreTranslate API "
        "(POST /translate, GET /languages), the OpenAPI schema at /openapi.json and a web page at /. The sentences "
        "of requests arriving within --batch-wait-ms are translated in the same model calls. Every limit below "
        "gives a 4xx JSON error when exceeded (503 for --max-queue and --timeout). See docs/serving.md. Needs the "
        "'serve' extra (fastapi, uvicorn).",
    )
    p.add_argument("run_dir", help="run directory with config.json, model.safetensors and the tokenizer")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    p.add_argument("--beam-size", type=int, default=4, help="default beam size of requests (default: 4, the paper's)")
    p.add_argument("--bf16", action="store_true", help="decode with a bfloat16 copy of the weights")
    p.add_argument("--int8", action="store_true", help=INT8_HELP)
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default: info)")
    for name, (option, kind, what) in _OPTIONS.items():
        p.add_argument(option, dest=name, type=kind, default=getattr(_DEFAULTS, name),
                       help=f"{what} (default: {getattr(_DEFAULTS, name)})")
    p.set_defaults(handler=run_serve)
    return p


def run_serve(args: argparse.Namespace) -> int:
    """Handler of ``transformer serve``: load the model, build the app, run uvicorn until SIGTERM/SIGINT."""
    try:
        import uvicorn

        from transformer.serve.app import create_app
    except ImportError as err:
        raise ValueError(f"serving needs fastapi and uvicorn: pip install -e '.[serve]' ({err})") from None
    from transformer.translate.translator import load_translator

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    limits = ServeLimits(**{name: getattr(args, name) for name in _OPTIONS})
    if not 1 <= args.beam_size <= limits.max_beam_size:
        raise ValueError(f"--beam-size must be in 1..{limits.max_beam_size} (--max-beam-size), got {args.beam_size}")
    run_dir = Path(args.run_dir)
    translator = load_translator(run_dir, bf16=args.bf16, int8=args.int8)
    translator = translator.with_decoding(beam_size=args.beam_size)
    src_lang, tgt_lang = translator.src_lang, translator.tgt_lang
    app = create_app(translator, limits, src_lang=src_lang, tgt_lang=tgt_lang)
    print(f"transformer serve: {run_dir} ({src_lang or '?'} -> {tgt_lang or '?'}) on http://{args.host}:{args.port}/",
          flush=True)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler that
    # was installed before it: with this one the process ends with status 0 instead of dying by it.
    stopped: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=60)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if stopped:
        print("transformer serve: stopped by SIGTERM after finishing the requests in flight", flush=True)
    return 0
