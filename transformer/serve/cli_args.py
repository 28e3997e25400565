"""The parser of ``transformer serve``: its options, one per limit of :mod:`transformer.serve.limits`.

Building it imports nothing heavy (no torch, no FastAPI): ``transformer serve --help`` works
without the ``serve`` extra, and the handler, ``transformer.serve.cli:run_serve``, is imported
when the command runs (a missing extra is then one line naming it).
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from transformer.cuda import decoding as cuda_decoding
from transformer.inference_precision import DEVICES, add_precision_option
from transformer.serve.limits import PIVOT, ConnectionLimits, ServeLimits
from transformer.translate.cli_args import DEVICE_HELP

_DEFAULTS = ServeLimits()
LIMIT_OPTIONS = {  # field -> (option, type, help)
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
    "max_glossary_work": ("--max-glossary-work", int, "glossary terms found in a request's sentences (each "
                          "sentence's counted) times its beam_size: the cost of constrained search"),
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
    "max_stored_files": ("--max-stored-files", int, "translated files kept for download at once; one more "
                         "removes the expired ones, then the oldest"),
    "max_stored_bytes": ("--max-stored-bytes", int, "bytes of the translated files kept for download at once; "
                         "beyond, the expired ones are removed, then the oldest"),
    "max_suggestions_bytes": ("--max-suggestions-bytes", int, "the size the --suggestions file may grow to "
                              "(/suggest answers 507 beyond)"),
    "max_uploads": ("--max-uploads", int, "files uploaded to /translate_file in flight at once (503 with "
                    "Retry-After beyond)"),
    "max_upload_bytes": ("--max-upload-bytes", int, "bytes of the uploads in flight together (503 with Retry-After "
                         "beyond; an idle server takes any one upload)"),
}
assert set(LIMIT_OPTIONS) == {f.name for f in fields(ServeLimits)}

_CONNECTION_DEFAULTS = ConnectionLimits()
CONNECTION_OPTIONS = {  # field -> (option, type, help)
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
assert set(CONNECTION_OPTIONS) == {f.name for f in fields(ConnectionLimits)}


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
    p.add_argument("--beam", type=int, default=4, metavar="N",
                   help="default beam size of requests (default: 4, the paper's; 1 = greedy)")
    add_precision_option(p, what="decode")
    p.add_argument("--device", choices=DEVICES, default="auto", help=DEVICE_HELP)
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default: info)")
    for name, (option, kind, what) in LIMIT_OPTIONS.items():
        if name == "max_batch_size":  # a GPU wants larger model calls: the default follows --device
            p.add_argument(option, dest=name, type=kind, default=None,
                           help=f"{what} (default: {_DEFAULTS.max_batch_size} on a CPU, "
                           f"{cuda_decoding.SERVE_BATCH_SIZE} on a GPU)")
            continue
        p.add_argument(option, dest=name, type=kind, default=getattr(_DEFAULTS, name),
                       help=f"{what} (default: {getattr(_DEFAULTS, name)})")
    connections = p.add_argument_group("connections", "bounds on slow, idle and abusive clients and on the "
                                       "shutdown (see docs/serving.md)")
    for name, (option, kind, what) in CONNECTION_OPTIONS.items():
        connections.add_argument(option, dest=name, type=kind, default=getattr(_CONNECTION_DEFAULTS, name),
                                 metavar="SECONDS" if name.endswith("_s") else "N",
                                 help=f"{what} (default: {getattr(_CONNECTION_DEFAULTS, name):g})")
    connections.add_argument("--forwarded-allow-ips", metavar="IPS", default=None,
                             help="the reverse proxies (comma-separated addresses or networks, * for any) whose "
                             "X-Forwarded-For and X-Forwarded-Proto headers name the client; without it the "
                             "client is the socket's address and those headers are ignored (default: none)")
    lt = p.add_argument_group("LibreTranslate API", "API keys, request limits, suggestions, files and the web page's "
                              "defaults of the LibreTranslate routes (see docs/serving.md)")
    lt.add_argument("--api-keys", metavar="FILE", help="the API keys and their own limits, one key a line (see "
                    "docs/serving.md); without it, a request's api_key is ignored")
    lt.add_argument("--require-api-key", action="store_true", help="every request to /translate, /detect, "
                    "/translate_file, /suggest, /v1/translate and /v1/attention needs a valid key (needs --api-keys)")
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
    tm = p.add_argument_group("translation memory", "a memory of accepted translations looked up before the models "
                              "translate, which /suggest fills (see docs/memory.md)")
    tm.add_argument("--tm", metavar="PATH", help="a translation memory (`transformer tm import` makes one): a sentence "
                    "with an accepted entry of its model's language pair, the same source once whitespace is "
                    "normalised, is translated as that entry on every route (the native API marks it: memory; "
                    "LibreTranslate's answers have a memory field), and the others get their fuzzy matches as "
                    "memory_alternatives; POST /suggest checks each suggestion and keeps those that pass as pending "
                    "entries (instead of --suggestions)")
    tm.add_argument("--tm-threshold", type=float, default=None, metavar="SIMILARITY",
                    help="the lowest similarity of a fuzzy match given as memory_alternatives, above 0 and at most 1 "
                    "(default: 0.75)")
    tm.add_argument("--tm-constraints", action="store_true", help="a sentence the model is unsure of (mean "
                    "log-probability per token below -0.8) is translated again, the words it shares with its best "
                    "fuzzy match as that entry's translation has them (aligned by the model's attention; glossary "
                    "terms of the request's beam search, after its own glossary's; not with beam_size 1); answers "
                    "list them as memory_terms")
    tm.add_argument("--tm-auto-accept", action="store_true", help="a suggestion that passes every check is accepted "
                    "at once (translated as it from then on), not left pending for `transformer tm review`")
    tm.add_argument("--tm-suggest-limit", type=int, default=None, metavar="N",
                    help="suggestions per minute per API key (per address, without a key); default: 10")
    lt.add_argument("--disable-files-translation", action="store_true", help="no /translate_file and /download_file")
    lt.add_argument("--frontend-language-source", default="auto", metavar="CODE",
                    help="the source language LibreTranslate's web page starts with (default: auto)")
    lt.add_argument("--frontend-language-target", default=None, metavar="CODE",
                    help="the target language LibreTranslate's web page starts with (default: the first model's)")
    lt.add_argument("--frontend-timeout", type=int, default=500, metavar="MS",
                    help="milliseconds LibreTranslate's web page waits after typing before it translates "
                    "(default: 500)")
    admin = p.add_argument_group("reloading", "a newer run swapped in without a restart: SIGHUP reloads every model "
                                 "from its RUN_DIR; POST /admin/reload (X-Admin-Key header) reloads one pair or "
                                 "every one, from its RUN_DIR or another run of its pair; requests in flight finish "
                                 "on the model they started on, and a run that fails to load leaves the old model "
                                 "serving (see docs/serving.md)")
    admin.add_argument("--admin-key", metavar="KEY", help="the key of POST /admin/reload (at least 16 characters; "
                       "visible to other users of this machine in the process list: prefer --admin-key-file); "
                       "without either, the route answers 403")
    admin.add_argument("--admin-key-file", metavar="FILE", help="a file holding the admin key on one line")
    p.set_defaults(handler="transformer.serve.cli:run_serve")
    return p
