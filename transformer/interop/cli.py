"""``transformer import-hf`` and ``transformer export``: thin commands over ``transformer.interop``."""

from __future__ import annotations

import argparse

FORMATS = ("hf", "ctranslate2", "onnx")
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def register_interop_commands(sub: argparse._SubParsersAction) -> None:
    """Add the ``import-hf`` and ``export`` subcommands."""
    p = sub.add_parser(
        "import-hf",
        help="convert a Hugging Face Marian (opus-mt) model directory into a run directory",
        description="Read a MarianMTModel directory saved by transformers (config.json, model.safetensors or "
        "pytorch_model.bin, source.spm, target.spm, vocab.json) and write a run directory that translate, "
        "evaluate, attend and serve use. OUT_RUN_DIR must not exist.",
    )
    p.add_argument("directory", metavar="DIR", help="the Marian model directory")
    p.add_argument("out", metavar="OUT_RUN_DIR", help="the run directory to create")
    p.set_defaults(handler=_import_hf)

    p = sub.add_parser(
        "export",
        help="export a run directory to Hugging Face (MarianMTModel), CTranslate2 or ONNX",
        description="Write RUN_DIR's model in another format into OUT (which must not exist): 'hf' a "
        "MarianMTModel directory, 'ctranslate2' a CTranslate2 model directory, 'onnx' encoder.onnx and a "
        "one-step decoder_step.onnx with key/value cache.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--format", required=True, choices=FORMATS, dest="fmt")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--quantization", choices=QUANTIZATIONS,
                   help="CTranslate2 weight type (default: float32, as trained)")
    p.set_defaults(handler=_export)


def _import_hf(args: argparse.Namespace) -> int:
    from transformer.interop.hf import import_hf

    out = import_hf(args.directory, args.out)
    print(f"imported {args.directory} into {out}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from transformer.interop import export_ctranslate2, export_hf, export_onnx

    if args.quantization and args.fmt != "ctranslate2":
        raise ValueError("--quantization applies to --format ctranslate2 only")
    if args.fmt == "hf":
        out = export_hf(args.run_dir, args.out)
    elif args.fmt == "ctranslate2":
        out = export_ctranslate2(args.run_dir, args.out, quantization=args.quantization)
    else:
        out = export_onnx(args.run_dir, args.out)
    print(f"exported {args.run_dir} as {args.fmt} into {out}")
    return 0
