"""Training throughput and hardware utilisation: ours against torch.nn.Transformer and Marian.

One optimizer step = forward, label-smoothed cross-entropy (0.1), backward, Adam update. The
contenders are models of the same sizes (the paper's post-LN layout, shared embeddings tied to
the output layer, sinusoidal positions):

- ours: ``transformer.model.Transformer`` trained the way our trainer does it on the device. On a
  CPU: logits only at real target positions, and the CPU engine's kernels (training modules and
  the one-pass loss) swapped in by ``transformer.cpu.accelerate_training``, which swaps nothing
  where the kernels are off (``TRANSFORMER_FUSED_CPU=0``) or unavailable. On CUDA: the CUDA
  engine's way (``transformer.cuda``): logits at every position with padding ignored by the plain
  loss, batches padded to multiples of 8, nothing read back from the GPU in a step; ``ours
  (compiled)`` adds ``torch.compile`` of the forward pass (``train.compile=true``; asked for on a
  CPU, it runs that CUDA path there, a check of the path rather than a CPU figure);
- torch.nn.Transformer: PyTorch's encoder-decoder with embeddings, positions and output layer
  around it, ``F.cross_entropy(label_smoothing=0.1)``;
- Marian: ``transformers``' ``MarianMTModel`` (the architecture of the opus-mt models), the same
  loss as torch.nn.Transformer.

Every contender gets the same batches and the same optimizer (fused Adam). On a CPU: both
shapes (a fixed 64 x 24 batch, and real token-budget batches of Multi30k de-en, tokenised with
joint BPE of 8,000) and both precisions (fp32, bf16 autocast; bf16 only where the CPU has bf16
matrix units, AVX-512 bf16 or AMX, unless ``--dtypes`` asks for it: elsewhere PyTorch emulates
bf16 products hundreds of times slower than fp32). On CUDA (``--device cuda``): the sizes base
and big, random batches of 32-token sentences holding 4,096, 16,384 and 24,576 (the paper's
~25,000) target tokens per step, a 32,000 shared vocabulary, bf16 autocast and fp32 with TF32
matrix products (``tf32``). They alternate within each round; the table shows the median over
rounds of target tokens per second and ratios against the fastest peer. The same run measures
the device's matmul peak (large square matmuls) in each precision and reports training FLOP/s
(6 x matmul parameters x tokens, plus attention) as a share of it; on CUDA the bf16 peak is the
one the GPU figures are read against.

``ours (compiled)`` reports apart what compiling cost: the host seconds of the warm-up batch that
compiled (``compile_seconds``), the compilations after the first (``recompiles``: 0 when every
batch reused the first graph) and whether the compiled graph was still in use at the end
(``compiled``; false after a fallback to eager, with the reason). The JSON (``--out``) is
written again after each size and shape, so a run stopped midway keeps what it measured.

    python benchmarks/train_step.py --from ../shared/data                  # small and base, ~10 min
    python benchmarks/train_step.py --sizes small --shapes fixed --rounds 2   # a quick look
    python benchmarks/train_step.py --device cuda                          # base and big on a GPU
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from transformer.cpu.allocator import retain_freed_memory
from transformer.config import ModelConfig, preset
from transformer.data import Batch, TokenBudgetBatches, make_batch
from transformer import cuda
from transformer.cpu import accelerate_training, available as cpu_kernels_available
from transformer.model import Transformer
from transformer.model.embeddings import sinusoidal_table
from transformer.cpu.training_precision import bf16_left_out, fast_bf16
from transformer.model.loss import LabelSmoothedCrossEntropy

PAD, BOS, EOS = 0, 1, 2
SMOOTHING = 0.1


# ------------------------------------------------------------------------------------------ peers
class TorchNNTransformer(nn.Module):
    """The same sizes with torch.nn.Transformer: embeddings * sqrt(d), sinusoids, tied output."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.core = nn.Transformer(
            d_model=cfg.d_model, nhead=cfg.n_heads, num_encoder_layers=cfg.n_encoder_layers,
            num_decoder_layers=cfg.n_decoder_layers, dim_feedforward=cfg.d_ff, dropout=cfg.dropout,
            batch_first=True, norm_first=cfg.norm_first,
        )
        self.output = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        self.output.weight = self.embed.weight
        self.register_buffer("pe", sinusoidal_table(1024, cfg.d_model), persistent=False)
        self.scale = math.sqrt(cfg.d_model)

    def forward(self, src, tgt, src_mask):
        s = self.embed(src) * self.scale + self.pe[: src.shape[1]]
        t = self.embed(tgt) * self.scale + self.pe[: tgt.shape[1]]
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device, dtype=torch.bool)
        h = self.core(s, t, tgt_mask=causal, src_key_padding_mask=~src_mask, memory_key_padding_mask=~src_mask,
                      tgt_is_causal=True)
        return self.output(h)


class Marian(nn.Module):
    """``MarianMTModel`` of the same sizes (post-LN, scaled embeddings, sinusoids, shared vocabulary)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        from transformers import MarianConfig, MarianMTModel

        mc = MarianConfig(
            vocab_size=cfg.tgt_vocab_size, d_model=cfg.d_model, encoder_layers=cfg.n_encoder_layers,
            decoder_layers=cfg.n_decoder_layers, encoder_attention_heads=cfg.n_heads,
            decoder_attention_heads=cfg.n_heads, encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff,
            activation_function="relu", dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
            activation_dropout=0.0, max_position_embeddings=1024, scale_embedding=True, pad_token_id=PAD,
            eos_token_id=EOS, decoder_start_token_id=PAD, share_encoder_decoder_embeddings=True,
        )
        self.model = MarianMTModel(mc)

    def forward(self, src, tgt, src_mask):
        return self.model(input_ids=src, attention_mask=src_mask.long(), decoder_input_ids=tgt).logits


# ------------------------------------------------------------------------------------------ steps
OURS = ("ours", "ours (compiled)")
CONTENDERS = (*OURS, "torch.nn.Transformer", "Marian")


def make_step(name: str, model: nn.Module, bf16: bool, device: torch.device):
    """A closure doing one optimizer step on a Batch (already on ``device``), the contender's way."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    ours = LabelSmoothedCrossEntropy(smoothing=SMOOTHING, ignore_index=PAD)
    on_cpu = device.type == "cpu" and name != "ours (compiled)"  # the compiled one takes the CUDA engine's way anywhere
    if on_cpu:
        accelerate_training(ours)  # the CPU engine's one-pass loss (nothing where the kernels are off)
    model.train()

    def step(b: Batch) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if name in OURS and on_cpu:  # logits at the real targets only, as the trainer does on a CPU
                real = b.tgt_out != PAD
                loss = ours(model(b.src, b.tgt_in, b.src_mask, positions=real), b.tgt_out[real])[0]
            elif name in OURS:  # every position, padding ignored by the loss, as the trainer does on CUDA
                loss = ours(model(b.src, b.tgt_in, b.src_mask), b.tgt_out)[0]
            else:
                logits = model(b.src, b.tgt_in, b.src_mask)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), b.tgt_out.flatten(), ignore_index=PAD,
                                       label_smoothing=SMOOTHING, reduction="sum")
        (loss / b.n_tgt_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def build(name: str, cfg: ModelConfig, device: torch.device,
          backend: str = "inductor") -> tuple[nn.Module, cuda.CudaTraining | None]:
    """The contender's model on ``device``, and for ours on the CUDA path the engine applied to it."""
    torch.manual_seed(0)
    kind = Transformer if name in OURS else {"torch.nn.Transformer": TorchNNTransformer, "Marian": Marian}[name]
    model = kind(cfg).to(device)
    engine = None
    if name == "ours" and device.type == "cpu":
        accelerate_training(model)  # what the Trainer does on CPU (nothing where the kernels are off)
    elif name in OURS:  # what the Trainer does on CUDA (on a CPU, 'ours (compiled)' only checks that path)
        engine = cuda.accelerate_training(model, compile=name == "ours (compiled)", backend=backend, say=print)
    return model, engine


# ------------------------------------------------------------------------------------------ data
def fixed_batches(vocab: int, batch: int, length: int) -> list[Batch]:
    g = torch.Generator().manual_seed(0)
    examples = []
    for i in range(batch):
        n = length if i >= batch // 2 else length - length // 4  # some padding, as in real batches
        src = torch.randint(4, vocab, (n,), generator=g).tolist()
        examples.append((src, torch.randint(4, vocab, (length - 1,), generator=g).tolist()))
    return [make_batch(examples, pad_id=PAD, bos_id=BOS, eos_id=EOS)]


def multi30k_batches(data_dir: str, vocab_size: int, max_tokens: int, count: int) -> list[Batch]:
    """``count`` token-budget batches of Multi30k de-en train, joint BPE of ``vocab_size``."""
    from transformer.corpus.registry import corpus_pairs, fetch
    from transformer.text import Vocabularies

    directory = fetch("multi30k", local_dir=data_dir, progress=False)
    pairs = corpus_pairs("multi30k", src="de", tgt="en", split="train", directory=directory)
    vocab = Vocabularies.train(pairs, vocab_size=vocab_size, joint=True)
    examples = list(zip(vocab.src.encode_batch([s for s, _ in pairs]), vocab.tgt.encode_batch([t for _, t in pairs])))
    batches = TokenBudgetBatches(examples, max_tokens=max_tokens, pad_id=PAD, bos_id=BOS, eos_id=EOS, shuffle=True,
                                 seed=0)
    it = batches.iter_from(0, 0)
    return [next(it) for _ in range(count)]


# ------------------------------------------------------------------------------------------ FLOPs
def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (None where there is none to read)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)


def matmul_peak(dtype: torch.dtype, sizes=None, repeats: int | None = None, trials: int = 3,
                device: torch.device | str = "cpu") -> float:
    """Best FLOP/s of large square matmuls in ``dtype`` on ``device`` (best of ``trials`` timings per size;
    by default 2048 to 4096 on a CPU, 4096 to 16384 on CUDA, timed between synchronisations; TF32 as the
    caller's setting has it)."""
    device = torch.device(device)
    on_cuda = device.type == "cuda"
    sizes = sizes or ((4096, 8192, 16384) if on_cuda else (2048, 3072, 4096))
    repeats = repeats or (20 if on_cuda else 5)
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
        a @ b
        for _ in range(trials):
            _sync(device)
            start = time.perf_counter()
            for _ in range(repeats):
                a @ b
            _sync(device)
            best = max(best, 2 * n**3 * repeats / (time.perf_counter() - start))
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_flops(cfg: ModelConfig, batches: list[Batch]) -> float:
    """6 x (matmul parameters x the tokens they see) + attention scores and sums, forward + backward."""
    E, F_ = cfg.d_model, cfg.d_ff
    enc = cfg.n_encoder_layers * (4 * E * E + 2 * E * F_)  # self-attention Q, K, V, O + FFN
    dec = cfg.n_decoder_layers * (8 * E * E + 2 * E * F_) + E * cfg.tgt_vocab_size  # + cross-attention + output
    total = 0.0
    for b in batches:
        src_len = b.src_mask.sum(1).double()  # (B,)
        tgt_len = (b.tgt_out != PAD).sum(1).double()
        total += 6 * (enc * src_len.sum() + dec * tgt_len.sum()).item()
        # QK^T and AV: 2 matmuls of 2*T*S*E FLOPs each per layer forward; x3 for training
        attn = (cfg.n_encoder_layers * src_len**2 + cfg.n_decoder_layers * (tgt_len**2 / 2 + tgt_len * src_len))
        total += 3 * 4 * E * attn.sum().item()
    return total


# ------------------------------------------------------------------------------------------ main
def measure(size: str, shape: str, batches: list[Batch], vocab: int, contenders: list[str], rounds: int,
            peaks: dict[str, float], dtypes: list[str], device: torch.device, backend: str = "inductor") -> list[dict]:
    cfg = preset(size, src_vocab_size=vocab)
    tokens = sum(b.n_tgt_tokens for b in batches)
    flops = train_flops(cfg, batches)
    on_device = [b.to(device) for b in batches]
    rows = []
    for dtype in dtypes:
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"  # fp32 storage, TF32 matrix products
        steps, engines = {}, {}
        for name in contenders:
            model, engines[name] = build(name, cfg, device, backend)
            steps[name] = make_step(name, model, dtype == "bf16", device)
            run = engines[name].run if engines[name] else (lambda warm_up: warm_up())  # the engine times compiling
            for _ in range(2 if device.type == "cuda" else 1):  # warm-up (on CUDA: compiling, autotuning)
                run(lambda: steps[name](on_device[0]))
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for r in range(rounds):
            order = contenders if r % 2 == 0 else contenders[::-1]
            for name in order:
                _sync(device)
                start = time.perf_counter()
                for b in on_device:
                    steps[name](b)
                _sync(device)
                times[name].append(time.perf_counter() - start)
        for name in contenders:
            sec = statistics.median(times[name])
            rows.append(dict(size=size, shape=shape, dtype=dtype, contender=name, tokens_per_s=tokens / sec,
                             seconds_per_step=sec / len(batches), flops_per_s=flops / sec,
                             share_of_peak=flops / sec / peaks[dtype], device=device.type,
                             **compile_report(engines[name])))
        del steps, engines
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print_rows([r for r in rows if r["dtype"] == dtype], tokens, len(batches))
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def compile_report(engine: cuda.CudaTraining | None) -> dict:
    """What compiling cost a compiled contender: seconds, recompilations, whether the graph stayed in use."""
    if engine is None or engine.backend is None:
        return {}
    return dict(compiled=engine.compiled, compile_seconds=engine.compile_seconds, recompiles=engine.recompiles,
                compile_failure=engine.failure, compile_backend=engine.backend)


def print_rows(rows: list[dict], tokens: int, n_batches: int) -> None:
    r0 = rows[0]
    peers = [r for r in rows if r["contender"] not in OURS]
    fastest = max(peers, key=lambda r: r["tokens_per_s"]) if peers else None
    where = f"{torch.get_num_threads()} threads" if r0["device"] == "cpu" else torch.cuda.get_device_name()
    print(f"\n{r0['size']}, {r0['shape']} ({n_batches} batch(es), {tokens:,} target tokens), {r0['dtype']}, {where}")
    print(f"  {'contender':<22} {'tokens/s':>10} {'s/step':>8} {'GFLOP/s':>9} {'of peak':>8} {'ours/this':>10}")
    ours = next((r for r in rows if r["contender"] == "ours"), None)
    for r in rows:
        ratio = f"{ours['tokens_per_s'] / r['tokens_per_s']:.2f}x" if ours else ""
        print(f"  {r['contender']:<22} {r['tokens_per_s']:>10,.0f} {r['seconds_per_step']:>8.3f} "
              f"{r['flops_per_s'] / 1e9:>9.0f} {r['share_of_peak']:>7.1%} {ratio:>10}")
    for r in rows:
        if "compiled" in r:
            print(f"  {r['contender']}: compiled in {r['compile_seconds']:.1f} s (not in the times above), "
                  f"{r['recompiles']} recompilation(s), "
                  + ("the compiled graph in use" if r["compiled"] else f"fell back to eager ({r['compile_failure']})"))
    for mine in (r for r in rows if r["contender"] in OURS):
        if fastest:
            print(f"  {mine['contender']} / fastest peer ({fastest['contender']}): "
                  f"{mine['tokens_per_s'] / fastest['tokens_per_s']:.2f}x")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where to train (default: cpu); the defaults below differ by device")
    parser.add_argument("--sizes", nargs="+", default=None, choices=["tiny", "small", "base", "big"],
                        help="model sizes (default: small base on a CPU, base big on CUDA)")
    parser.add_argument("--shapes", nargs="+", default=None, choices=["fixed", "multi30k", "tokens"],
                        help="batches: fixed (--batch x --length), multi30k (real token-budget batches), tokens "
                        "(random 32-token sentences, --tokens per step); default: fixed multi30k on a CPU, tokens on CUDA")
    parser.add_argument("--tokens", nargs="+", type=int, default=[4096, 16384, 24576],
                        help="target tokens per step of the 'tokens' shape (default: 4096 16384 24576)")
    parser.add_argument("--contenders", nargs="+", default=None, choices=CONTENDERS,
                        help="default: ours, torch.nn.Transformer and Marian (with 'ours (compiled)' on CUDA)")
    parser.add_argument("--vocab", type=int, default=None, help="shared vocabulary size (default: 8000 on a CPU, "
                        "32000 on CUDA)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=2500, help="token budget of the real batches")
    parser.add_argument("--real-batches", type=int, default=4, help="real batches per round")
    parser.add_argument("--steps", type=int, default=5, help="steps per round of the 'tokens' shape (default: 5)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", nargs="+", choices=["fp32", "tf32", "bf16"], default=None,
                        help="precisions to measure (default on a CPU: fp32 and bf16 where it has bf16 matrix "
                        "units, fp32 alone elsewhere; on CUDA: bf16 and tf32)")
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of Multi30k (e.g. ../shared/data)")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument("--peak-only", action="store_true", help="measure the matmul peak and stop")
    parser.add_argument("--peak-sizes", nargs="+", type=int, default=None,
                        help="sizes of the square matmuls of the peak (default: 2048 3072 4096 on a CPU, "
                        "4096 8192 16384 on CUDA)")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile backend of 'ours (compiled)' (default inductor; eager or aot_eager check "
                        "the path quickly)")
    args = parser.parse_args()
    device = torch.device(args.device)
    on_cpu = device.type == "cpu"
    if not on_cpu and not torch.cuda.is_available():
        parser.error("--device cuda: PyTorch sees no CUDA device")
    if "tf32" in (args.dtypes or []) and on_cpu:
        parser.error("tf32 is a CUDA precision; on a CPU use fp32 or bf16")
    sizes = args.sizes or (["small", "base"] if on_cpu else ["base", "big"])
    shape_names = args.shapes or (["fixed", "multi30k"] if on_cpu else ["tokens"])
    contenders = args.contenders or ["ours", *([] if on_cpu else ["ours (compiled)"]), "torch.nn.Transformer", "Marian"]
    vocab = args.vocab or (8000 if on_cpu else 32000)
    retain_freed_memory()  # for every contender alike: they share this process (transformer/cpu/allocator.py)

    if on_cpu:
        dtypes = args.dtypes or (["fp32", "bf16"] if fast_bf16("cpu") else ["fp32"])
        if "bf16" not in dtypes and args.dtypes is None:
            print(bf16_left_out("--dtypes fp32 bf16 measures it anyway"))
    else:
        dtypes = args.dtypes or ["bf16", "tf32"]
    dtypes_of = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16}
    peaks = {}
    for d in dict.fromkeys(dtypes + ([] if on_cpu else ["bf16"])):  # on CUDA the bf16 peak, always
        torch.backends.cuda.matmul.allow_tf32 = d == "tf32"
        peaks[d] = matmul_peak(dtypes_of[d], device=device, sizes=args.peak_sizes)
    torch.backends.cuda.matmul.allow_tf32 = False
    where = (f"this machine ({torch.get_num_threads()} threads)" if on_cpu else
             f"{torch.cuda.get_device_name(device)} (torch {torch.__version__}, CUDA {torch.version.cuda})")
    print(f"matmul peak on {where}: " + ", ".join(f"{d} {peak / 1e9:,.0f} GFLOP/s" for d, peak in peaks.items())
          + (f"; ours' CPU kernels (transformer.cpu): {'on' if cpu_kernels_available() else 'off'}" if on_cpu else ""))
    if args.peak_only:
        return
    shapes = {}
    if "fixed" in shape_names:
        shapes[f"fixed {args.batch}x{args.length}"] = fixed_batches(vocab, args.batch, args.length)
    if "multi30k" in shape_names:
        shapes["Multi30k token-budget"] = multi30k_batches(args.data_dir, vocab, args.max_tokens, args.real_batches)
    if "tokens" in shape_names:
        for n in args.tokens:
            batch = fixed_batches(vocab, max(1, n // 32), 32)  # 32-token sentences: n target tokens
            shapes[f"random {batch[0].n_tgt_tokens:,} tokens/step"] = batch * args.steps
    rows = []
    for size in sizes:
        for shape, batches in shapes.items():
            rows += measure(size, shape, batches, vocab, contenders, args.rounds, peaks, dtypes, device,
                            args.compile_backend)
            if args.out:  # after each table: a run stopped midway keeps what it measured
                args.out.write_text(json.dumps({"peaks": peaks, "device": where, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
