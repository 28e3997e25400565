"""Quality does not pay for speed: every fast inference path scored against fp32, same checkpoint.

Translates Multi30k test_2016_flickr (1,000 sentences; the run's language pair) with beam 4,
length penalty 0.6 (the paper's settings, as ``benchmarks/multi30k.py`` scores) using the
weights of one trained run directory (``model.safetensors``) on each path:

* fp32: the reference, the model's own code, PyTorch's operators only: its ``Translator`` is
  built with ``TRANSFORMER_FUSED_CPU=0`` (set for that construction only), so the CPU engine
  (``transformer.cpu``) does not prepare its model;
* kernels: fp32 with the engine's decoding kernels (what ``Translator`` does on CPU by default,
  ``transformer.cpu.prepare_for_decoding(model, precision="fp32")``): linear layers from packed
  weights, a decoder layer's step in one call, attention for decoding steps, the best tokens of
  each row in one pass;
* bf16: a bfloat16 copy of the weights (``Translator(precision="bf16")``); by default only where the CPU
  has bf16 matrix units (AVX-512 bf16 or AMX): elsewhere PyTorch emulates bf16 products, far
  slower than fp32, and the path runs only when asked for (``--paths bf16``);
* int8: ``Translator(precision="int8")`` (``translate --precision int8``): int8 copies of the
  linear layers' weights (one scale per output feature; activations and sums in float32) in the
  engine's decoding kernels, at every batch size (``prepare_for_decoding(model,
  precision="int8")``); an error row where the kernels are off or cannot be built;
* compile: a copy of the model whose encoder and decoder stacks go through
  ``torch.compile(dynamic=True)`` (inductor, fp32). Compile time is measured separately: the
  first translation of a few sentences, which triggers the compilation, minus the same
  translation's fp32 time; the test-set time that follows is the steady state. The engine is not
  applied on this path (built like fp32: inductor traces PyTorch's operators, not kernel calls).

Every path translates with its own copy of the checkpoint's model, so that no path's preparation
(the engine swaps a model's modules in place) reaches another's.

Each path first translates 16 sentences untimed (warm-up), then the paths take turns translating
the test set (``--repeats`` passes, default 2; the fastest pass counts).
For each path: sacreBLEU and chrF (cased, detokenized; signature printed), decode seconds, speed
against fp32, the share of translations identical to fp32, and the BLEU difference from fp32; a
drop of more than 0.3 BLEU is marked FAIL. A path that does not run with this torch build is
reported with its error instead.

    python benchmarks/fast_paths.py --run-dir runs/multi30k-de-en --from ../shared/data --out fast_paths.json
    python benchmarks/fast_paths.py --quick --from ../shared/data      # 100 sentences, to check the script
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from transformer.corpus.registry import corpus_pairs, fetch
from transformer.decoding import DecodeConfig
from transformer.translate.evaluation import score
from transformer.cpu import ENV_SWITCH, available as cpu_kernels_available
from transformer.cpu.training_precision import bf16_left_out, fast_bf16
from transformer.text import Vocabularies
from transformer.run.model import load_model
from transformer.run.config import RunConfig
from transformer.translate.translator import Translator

PATHS = ("fp32", "kernels", "bf16", "int8", "compile")
WITHOUT_KERNELS = ("fp32", "compile")  # paths whose Translator is built with the CPU engine switched off
MAX_BLEU_DROP = 0.3
WARMUP_SENTENCES = 16  # translated once per path before timing (on the compiled path: the compilation)


def test_set(run_dir: Path, data_dir: str | None, split: str) -> tuple[list[str], list[str], str]:
    """Multi30k sources and references for the run's language pair."""
    data = RunConfig.from_dict(json.loads((run_dir / "run_config.json").read_text())).data
    pairs = corpus_pairs("multi30k", src=data.src_lang, tgt=data.tgt_lang, split=split,
                         directory=fetch("multi30k", local_dir=data_dir))
    return [s for s, _ in pairs], [t for _, t in pairs], f"{data.src_lang}-{data.tgt_lang}"


def compiled_model(model: nn.Module, backend: str = "inductor") -> nn.Module:
    """A copy of ``model`` whose encoder and decoder stacks are compiled (dynamic shapes).

    The stacks rather than ``encode``/``decode``: those check their inputs by reading values back
    (``int(ids.max())``), which would break the graph on every call.
    """
    compiled = copy.deepcopy(model)
    compiled.encoder = torch.compile(compiled.encoder, dynamic=True, backend=backend)
    compiled.decoder = torch.compile(compiled.decoder, dynamic=True, backend=backend)
    return compiled


@contextmanager
def engine_off():
    """``TRANSFORMER_FUSED_CPU=0`` while a Translator is built (so it leaves its model unprepared),
    the previous value restored after."""
    before = os.environ.get(ENV_SWITCH)
    os.environ[ENV_SWITCH] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_SWITCH, None)
        else:
            os.environ[ENV_SWITCH] = before


def _error(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/multi30k-de-en", help="a trained run directory")
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of the corpora (e.g. ../shared/data)")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--quick", action="store_true", help="the first 100 test sentences only")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=None,
                        help="fp32 is always run; default: all of them, bf16 only where the CPU has bf16 matrix "
                        "units (AVX-512 bf16 or AMX)")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile backend (default inductor; 'eager' checks the tracing alone)")
    parser.add_argument("--repeats", type=int, default=2, help="passes over the test set per path (fastest kept)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    default_paths = [p for p in PATHS if p != "bf16" or fast_bf16("cpu")]  # emulated bf16: far slower than fp32
    leave_out_bf16 = args.paths is None and "bf16" not in default_paths
    args.paths = args.paths or default_paths

    run_dir = Path(args.run_dir)
    sources, references, direction = test_set(run_dir, args.data_dir, args.split)
    if args.quick:
        sources, references = sources[:100], references[:100]
    beam = DecodeConfig(strategy="beam", beam_size=4, alpha=0.6)
    model = load_model(run_dir).requires_grad_(False)  # frozen, as Translator.from_run_dir loads it
    vocab = Vocabularies.load(run_dir)
    print(f"{run_dir} ({direction}, {model.num_parameters():,} parameters), {len(sources)} sentences of "
          f"multi30k {args.split}, beam 4, alpha 0.6; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"CPU kernels (transformer.cpu): {'on' if cpu_kernels_available() else 'off'}")
    if leave_out_bf16:
        print(bf16_left_out("name it in --paths to run it anyway (e.g. --paths bf16 kernels int8 compile)"), flush=True)

    def build(path: str) -> Translator:
        """The path's translator, on a copy of the model of its own (the engine prepares it in place)."""
        copied = copy.deepcopy(model)
        if path in WITHOUT_KERNELS:
            with engine_off():  # the engine leaves this model as it is: the model's own code
                if path == "compile":
                    copied = compiled_model(copied, args.compile_backend)
                return Translator(copied, vocab, decoding=beam)
        if path in ("bf16", "int8"):
            return Translator(copied, vocab, decoding=beam, precision=path)
        return Translator(copied, vocab, decoding=beam)  # kernels: fp32, prepared for the decoding kernels

    def translator(path: str) -> tuple[Translator, float]:
        """The path's translator, warmed up, and its compile time (seconds; 0 for eager paths)."""
        warm = sources[:WARMUP_SENTENCES]
        tr = build(path)
        t0 = time.perf_counter()
        run(tr, warm)  # kernels chosen, libraries loaded; on the compiled path: the compilation
        first = time.perf_counter() - t0
        if path != "compile":
            return tr, 0.0
        t0 = time.perf_counter()
        run(translators["fp32"], warm)
        return tr, max(0.0, first - (time.perf_counter() - t0))

    def run(tr: Translator, texts: list[str]) -> list[str]:
        return tr.translate(texts)

    rows: dict[str, dict] = {}
    translators: dict[str, Translator] = {}
    outputs: dict[str, list[str]] = {}
    order = ["fp32"] + [p for p in args.paths if p != "fp32"]
    for path in order:
        rows[path] = {"path": path}
        try:
            t0 = time.perf_counter()
            translators[path], compile_s = translator(path)
            rows[path]["setup_seconds"] = round(time.perf_counter() - t0, 2)
            if path == "compile":
                rows[path]["compile_seconds"] = round(compile_s, 2)
        except Exception as err:  # a path this torch build cannot run is reported, not fatal
            rows[path]["error"] = _error(err)
            print(f"  {path}: error: {rows[path]['error']}", flush=True)
    for round_ in range(args.repeats):  # the contenders alternate; each keeps its fastest pass
        for path in [p for p in order if p in translators]:
            try:
                t0 = time.perf_counter()
                hyps = run(translators[path], sources)
                seconds = time.perf_counter() - t0
            except Exception as err:
                rows[path]["error"] = _error(err)
                del translators[path]
                print(f"  {path}: error: {rows[path]['error']}", flush=True)
                continue
            if path in outputs and hyps != outputs[path]:
                rows[path]["nondeterministic"] = True
            outputs[path] = hyps
            rows[path]["decode_seconds"] = round(min(seconds, rows[path].get("decode_seconds", seconds)), 2)
            print(f"  pass {round_ + 1}: {path} {seconds:.2f} s", flush=True)
    for path in outputs:
        s = score(outputs[path], references)
        rows[path].update(bleu=round(s.bleu, 2), chrf=round(s.chrf, 2), signature=s.bleu_signature)
    rows = list(rows.values())

    fp32 = rows[0]
    if "bleu" not in fp32:
        raise SystemExit(f"the fp32 reference did not run: {fp32.get('error')}")
    for row in rows:
        if "bleu" not in row:
            continue
        row["bleu_vs_fp32"] = round(row["bleu"] - fp32["bleu"], 2)
        row["speedup_vs_fp32"] = round(fp32["decode_seconds"] / row["decode_seconds"], 2)
        same = sum(a == b for a, b in zip(outputs[row["path"]], outputs["fp32"]))
        row["identical_to_fp32"] = round(same / len(sources), 4)
        row["verdict"] = "FAIL" if row["bleu_vs_fp32"] < -MAX_BLEU_DROP else "ok"

    print(f"\n{'path':<12} {'BLEU':>6} {'chrF':>6} {'vs fp32':>8} {'decode s':>9} {'speed':>6} "
          f"{'same as fp32':>12} {'compile s':>9}  verdict (FAIL: BLEU drop > {MAX_BLEU_DROP})")
    for row in rows:
        if "bleu" not in row:
            print(f"{row['path']:<12} did not run: {row['error']}")
            continue
        compile_s = f"{row['compile_seconds']:9.1f}" if "compile_seconds" in row else f"{'-':>9}"
        print(f"{row['path']:<12} {row['bleu']:>6.2f} {row['chrf']:>6.2f} {row['bleu_vs_fp32']:>+8.2f} "
              f"{row['decode_seconds']:>9.2f} {row['speedup_vs_fp32']:>5.2f}x {row['identical_to_fp32']:>12.1%} "
              f"{compile_s}  {row['verdict']}")
    print(f"signature: {fp32.get('signature')}")

    if args.out:
        summary = {"run_dir": str(run_dir), "direction": direction, "split": args.split, "sentences": len(sources),
                   "decoding": "beam 4, alpha 0.6", "max_bleu_drop": MAX_BLEU_DROP, "torch": torch.__version__,
                   "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                   "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu_bf16_units": fast_bf16("cpu"),
                   "cpu_kernels": cpu_kernels_available(),
                   "results": rows}
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
