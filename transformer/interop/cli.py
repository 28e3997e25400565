"""``transformer import-hf`` and ``transformer export``: thin commands over ``transformer.interop``
(their parsers are in ``cli_args.py``)."""

from __future__ import annotations

import argparse

from transformer.errors import UserError


def import_hf_command(args: argparse.Namespace) -> int:
    from transformer.interop.hf import import_hf

    from transformer.run.model import load_config

    out = import_hf(args.source, args.out, revision=args.revision)
    hub = load_config(out).extra.get("hf_hub")
    commit = f" (commit {hub['commit']})" if hub else ""
    print(f"imported {args.source}{commit} into {out}")
    return 0


def export_command(args: argparse.Namespace) -> int:
    from transformer.interop import export_argos, export_ctranslate2, export_hf, export_onnx

    if args.precision and args.fmt not in ("ctranslate2", "argos"):
        raise UserError("--precision applies to --format ctranslate2 only (and argos, which packages a "
                         "CTranslate2 model)")
    for option in ("src_lang", "tgt_lang", "sentence_model", "check_text"):
        if getattr(args, option) and args.fmt != "argos":
            raise UserError(f"--{option.replace('_', '-')} applies to --format argos only")
    if args.package_version != "1.0" and args.fmt != "argos":
        raise UserError("--package-version applies to --format argos only")
    if args.fmt == "argos":
        sample = _read_lines(args.check_text) if args.check_text else []
        out = export_argos(args.run_dir, args.out, src_lang=args.src_lang, tgt_lang=args.tgt_lang,
                           package_version=args.package_version, precision=args.precision,
                           sentence_model=args.sentence_model, sample=sample)
    elif args.fmt == "hf":
        out = export_hf(args.run_dir, args.out)
    elif args.fmt == "ctranslate2":
        out = export_ctranslate2(args.run_dir, args.out, precision=args.precision)
    else:
        out = export_onnx(args.run_dir, args.out)
    print(f"exported {args.run_dir} as {args.fmt} into {out}")
    return 0


def _read_lines(path: str) -> list[str]:
    """The lines of a UTF-8 text file; UserError naming the file when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read --check-text {path}: {err}") from None
