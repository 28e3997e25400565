"""The parsers of ``transformer import-hf`` and ``transformer export``.

Building them imports nothing heavy, and none of the ``interop`` extra: ``--help`` works without
it. The handlers (``transformer.interop.cli``) are imported when the command runs; a converter
whose package is missing then names the extra and its install command.
"""

from __future__ import annotations

import argparse

from transformer.interop._common import CTRANSLATE2_TYPES

FORMATS = ("hf", "ctranslate2", "onnx", "argos")


def register_interop_commands(sub: argparse._SubParsersAction) -> None:
    """Add the ``import-hf`` and ``export`` subcommands."""
    p = sub.add_parser(
        "import-hf",
        help="convert a Hugging Face Marian (opus-mt) model, a directory or a name on the Hub, into a run directory",
        description="Read a MarianMTModel (config.json, model.safetensors or pytorch_model.bin, source.spm, "
        "target.spm, vocab.json; or a directory 'transformer export --format hf' wrote) and write a run directory "
        "that translate, evaluate, attend and serve use. MODEL is a directory, or a model name on the Hugging Face "
        "Hub (Helsinki-NLP/opus-mt-fr-en), fetched into the Hub cache (HF_HUB_CACHE or HF_HOME; HF_HUB_OFFLINE=1 "
        "uses only the cache): only the config, tokenizer and one weights file. OUT_RUN_DIR must not exist.",
    )
    p.add_argument("source", metavar="MODEL", help="a Marian model directory, or a model name on the Hugging Face Hub")
    p.add_argument("out", metavar="OUT_RUN_DIR", help="the run directory to create")
    p.add_argument("--revision", metavar="REV",
                   help="with a model name: the branch, tag or commit hash to fetch (default: main); the run "
                   "records the commit it got")
    p.set_defaults(handler="transformer.interop.cli:import_hf_command")

    p = sub.add_parser(
        "export",
        help="export a run directory to Hugging Face (MarianMTModel), CTranslate2, ONNX or Argos Translate",
        description="Write RUN_DIR's model in another format into OUT (which must not exist): 'hf' a "
        "MarianMTModel directory, 'ctranslate2' a CTranslate2 model directory, 'onnx' encoder.onnx and a "
        "one-step decoder_step.onnx with key/value cache, 'argos' an OUT.argosmodel package that Argos "
        "Translate and LibreTranslate install (a CTranslate2 model and the BPE tokenizer as a SentencePiece "
        "model, refused where that model would segment a sample text differently from ours).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--format", required=True, choices=FORMATS, dest="fmt")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--precision", choices=tuple(CTRANSLATE2_TYPES),
                   help="the weights' number format, as translate --precision names it (--format ctranslate2 "
                   "and argos; default: fp32, as trained): fp32, bf16, int8 and fp16 are CTranslate2's float32, "
                   "bfloat16, int8 and float16; int8_float32, int8_float16, int8_bfloat16 and int16 are "
                   "CTranslate2's types of those names, which only CTranslate2 runs")
    argos = p.add_argument_group("--format argos")
    argos.add_argument("--src-lang", metavar="CODE",
                       help="the source language's ISO 639 code (default: the run's data.src_lang; required "
                       "where the run does not record it)")
    argos.add_argument("--tgt-lang", metavar="CODE", help="the target language's code (default: data.tgt_lang)")
    argos.add_argument("--package-version", default="1.0", metavar="VERSION",
                       help="the package's version in metadata.json (default: 1.0)")
    argos.add_argument("--sentence-model", metavar="FILE.onnx",
                       help="a MiniSBD sentence-splitter model to put in the package, so that Argos Translate "
                       "splits sentences without fetching one (default: none; Argos fetches MiniSBD's model "
                       "of the source language on first use)")
    argos.add_argument("--check-text", metavar="FILE",
                       help="more texts (UTF-8, one a line) to check the converted tokenizer on, besides the "
                       "vocabulary's words and built-in probe sentences")
    p.set_defaults(handler="transformer.interop.cli:export_command")
