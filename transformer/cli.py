"""The ``transformer`` command: thin subcommands that call the library.

Each subcommand registers itself with ``_register``; errors the user can fix are printed as one
line on stderr with exit status 2, never as a stack trace.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Sequence

import torch

from transformer import __version__
from transformer.config import PRESETS, preset
from transformer.masks import padding_mask
from transformer.model import Transformer

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """An error in what the user asked for: printed without a traceback, exit status 2."""


def _register_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="build a preset, print its parameter count and layer table, run one forward pass",
        description="Build a model preset, print its parameter count and a table of its layers, and time "
        "one forward pass on a random batch.",
    )
    p.add_argument("--preset", default="base", choices=sorted(PRESETS), help="model size (default: base, the paper's)")
    p.add_argument("--vocab", type=int, default=37000, help="shared vocabulary size (default: 37000, the paper's EN-DE BPE)")
    p.add_argument("--batch", type=int, default=8, help="sentences in the test batch (default: 8)")
    p.add_argument("--length", type=int, default=32, help="source and target length of the test batch (default: 32)")
    p.add_argument("--bf16", action="store_true", help="run the forward pass under bfloat16 autocast")
    p.set_defaults(handler=_info)


def _info(args: argparse.Namespace) -> int:
    for name in ("vocab", "batch", "length"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    cfg = preset(args.preset, src_vocab_size=args.vocab)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    print(f"transformer {__version__}: preset {args.preset!r}, shared vocabulary {args.vocab}")
    print(
        f"d_model={cfg.d_model} heads={cfg.n_heads} d_k={cfg.head_dim} d_ff={cfg.d_ff} "
        f"layers={cfg.n_encoder_layers}+{cfg.n_decoder_layers} dropout={cfg.dropout} "
        f"{'pre-LN' if cfg.norm_first else 'post-LN'} positions={cfg.positional}"
    )
    print()
    print(_layer_table(model))
    print()
    n = model.num_parameters()
    print(f"parameters: {n:,} ({n / 1e6:.1f}M; tied weights counted once)")

    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, args.vocab, (args.batch, args.length), generator=g) if args.vocab > 4 else torch.zeros(
        args.batch, args.length, dtype=torch.long
    )
    tgt = src.flip(1)
    mask = padding_mask(src, pad_id=-1)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        model(src, tgt, mask)  # warm-up
        start = time.perf_counter()
        logits = model(src, tgt, mask)
        elapsed = time.perf_counter() - start
    print(
        f"forward pass: batch {args.batch} x {args.length} -> logits {tuple(logits.shape)} "
        f"in {elapsed * 1000:.1f} ms ({str(dtype).replace('torch.', '')}, {torch.get_num_threads()} threads)"
    )
    return 0


def _layer_table(model: Transformer) -> str:
    """One row per top-level part and per layer: name, type, parameter count."""
    rows = [("part", "type", "parameters")]
    seen: set[int] = set()

    def count(module: torch.nn.Module) -> int:
        total = 0
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        return total

    for stack_name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        shared = " (shared with encoder)" if stack_name == "decoder" and model.config.share_embeddings else ""
        rows.append((f"{stack_name}.embed", f"embedding + positions{shared}", f"{count(stack.embed):,}"))
        for i, layer in enumerate(stack.layers):
            rows.append((f"{stack_name}.layers.{i}", type(layer).__name__, f"{count(layer):,}"))
        if stack.final_norm is not None:
            rows.append((f"{stack_name}.final_norm", "LayerNorm", f"{count(stack.final_norm):,}"))
    tied = " (tied to target embedding)" if model.config.tie_output else ""
    rows.append(("output", f"Linear{tied}", f"{count(model.output):,}"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}" for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer",
        description="Train, run and look inside the Transformer of 'Attention Is All You Need'.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _SUBCOMMANDS:
        register(sub)
    return parser


_SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_register_info]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (UsageError, ValueError, FileNotFoundError) as err:
        print(f"transformer {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"transformer {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
