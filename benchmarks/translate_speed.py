"""Translation speed: ours against ``transformers`` ``generate()`` and CTranslate2, same weights, same sentences.

One trained run directory (default ``runs/multi30k-de-en``: d_model 256, 3 + 3 layers, joint BPE
8k) is exported into a temporary directory with ``export_hf`` (a ``MarianMTModel``) and
``export_ctranslate2`` (float32 and int8 weights). The first 16 and the first 256 source
sentences of Multi30k ``test_2016_flickr`` are translated greedily and with beam 4 by:

* ours fp32: ``Translator`` (length-sorted batches of at most ``max_tokens`` padded source
  tokens x beam, decoder cache, rows of finished sentences dropped; on CPU the Translator
  prepares the model for the engine's decoding kernels, ``transformer.cpu.prepare_for_decoding``:
  packed linear layers, one call per decoder layer and step, decoding attention, log-softmax
  with top-k; ``TRANSFORMER_FUSED_CPU=0`` runs PyTorch's operators instead). The model is loaded
  frozen, as ``Translator.from_run_dir`` (the CLI, the server) loads it, so the weights are
  packed for the kernels once, not in every call;
* ours bf16: the same ``Translator`` with ``precision="bf16"`` (a bfloat16 copy of the model), only
  where the CPU has bf16 matrix units (AVX-512 bf16 or AMX) or with ``--emulated-bf16``: elsewhere PyTorch
  emulates bf16 products, far slower than float32, and the contender is left out;
* ours int8: ``Translator(precision="int8")`` (``translate --precision int8``, the counterpart of
  CTranslate2 int8): int8 copies of the linear layers' weights (one scale per output feature)
  multiplied by float32 activations in the engine's decoding kernels, at every batch size; left
  out where the kernels are off or cannot be built (``--no-int8`` leaves it out anyway);
* generate fp32: ``MarianMTModel.generate()`` on all sentences as one padded batch, ``num_beams``,
  ``length_penalty``, ``early_stopping`` (see below);
* CTranslate2 float32 and int8: ``translate_batch`` (``beam_size``, ``length_penalty``,
  ``max_decoding_length``, ``patience``), ``inter_threads=1``,
  ``intra_threads`` = the torch thread count.

Beam search stops by the same rule in all three (``--stopping``): ``k_finished`` (default) ends a
sentence once beam_size hypotheses have finished: ours ``stopping="k_finished"``,
``generate(early_stopping=True)``, CTranslate2 ``patience=1`` (its default); ``exact``: ours'
exact rule, ``generate(early_stopping="never")`` (also exact) and CTranslate2 with
``--ct2-patience`` (it has no exact rule; a large patience comes close).

What is timed: ours from the source text (tokenization, length sorting and padding included);
the others from ready token ids / pieces (their input preparation is left out of the timing),
so the comparison is, if anything, tilted against ours. Beam search ranks by
``log P / |Y| ** 0.6`` in all three by default (the only length penalty ``generate()`` and
CTranslate2 have; ``--length-penalty gnmt`` gives ours the GNMT form it uses for translation,
``((5 + |Y|) / 6) ** alpha``, and the others keep theirs). Maximum length: ours ``source length + 50`` per sentence; ``generate()`` and
CTranslate2 take one limit per call, the longest source of the batch + 50 (all capped by the
model's positions). Outputs that are identical to ours fp32 are counted as a check that the
contenders do the same work.

Each family (ours, ``generate()``, CTranslate2) runs in a process of its own, started once; only
one works at a time. (In one shared process ours ran about 1.5-1.8x slower after CTranslate2's
first call than before it, for reasons not found: not thread affinity, not idle spinning, not
the allocator.) The contenders alternate within each round (rotating who goes first); each one runs once
untimed per table first, and the median over the rounds is reported. One table per
(strategy, batch size): seconds, sentences/s, outputs identical to ours fp32, speed-up over
``generate()`` (its time / this row's time) and this row's time / CTranslate2 float32's time.
Targets (issue 7): ours >= 2x ``generate()`` and ours / CTranslate2 float32 <= 1.0.

On a GPU (``--device cuda``) every contender runs there: ours fp32 and bf16 (the Translator
decodes the CUDA engine's way, ``transformer/cuda/decoding.py``), ``generate()`` fp32 and bf16 (a
bfloat16 copy of the model), CTranslate2 float32 and float16 (``device="cuda"``); 16, 256 and 1,000
sentences by default, each run timed to its last GPU operation. Targets there: ours >= 3x
``generate()`` and no slower than CTranslate2 float32.

CTranslate2's contenders run where its package is installed; elsewhere a line says they are left
out and the tables compare ours with ``generate()`` alone. ``--sentences FILE`` translates that
file's lines instead of Multi30k's (a check of the script on any run directory). The JSON is
written again after each table, so a run stopped midway keeps the tables it finished.

    python benchmarks/translate_speed.py --from ../shared/data --out translate_speed.json
    python benchmarks/translate_speed.py --from ../shared/data --quick     # a check: 4 sentences, one round
    python benchmarks/translate_speed.py --from ../shared/data --device cuda   # on a GPU
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from transformer.cpu.allocator import retain_freed_memory
from transformer.run.model import load_config, load_model
from transformer.corpus.registry import corpus_pairs, fetch
from transformer.decoding import DecodeConfig
from transformer.cpu.training_precision import bf16_left_out, fast_bf16
from transformer.text import Vocabularies
from transformer.cpu import available as cpu_kernels_available
from transformer.translate.translator import Translator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import cpu_model  # noqa: E402

SPLIT = "test_2016_flickr"


class Contender:
    """A name, an untimed ``prepare(texts)``, the timed ``run(prepared)`` and an untimed ``ids(output)``."""

    def __init__(self, name: str, prepare: Callable, run: Callable, ids: Callable) -> None:
        self.name, self.prepare, self.run, self.ids = name, prepare, run, ids


def source_language(run_dir: Path, default: str) -> tuple[str, str]:
    try:
        data = json.loads((run_dir / "run_config.json").read_text(encoding="utf-8"))["data"]
        return data["src_lang"], data["tgt_lang"]
    except (OSError, KeyError, ValueError):
        return default, "en"


def ct2_version() -> str | None:
    """CTranslate2's version, None where it is not installed (its contenders are then left out)."""
    try:
        import ctranslate2
    except ImportError:
        return None
    return ctranslate2.__version__


def machine() -> dict:
    cpu = cpu_model() or platform.processor() or ""
    from importlib.metadata import version  # not an import of transformers: only its worker needs that

    return {"cpu": cpu, "logical_cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_bf16_units": fast_bf16("cpu"), "cpu_kernels": cpu_kernels_available(),
            "python": platform.python_version(), "torch": torch.__version__, "transformers": version("transformers"),
            "ctranslate2": ct2_version(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "cuda": torch.version.cuda}


def families() -> tuple[str, ...]:
    """The contenders' families, one process each: ours, ``generate()`` and, where it is installed, CTranslate2."""
    return ("ours", "hf", "ct2") if ct2_version() else ("ours", "hf")


def export_engine(family: str, run_dir: Path, tmp: Path) -> None:
    """The run's weights exported for ``family`` under ``tmp``: a ``MarianMTModel`` (``hf``) or CTranslate2's
    float32 and int8 models (``ct2``); ours reads the run. Each family's process exports its own, so the
    exports run side by side and only the processes that use ``transformers`` import it."""
    if family == "hf":
        import transformers

        from transformer.interop import export_hf

        transformers.utils.logging.disable_progress_bar()
        export_hf(run_dir, tmp / "hf")
    elif family == "ct2":
        from transformer.interop import export_ctranslate2

        for precision, weight_type in (("fp32", "float32"), ("int8", "int8")):  # CTranslate2's names
            export_ctranslate2(run_dir, tmp / f"ct2-{weight_type}", precision=precision)


def ct2_types(device: str) -> tuple[str, str]:
    """CTranslate2's compute types measured on ``device``: float32 and int8 on a CPU, float32 and float16 on CUDA."""
    return ("float32", "int8") if device == "cpu" else ("float32", "float16")


def load_engines(family: str, run_dir: Path, tmp: Path, device: str = "cpu") -> dict:
    """One family's engines on ``device``: our model, the ``MarianMTModel``, or the two CTranslate2 translators."""
    if family == "ours":
        return {"ours": load_model(run_dir).requires_grad_(False)}  # frozen, as Translator.from_run_dir loads it
    if family == "hf":
        import transformers

        transformers.utils.logging.disable_progress_bar()
        return {"hf": transformers.MarianMTModel.from_pretrained(str(tmp / "hf")).eval().to(device)}
    import ctranslate2

    # float16 on a GPU converts the float32 export when loading; int8 on a CPU has its own export
    return {q: ctranslate2.Translator(str(tmp / f"ct2-{'int8' if q == 'int8' else 'float32'}"), device=device,
                                      compute_type=q, inter_threads=1, intra_threads=torch.get_num_threads())
            for q in ct2_types(device)}


def build_contenders(engines: dict, vocab: Vocabularies, decoding: DecodeConfig, args) -> list[Contender]:
    cap = load_config(args.run_dir).max_positions
    src_tok, tgt_tok = vocab.src, vocab.tgt
    beam = decoding.strategy == "beam"
    K = decoding.beam_size if beam else 1

    def batch_limit(ids: list[list[int]]) -> int:
        """One limit for a whole call: the longest source's ``a * length + b`` (as ours, per sentence)."""
        return min(int(max(map(len, ids)) * decoding.max_len_a + decoding.max_len_b), cap)

    contenders = []
    device = torch.device(args.device)
    int8 = [("ours int8", "int8")] if not args.no_int8 and device.type == "cpu" else []
    for name, precision in [("ours fp32", "fp32"), ("ours bf16", "bf16"), *int8]:
        if "ours" not in engines:
            break
        if precision == "bf16" and not args.bf16:  # left out where emulated, unless --emulated-bf16 (main())
            continue
        if precision == "int8" and not cpu_kernels_available():
            continue  # int8 runs in the engine's kernels only
        model = copy.deepcopy(engines["ours"])  # each translator prepares (packs) a model of its own
        translator = Translator(model, vocab, decoding=decoding, max_tokens=args.max_tokens, device=device,
                                precision=precision)
        contenders.append(Contender(
            name, prepare=lambda texts: texts,
            run=lambda texts, tr=translator: tr.translate_n_best(texts),
            ids=lambda out: [hyps[0].tokens if hyps else [] for hyps in out]))

    hf_model = engines.get("hf")
    hf_kwargs = dict(num_beams=K, do_sample=False, num_return_sequences=1)
    if beam:
        hf_kwargs.update(length_penalty=decoding.alpha if decoding.length_penalty != "none" else 0.0,
                         early_stopping=True if args.stopping == "k_finished" else "never")
    pad_id, eos_id, start_id = tgt_tok.pad_id, tgt_tok.eos_id, tgt_tok.bos_id

    def hf_prepare(texts):
        ids = src_tok.encode_batch(texts)
        input_ids = torch.full((len(ids), max(map(len, ids))), src_tok.pad_id, dtype=torch.long)
        for row, s in enumerate(ids):
            input_ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for row, s in enumerate(ids):
            mask[row, : len(s)] = 1
        return input_ids.to(device), mask.to(device), batch_limit(ids)

    def hf_runner(model):
        def run(prepared):
            input_ids, mask, limit = prepared
            with torch.inference_mode():
                return model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=limit, **hf_kwargs)
        return run

    def hf_ids(out):
        result = []
        for row in out.tolist():
            row = row[1:] if row and row[0] == start_id else row  # the decoder start token
            if eos_id in row:
                row = row[: row.index(eos_id)]
            result.append([t for t in row if t != pad_id])
        return result

    if hf_model is not None:
        contenders.append(Contender("generate fp32", hf_prepare, hf_runner(hf_model), hf_ids))
        if device.type == "cuda":  # a bfloat16 copy, as ours bf16
            contenders.append(Contender("generate bf16", hf_prepare, hf_runner(copy.deepcopy(hf_model).bfloat16()),
                                        hf_ids))

    piece_id = {p: i for i, p in enumerate(tgt_tok.pieces(range(tgt_tok.vocab_size)))}
    ct2_kwargs = dict(beam_size=K, return_scores=False)
    if beam:
        ct2_kwargs.update(length_penalty=decoding.alpha if decoding.length_penalty != "none" else 0.0,
                          patience=1.0 if args.stopping == "k_finished" else args.ct2_patience)
    for quantization in ct2_types(args.device):
        ct2 = engines.get(quantization)
        if ct2 is None:
            continue

        def ct2_prepare(texts):
            ids = src_tok.encode_batch(texts)
            return [src_tok.pieces(s) for s in ids], batch_limit(ids)

        contenders.append(Contender(
            f"CT2 {quantization}", ct2_prepare,
            run=lambda prepared, t=ct2: t.translate_batch(prepared[0], max_decoding_length=prepared[1], **ct2_kwargs),
            ids=lambda results: [[piece_id[p] for p in r.hypotheses[0]] for r in results]))
    return contenders


def decoding_for(strategy: str, args) -> DecodeConfig:
    return DecodeConfig(strategy=strategy, beam_size=args.beam if strategy == "beam" else 1,
                        length_penalty=args.length_penalty, alpha=args.alpha, max_len_b=args.max_len_b,
                        stopping=args.stopping)


def _worker(conn, family: str, tmp: str, args) -> None:
    """One family's contenders in their own process: answers (strategy, name, texts) with (seconds, ids).

    Each family runs alone in its process, so no library's state (thread pools, allocator, ...)
    can slow another down; only one process works at a time, the others wait in ``recv``.
    """
    try:
        retain_freed_memory()
        if args.threads:
            torch.set_num_threads(args.threads)
        run_dir = Path(args.run_dir)
        vocab = Vocabularies.load(run_dir)
        export_engine(family, run_dir, Path(tmp))
        engines = load_engines(family, run_dir, Path(tmp), args.device)
        contenders: dict[str, dict[str, Contender]] = {}  # by strategy, then name
        prepared: dict[tuple, object] = {}

        def by_name(strategy: str) -> dict[str, Contender]:
            if strategy not in contenders:
                built = build_contenders(engines, vocab, decoding_for(strategy, args), args)
                contenders[strategy] = {c.name: c for c in built}
            return contenders[strategy]

        conn.send(("ready", list(by_name(args.strategies.split(",")[0]))))
        while (message := conn.recv()) is not None:
            strategy, name, texts = message
            c = by_name(strategy)[name]
            key = (strategy, name, len(texts))
            if key not in prepared:
                prepared[key] = c.prepare(texts)
            start = time.perf_counter()
            out = c.run(prepared[key])
            if args.device == "cuda":
                torch.cuda.synchronize()  # the run's last GPU operation is done
            seconds = time.perf_counter() - start
            conn.send(("ok", (seconds, c.ids(out))))
    except Exception:  # reported to the parent, which stops the run with it
        import traceback

        conn.send(("error", traceback.format_exc()))


class Workers:
    """The three family processes; ``timed(strategy, name, texts)`` runs one contender once in its process."""

    def __init__(self, tmp: Path, args) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs, self.family_of = {}, [], {}
        self.names: list[str] = []
        for family in families():
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, family, str(tmp), args), daemon=True)
            proc.start()
            self.conns[family] = parent
            self.procs.append(proc)
        for family, conn in self.conns.items():
            for name in self._answer(conn):
                self.family_of[name] = family
                self.names.append(name)

    @staticmethod
    def _answer(conn):
        status, value = conn.recv()
        if status == "error":
            raise RuntimeError(f"a benchmark worker failed:\n{value}")
        return value

    def timed(self, strategy: str, name: str, texts: list[str]) -> tuple[float, list[list[int]]]:
        conn = self.conns[self.family_of[name]]
        conn.send((strategy, name, texts))
        return self._answer(conn)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.send(None)
        for proc in self.procs:
            proc.join(timeout=30)


def measure(workers: Workers, strategy: str, texts: list[str], *, rounds: int, warmup: int) -> dict:
    names = workers.names
    outputs = {}
    for name in names:
        for _ in range(warmup):
            outputs[name] = workers.timed(strategy, name, texts)[1]
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            seconds, ids = workers.timed(strategy, name, texts)
            times[name].append(seconds)
            outputs.setdefault(name, ids)
    reference = outputs["ours fp32"]
    rows = {}
    for name in names:
        median = statistics.median(times[name])
        same = sum(a == b for a, b in zip(outputs[name], reference))
        rows[name] = {"seconds": median, "sentences_per_s": len(texts) / median, "identical_to_ours_fp32": same,
                      "times": times[name]}
    gen = rows["generate fp32"]["seconds"]  # fp32 against fp32
    ct2 = rows["CT2 float32"]["seconds"] if "CT2 float32" in rows else None
    for row in rows.values():
        row["speedup_vs_generate"] = gen / row["seconds"]
        row["time_over_ct2_float32"] = row["seconds"] / ct2 if ct2 else None
    return rows


def print_table(title: str, rows: dict, n: int) -> None:
    print(f"\n{title}")
    print(f"{'contender':<17} {'seconds':>9} {'sent/s':>9} {'identical':>10} {'vs generate':>12} {'/ CT2 fp32':>11}")
    for name, r in rows.items():
        ct2 = r["time_over_ct2_float32"]
        print(f"{name:<17} {r['seconds']:>9.3f} {r['sentences_per_s']:>9.1f} "
              f"{r['identical_to_ours_fp32']:>6}/{n:<3} {r['speedup_vs_generate']:>11.2f}x "
              f"{'-' if ct2 is None else f'{ct2:.2f}':>11}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/multi30k-de-en", help="a trained run directory")
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of the corpora (../shared/data)")
    parser.add_argument("--sizes", default=None,
                        help="numbers of test sentences, comma-separated (default: 16,256; 16,256,1000 on CUDA)")
    parser.add_argument("--strategies", default="greedy,beam", help="greedy and/or beam, comma-separated")
    parser.add_argument("--beam", type=int, default=4, help="beam size of the beam strategy (default: 4)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty")
    parser.add_argument("--length-penalty", default="exponent", choices=("gnmt", "exponent", "none"),
                        help="ours' length penalty form (default exponent: |Y| ** alpha, the only one generate() and "
                        "CTranslate2 have; gnmt: ours' default for translation)")
    parser.add_argument("--max-len-b", type=int, default=50, help="maximum output length: source length + this")
    parser.add_argument("--stopping", default="k_finished", choices=("k_finished", "exact"),
                        help="beam stopping rule for all contenders (default k_finished: after beam_size finished "
                        "hypotheses, CTranslate2's and fairseq's rule; exact: ours exact, generate() 'never')")
    parser.add_argument("--ct2-patience", type=float, default=8.0,
                        help="CTranslate2 beam patience (1: its default; larger values search as long as ours)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="ours: padded source tokens x beam per batch (default: the Translator's for the device)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where every contender runs (default: cpu); cuda also sets --sizes 16,256,1000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per contender and table")
    parser.add_argument("--threads", type=int, default=None, help="torch and CTranslate2 threads (default: torch's)")
    parser.add_argument("--out", default=None, help="JSON results (default translate_speed.json; none with --quick)")
    parser.add_argument("--emulated-bf16", dest="bf16", action="store_true",
                        help="run 'ours bf16' even where the CPU has no bf16 matrix units (AVX-512 bf16 or AMX); "
                        "by default it runs only where it has them (elsewhere PyTorch emulates bf16, far slower)")
    parser.add_argument("--no-int8", action="store_true",
                        help="leave out ours' int8 contender (Translator(precision='int8'), what translate "
                             "--precision int8 runs; it runs by default on a CPU)")
    parser.add_argument("--quick", action="store_true", help="a check: 4 sentences, one round")
    parser.add_argument("--sentences", type=Path, default=None,
                        help="translate this file's lines (one source sentence each) instead of Multi30k test_2016")
    args = parser.parse_args()
    retain_freed_memory()  # for every contender alike: they share this process (transformer/cpu/allocator.py)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: PyTorch sees no CUDA device")
    args.bf16 = args.bf16 or fast_bf16(args.device)  # whether the workers build "ours bf16" (they get these args)
    args.sizes = args.sizes or ("16,256" if args.device == "cpu" else "16,256,1000")
    if args.quick:
        args.sizes, args.rounds = "4", 1
    elif args.out is None:
        args.out = "translate_speed.json"
    if args.threads:
        torch.set_num_threads(args.threads)

    run_dir = Path(args.run_dir)
    vocab = Vocabularies.load(run_dir)
    src, tgt = source_language(run_dir, "de")
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.sentences:
        corpus = str(args.sentences)
        sentences = args.sentences.read_text(encoding="utf-8").splitlines()[: max(sizes)]
        if len(sentences) < max(sizes):
            parser.error(f"--sentences {args.sentences} holds {len(sentences)} lines, fewer than --sizes asks for")
    else:
        corpus = f"multi30k {SPLIT} {src}->{tgt}"
        pairs = corpus_pairs("multi30k", src=src, tgt=tgt, split=SPLIT,
                             directory=fetch("multi30k", local_dir=args.data_dir))
        sentences = [s for s, _ in pairs[: max(sizes)]]

    info = {"machine": machine(), "run_dir": str(run_dir), "corpus": corpus,
            "rounds": args.rounds, "warmup": args.warmup, "length_penalty": args.length_penalty, "alpha": args.alpha,
            "max_len": f"source length + {args.max_len_b}", "stopping": args.stopping,
            "ct2_patience": args.ct2_patience if args.stopping == "exact" else 1.0, "ours_max_tokens": args.max_tokens,
            "ours_bf16": args.bf16, "tables": []}
    m = info["machine"]
    print(f"{m['cpu']}; {m['torch_threads']} threads ({m['logical_cpus']} logical CPUs); torch {m['torch']}, "
          f"transformers {m['transformers']}, ctranslate2 {m['ctranslate2']}")
    print(f"{run_dir}, {corpus}; median of {args.rounds} round(s), contenders alternating; "
          f"ours' CPU kernels (transformer.cpu): {'on' if m['cpu_kernels'] else 'off'}")
    if not args.bf16:
        print(bf16_left_out("pass --emulated-bf16 to run it anyway", what="ours bf16"))
    if not m["ctranslate2"]:
        print("CTranslate2 is not installed: its contenders are left out (pip install ctranslate2)")

    with tempfile.TemporaryDirectory(prefix="translate-speed-") as tmp:
        workers = Workers(Path(tmp), args)
        for strategy in args.strategies.split(","):
            decoding = decoding_for(strategy, args)
            for n in sizes:
                rows = measure(workers, strategy, sentences[:n], rounds=args.rounds, warmup=args.warmup)
                label = ("greedy" if strategy == "greedy" else
                         f"beam {args.beam}, {args.length_penalty} {args.alpha}, stopping {args.stopping}")
                print_table(f"{label}, {n} sentences", rows, n)
                info["tables"].append({"strategy": strategy, "beam_size": decoding.beam_size, "sentences": n,
                                       "rows": rows})
                if args.out:  # after each table: a run stopped midway keeps what it measured
                    Path(args.out).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        workers.close()
    need = 2 if args.device == "cpu" else 3  # times generate()'s speed (docs/benchmarks.md)
    print(f"\ntargets: ours >= {need}x generate(), ours / CT2 float32 <= 1.0 (where CTranslate2 ran)")
    for t in info["tables"]:
        for name in [name for name in t["rows"] if name.startswith("ours ")]:  # "ours bf16" may be left out
            r = t["rows"][name]
            ct2 = r["time_over_ct2_float32"]
            ok = r["speedup_vs_generate"] >= need and (ct2 is None or ct2 <= 1.0)
            r["targets_met"] = ok
            print(f"  {t['strategy']:<6} {t['sentences']:>4} sentences, {name}: {r['speedup_vs_generate']:.2f}x generate"
                  + ("" if ct2 is None else f", {ct2:.2f} of CT2 float32") + f" -> {'met' if ok else 'NOT met'}")
    if args.out:
        Path(args.out).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
