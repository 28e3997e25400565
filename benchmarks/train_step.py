"""Training-step throughput: ours against a model of the same sizes built from torch.nn.Transformer.

One optimizer step = forward, label-free cross-entropy loss, backward, Adam update, on the same
batch for both contenders, fp32 and bf16 autocast, measured in one run with the contenders
alternating. Prints target tokens per second and the ratio ours / torch.nn.Transformer.

    python benchmarks/train_step.py --preset small --batch 64 --length 24
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from torch import nn

from transformer.config import preset
from transformer.model import Transformer


class TorchNNTransformer(nn.Module):
    """The same sizes with torch.nn.Transformer: embeddings * sqrt(d), sinusoids, tied output."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.core = nn.Transformer(
            d_model=cfg.d_model, nhead=cfg.n_heads, num_encoder_layers=cfg.n_encoder_layers,
            num_decoder_layers=cfg.n_decoder_layers, dim_feedforward=cfg.d_ff, dropout=cfg.dropout,
            batch_first=True, norm_first=cfg.norm_first,
        )
        self.output = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        self.output.weight = self.embed.weight
        from transformer.model.embeddings import sinusoidal_table

        self.register_buffer("pe", sinusoidal_table(1024, cfg.d_model), persistent=False)
        self.scale = math.sqrt(cfg.d_model)

    def forward(self, src, tgt, src_mask):
        s = self.embed(src) * self.scale + self.pe[: src.shape[1]]
        t = self.embed(tgt) * self.scale + self.pe[: tgt.shape[1]]
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], dtype=torch.bool)
        h = self.core(s, t, tgt_mask=causal, src_key_padding_mask=~src_mask, memory_key_padding_mask=~src_mask,
                      tgt_is_causal=True)
        return self.output(h)


def step_fn(model, opt, src, tgt_in, tgt_out, mask, bf16: bool):
    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, tgt_in, mask)
            loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    cfg = preset(args.preset, src_vocab_size=args.vocab)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, args.vocab, (args.batch, args.length), generator=g)
    tgt = torch.randint(4, args.vocab, (args.batch, args.length + 1), generator=g)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    mask = torch.ones_like(src, dtype=torch.bool)
    mask[: args.batch // 2, -args.length // 4 :] = False  # some padding, as in real batches
    tokens = int(tgt_out.numel())

    results: dict[tuple[str, str], list[float]] = {}
    for bf16 in (False, True):
        torch.manual_seed(0)
        contenders = {"ours": Transformer(cfg), "torch.nn.Transformer": TorchNNTransformer(cfg)}
        steps = {}
        for name, model in contenders.items():
            model.train()
            opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
            steps[name] = step_fn(model, opt, src, tgt_in, tgt_out, mask, bf16)
            steps[name]()  # warm-up
        for _ in range(args.rounds):  # alternate the contenders round by round
            for name, step in steps.items():
                start = time.perf_counter()
                for _ in range(args.steps):
                    step()
                elapsed = time.perf_counter() - start
                results.setdefault((name, "bf16" if bf16 else "fp32"), []).append(tokens * args.steps / elapsed)

    print(f"training step, preset {args.preset}, batch {args.batch} x {args.length}, vocab {args.vocab}, "
          f"{torch.get_num_threads()} threads; target tokens/s (median of {args.rounds} rounds)")
    print(f"{'dtype':<6} {'ours':>10} {'torch.nn.Transformer':>22} {'ratio':>7}")
    for dtype in ("fp32", "bf16"):
        ours = statistics.median(results[("ours", dtype)])
        peer = statistics.median(results[("torch.nn.Transformer", dtype)])
        print(f"{dtype:<6} {ours:>10,.0f} {peer:>22,.0f} {ours / peer:>6.2f}x")


if __name__ == "__main__":
    main()
