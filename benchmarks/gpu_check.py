"""The GPU check: every figure and test of the project's GPU paths in one command of at most 8 minutes.

    python benchmarks/gpu_check.py --out gpu-results                  # on a machine with a CUDA GPU
    python benchmarks/gpu_check.py --dry-run --out /tmp/gpu-dry       # every stage on the CPU, tiny: the wiring
    python benchmarks/gpu_check.py --prepare --from ../shared/data    # once, anywhere: what the check carries

Stages, in order of value, each a process of its own with its own time limit (a stage that fails or
runs out is reported and the next one runs; the limits fit in ``--budget``, 480 s):

1. ``tests``: the CUDA tests that need no trained model: a training step under CUDA's sync debug
   mode (nothing read back), compiled training following eager training from one compilation,
   batches copied ahead, and the Translator's GPU decoding (greedy, beam 4) equal to the CPU's;
2. ``train_step``: ``benchmarks/train_step.py``, base and big at 16,384 target tokens a step in
   bf16: ours eager and compiled (its compile time and recompilations reported apart) against
   torch.nn.Transformer and Hugging Face's Marian;
3. ``decoding``: ``benchmarks/translate_speed.py``, ours fp32 and bf16 against ``generate()`` fp32 and
   bf16, greedy and beam 4, 256 and 1,000 Multi30k test_2016 sentences, on the carried run
   (CTranslate2 where installed: a line says it is left out elsewhere);
4. ``serve``: ``benchmarks/serve_load.py``, the server under 64 clients on the GPU, where the
   server's packages are installed (else a line says why not);
5. ``multi30k``: ``benchmarks/multi30k.py``, the de -> en recipe trained for 2 minutes with
   ``train.compile=true`` and scored, if the time left allows it.

The header prints the GPU, the versions and the day's bf16 matmul peak. Two files go to ``--out``:
``gpu_check.json`` (the machine and every stage's status, seconds and figures, written again after
each stage, so a check cut short keeps what it finished) and ``gpu_check.log`` (everything printed).

**What it carries.** The decoding and serving stages need a trained Multi30k de -> en run and the
multi30k stage the corpus; ``--prepare`` makes both in ``runs/gpu-check/`` (ignored by git): it
trains the recipe on this machine for ``--steps`` (2,000 by default: a step count, so a busy
machine takes longer and makes the same model; about 9 minutes on 2 quiet cores, where a 30-minute
run took 6,900), keeps the files a translation reads (about 27 MB) and copies the corpus (2 MB). On this project's lent GPU machine
(the device tool's ``run``, from the repository root; Python 3.12 with torch and transformers,
without CTranslate2 or the server's packages) the check runs as it is:

    run(command="PYTHONPATH=. python3 benchmarks/gpu_check.py --out $OUT", carry=["runs/gpu-check"],
        timeout_s=540)

``--dry-run`` runs the same stages on the CPU at tiny sizes, on a run it trains in a few seconds and
the built-in corpus (no carried files), with the CPU backend ``eager`` for the compiled contender;
the CUDA tests skip there. ``tests/test_gpu_check.py`` runs it with the lent machine's missing
packages hidden.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, TextIO

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
CARRIED = Path("runs/gpu-check")  # relative to the repository root: run/ (a trained run) and data/multi30k/
RESULTS, LOG = "gpu_check.json", "gpu_check.log"
BUDGET = 480.0  # seconds for the whole check: of a lent machine's 15 minutes, a second shorter call still fits
MULTI30K_NEEDS = 230.0  # seconds the 2-minute run needs in all: data, compiling, training, scoring
# The CUDA tests that train nothing larger than a few tiny steps (none that uses test_cuda.py's demo-trained model).
TESTS = (
    "tests/test_cuda.py::test_a_gpu_training_step_never_waits_for_the_gpu",
    "tests/test_cuda.py::test_compiled_training_follows_eager_training",
    "tests/test_cuda.py::test_device_batches_copy_the_padded_batches_to_the_gpu",
    "tests/test_cuda.py::test_gpu_decoding_of_a_small_model_equals_the_cpus",
)
# Dry run: the recipe shrunk to seconds on a CPU (the built-in corpus, a one-layer model).
TINY_DATA = ["data.builtin_train=300", "data.builtin_valid=20", "data.builtin_test=20", "data.vocab_size=300",
             "data.max_tokens=600"]
TINY_MODEL = ["model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.n_encoder_layers=1",
              "model.n_decoder_layers=1"]


class Check:
    """The results file and the log, written as the stages end."""

    def __init__(self, out: Path, *, dry_run: bool, budget: float) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out, self.start, self.budget = out, time.monotonic(), budget
        self.log: TextIO = open(out / LOG, "a", encoding="utf-8")
        started = datetime.datetime.now().isoformat(timespec="seconds")
        self.results: dict[str, Any] = {"dry_run": dry_run, "started": started, "budget_seconds": budget,
                                        "machine": {}, "stages": []}
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        with self._lock:
            print(text, flush=True)
            self.log.write(text + "\n")
            self.log.flush()

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def save(self) -> None:
        self.results["seconds"] = round(time.monotonic() - self.start, 1)
        tmp = self.out / f".{RESULTS}.tmp"
        tmp.write_text(json.dumps(self.results, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.out / RESULTS)

    def record(self, name: str, status: str, **fields: Any) -> dict:
        entry = {"name": name, "status": status, **fields}
        self.results["stages"].append(entry)
        self.save()
        return entry

    def skip(self, name: str, why: str) -> None:
        self.say(f"== {name}: skipped: {why}")
        self.record(name, "skipped", reason=why)

    def run(self, name: str, command: list[str], cap: float, *,
            read: Callable[[list[str]], Any] | None = None) -> dict:
        """Run one stage's process with the time limit ``min(cap, time left)``; record how it ended and what
        ``read(lines)`` makes of its results (read too when the stage was cut short: it may have written some)."""
        limit = min(cap, self.left() - 5)
        if limit < min(cap, 10):  # too little time left for the stage to do anything
            self.skip(name, f"{max(self.left(), 0):.0f} s of the check's {self.budget:.0f} s left")
            return {}
        self.say(f"== {name} (limit {limit:.0f} s): {shlex.join(command)}")
        lines: list[str] = []
        started, cpu = time.monotonic(), _children_cpu()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True,  # its children are stopped with it
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": _python_path()})

        def echo() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.append(line.rstrip("\n"))
                self.say(f"  {lines[-1]}")

        reader = threading.Thread(target=echo, daemon=True)
        reader.start()
        try:
            code: int | None = proc.wait(timeout=limit)
            status = "done" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code, status = None, "timed out"
        reader.join(timeout=10)
        seconds, cpu = round(time.monotonic() - started, 1), round(_children_cpu() - cpu, 1)
        try:
            result = read(lines) if read else None
        except (OSError, ValueError, KeyError) as err:  # a stage cut short may leave nothing to read
            result = {"unreadable": f"{type(err).__name__}: {err}"}
        self.say(f"== {name}: {status}" + (f" (exit {code})" if status == "failed" else "")
                 + f" after {seconds} s ({cpu} s of CPU)")
        return self.record(name, status, exit_code=code, seconds=seconds, cpu_seconds=cpu, limit_seconds=round(limit),
                           command=command, result=result)


def _children_cpu() -> float:
    """CPU seconds of this process's ended children (and theirs), user and system."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _python_path() -> str:
    parts = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(parts))


# ------------------------------------------------------------------------------------------ machine
def machine(check: Check, *, dry_run: bool) -> None:
    """The GPU, the versions and the day's bf16 matmul peak: the header, and ``results["machine"]``."""
    import torch

    sys.path.insert(0, str(BENCHMARKS))
    from train_step import matmul_peak

    on_gpu = torch.cuda.is_available() and not dry_run
    device = torch.device("cuda" if on_gpu else "cpu")
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                            "device": torch.cuda.get_device_name() if on_gpu else f"CPU ({platform.machine()})",
                            "driver": _driver() if on_gpu else None,
                            "packages": {name: _version(name) for name in
                                         ("transformers", "tokenizers", "triton", "ctranslate2", "fastapi", "uvicorn")}}
    if on_gpu:
        props = torch.cuda.get_device_properties(0)
        info.update(capability=f"{props.major}.{props.minor}", memory_gib=round(props.total_memory / 2**30, 1),
                    multiprocessors=props.multi_processor_count)
    sizes = (128,) if dry_run else None  # a dry run's peak is a check of the code, not a figure
    peak = matmul_peak(torch.bfloat16, sizes=sizes, device=device)
    info["bf16_matmul_peak_tflops"] = round(peak / 1e12, 1) if peak >= 1e12 else round(peak / 1e12, 6)
    if on_gpu:
        torch.cuda.empty_cache()
    check.results["machine"] = info
    check.save()
    versions = ", ".join(f"{k} {v}" for k, v in info["packages"].items() if v)
    missing = ", ".join(k for k, v in info["packages"].items() if not v)
    check.say(f"{info['device']}{', driver ' + info['driver'] if info['driver'] else ''}; python {info['python']}, "
              f"torch {info['torch']} (CUDA {info['cuda']}), {versions}"
              + (f"; not installed: {missing}" if missing else ""))
    shown = f"{peak / 1e12:,.1f} TFLOP/s" if peak >= 1e12 else f"{peak / 1e9:,.2f} GFLOP/s"
    check.say(f"bf16 matmul peak today: {shown}" + (" (a dry run's: tiny products on the CPU, not a figure)"
                                                     if dry_run else ""))


def _driver() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def _version(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "installed"


# ------------------------------------------------------------------------------------------ reading results
def read_junit(path: Path) -> Callable[[list[str]], dict]:
    def read(lines: list[str]) -> dict:
        import xml.etree.ElementTree as ET

        tests = {}
        for case in ET.parse(path).getroot().iter("testcase"):
            entry: dict[str, Any] = {"outcome": "passed", "seconds": round(float(case.get("time", 0)), 1)}
            for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
                found = case.find(tag)
                if found is not None:
                    entry["outcome"] = outcome
                    entry["message"] = (found.get("message") or "").strip()[:300]
            tests[f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"] = entry
        counts = {o: sum(t["outcome"] == o for t in tests.values()) for o in ("passed", "failed", "error", "skipped")}
        return {**counts, "tests": tests}
    return read


def read_json(path: Path, keep: Callable[[dict], Any] = lambda doc: doc) -> Callable[[list[str]], Any]:
    return lambda lines: keep(json.loads(path.read_text(encoding="utf-8")))


def last_json_line(lines: list[str]) -> dict:
    return json.loads(next(line for line in reversed(lines) if line.lstrip().startswith("{")))


def train_step_summary(doc: dict) -> dict:
    """The rows, and per size ours (eager, compiled) against the fastest peer."""
    sizes: dict[str, dict] = {}
    for row in doc["rows"]:
        sizes.setdefault(f"{row['size']}, {row['shape']}, {row['dtype']}", {})[row["contender"]] = row
    summary = {}
    for key, rows in sizes.items():
        peers = [r for name, r in rows.items() if not name.startswith("ours")]
        fastest = max(peers, key=lambda r: r["tokens_per_s"]) if peers else None
        summary[key] = {name: {"tokens_per_s": round(r["tokens_per_s"]), "share_of_peak": round(r["share_of_peak"], 4),
                               **({"over_fastest_peer": round(r["tokens_per_s"] / fastest["tokens_per_s"], 3)}
                                  if fastest and name.startswith("ours") else {}),
                               **{k: r[k] for k in ("compiled", "compile_seconds", "recompiles", "compile_failure")
                                  if k in r}} for name, r in rows.items()}
    return {"peaks": doc.get("peaks"), "device": doc.get("device"), "sizes": summary}


def translate_summary(doc: dict) -> dict:
    """Each table's sentences/s, outputs identical to ours fp32 and speed over generate() fp32."""
    return {"machine": doc.get("machine"), "run_dir": doc.get("run_dir"), "corpus": doc.get("corpus"),
            "tables": [{"strategy": t["strategy"], "beam_size": t["beam_size"], "sentences": t["sentences"],
                        "rows": {name: {"sentences_per_s": round(r["sentences_per_s"], 1),
                                        "identical_to_ours_fp32": r["identical_to_ours_fp32"],
                                        "speedup_vs_generate": round(r["speedup_vs_generate"], 3),
                                        "targets_met": r.get("targets_met")}
                                 for name, r in t["rows"].items()}} for t in doc.get("tables", [])]}


def multi30k_summary(doc: dict) -> dict:
    last = doc["milestones"][-1]
    return {"train_steps": doc["train_steps"], "train_seconds": doc["train_seconds"], "epochs": doc["epochs"],
            "target_tokens": doc["target_tokens"], "precision": doc["precision"], "device": doc["device"],
            "valid_bleu": last["valid"]["bleu"], "test_bleu": last["test"]["bleu"],
            "best_on_validation": doc["final"]["best_on_validation"], "wall_seconds": doc["wall_seconds"]}


# ------------------------------------------------------------------------------------------ the stages
def stages(check: Check, args: argparse.Namespace, work: Path) -> None:
    py = sys.executable
    dry = args.dry_run
    wanted = set(args.stages)
    run_dir, data = args.carried / "run", args.carried / "data"
    if dry:
        run_dir, data, sentences = tiny_run(work)
    else:
        sentences = None

    if "tests" in wanted:
        junit = work / "junit.xml"
        check.run("tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *TESTS],
                  60 if dry else 120, read=read_junit(junit))

    if "train_step" in wanted:
        out = work / "train_step.json"
        sizes = ["--sizes", "tiny", "--tokens", "256", "--steps", "1", "--rounds", "1", "--dtypes", "fp32",
                 "--vocab", "500", "--peak-sizes", "128", "--compile-backend", "eager"] if dry else \
            ["--sizes", "base", "big", "--tokens", "16384", "--steps", "4", "--rounds", "3", "--dtypes", "bf16"]
        check.run("train_step", [py, str(BENCHMARKS / "train_step.py"), "--device", "cpu" if dry else "cuda",
                                 "--shapes", "tokens", *sizes, "--contenders", *CONTENDERS, "--out", str(out)],
                  120 if dry else 170, read=read_json(out, train_step_summary))

    trained = (run_dir / "model.safetensors").is_file()
    if "decoding" in wanted:
        if not trained:
            check.skip("decoding", f"no trained run in {run_dir}: make it with python benchmarks/gpu_check.py "
                                   "--prepare, and carry it")
        else:
            out = work / "translate_speed.json"
            source = ["--sentences", str(sentences), "--sizes", "2", "--rounds", "1", "--warmup", "0",
                      "--max-len-b", "4", "--no-int8"] if dry else ["--from", str(data), "--sizes", "256,1000",
                                                                     "--rounds", "2"]
            check.run("decoding", [py, str(BENCHMARKS / "translate_speed.py"), "--device", "cpu" if dry else "cuda",
                                   "--run-dir", str(run_dir), "--strategies", "greedy,beam", "--beam", "4",
                                   *source, "--out", str(out)],
                      120, read=read_json(out, translate_summary))

    if "serve" in wanted:
        missing = _server_missing()
        if missing:
            check.skip("serve", f"the server cannot start here ({missing})")
        elif not trained:
            check.skip("serve", f"no trained run in {run_dir}")
        else:
            load = ["--clients", "4", "--seconds", "2", "--sentences", str(sentences)] if dry else \
                ["--clients", "64", "--seconds", "15", "--sentences", str(data / "multi30k" / "test_2016_flickr.de.gz")]
            check.run("serve", [py, str(BENCHMARKS / "serve_load.py"), str(run_dir), "--device",
                                "cpu" if dry else "cuda", "--modes", "dynamic", "--overload-requests", "0", *load],
                      60, read=last_json_line)

    if "multi30k" in wanted:
        m30k = work / "multi30k"
        if dry:
            command = ["--corpus", "builtin", "--src-lang", "fr", "--minutes", "0.02", "--peak-sizes", "128",
                       "--valid-sentences", "2", "--test-sentences", "2", "--average", "1", "--target", "0",
                       *[x for s in [*TINY_DATA, *TINY_MODEL, "train.eval_sentences=0"] for x in ("--set", s)]]
        elif not (data / "multi30k").is_dir():
            check.skip("multi30k", f"no corpus in {data}: make it with python benchmarks/gpu_check.py --prepare")
            return
        elif check.left() < MULTI30K_NEEDS:
            check.skip("multi30k", f"{check.left():.0f} s left, it needs about {MULTI30K_NEEDS:.0f}")
            return
        else:
            command = ["--src-lang", "de", "--minutes", "2", "--set", "train.device=cuda", "--set", "train.compile=true",
                       "--from", str(data)]
        check.run("multi30k", [py, str(BENCHMARKS / "multi30k.py"), *command, "--run-dir", str(m30k)],
                  120 if dry else check.left(), read=read_json(m30k / "benchmark.json", multi30k_summary))


def _server_missing() -> str | None:
    """Why ``transformer serve`` cannot start in this environment (a missing package), or None."""
    try:
        import transformer.serve.app  # noqa: F401
    except ImportError as err:
        return f"{type(err).__name__}: {err}"
    return None


def tiny_run(work: Path) -> tuple[Path, Path, Path]:
    """A dry run's stand-ins for the carried files: a run trained for a few steps on the built-in corpus, no
    corpus folder (the multi30k stage reads the built-in one) and a file of its test sources."""
    from transformer.run.config import RunConfig
    from transformer.training.trainer import Trainer

    run_dir = work / "tiny-run"
    cfg = RunConfig().with_overrides([*TINY_DATA, *TINY_MODEL, "train.max_steps=4", "train.eval_sentences=0",
                                      "train.threads=1", "train.tensorboard=false", "train.alignment_sentences=0"])
    trainer = Trainer(cfg, run_dir, show_progress=False)
    trainer.train()
    sentences = work / "sentences.txt"
    sentences.write_text("".join(s + "\n" for s, _ in trainer.data.test_text[:8]), encoding="utf-8")
    return run_dir, work / "no-data", sentences


# ------------------------------------------------------------------------------------------ --prepare
def prepare(args: argparse.Namespace) -> None:
    """Train the Multi30k de -> en recipe for ``--steps`` here and keep what the check carries."""
    sys.path.insert(0, str(BENCHMARKS))
    from multi30k import recipe

    from transformer.corpus.registry import fetch
    from transformer.run.layout import CONFIG_FILE, METRICS_FILE, RUN_CONFIG_FILE, TOKENIZER_FILES, WEIGHTS_FILE
    from transformer.training.trainer import Trainer

    target = ROOT / args.carried
    if target.exists():
        raise SystemExit(f"{target} exists: remove it to prepare it again")
    source = fetch("multi30k", local_dir=args.data_dir, progress=False)
    with tempfile.TemporaryDirectory(prefix="gpu-check-prepare-") as tmp:
        run_dir = Path(tmp) / "run"
        cfg = recipe(corpus="multi30k", src="de", tgt="en", data_dir=args.data_dir, minutes=1,  # the steps decide
                     overrides=[f"train.max_steps={args.steps}", "train.time_limit=null"])
        Trainer(cfg, run_dir).train()
        (target / "run").mkdir(parents=True)
        for name in (CONFIG_FILE, WEIGHTS_FILE, RUN_CONFIG_FILE, METRICS_FILE, *TOKENIZER_FILES):
            if (run_dir / name).is_file():
                shutil.copy2(run_dir / name, target / "run" / name)
    shutil.copytree(source, target / "data" / "multi30k", copy_function=shutil.copyfile)  # writable copies
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"{target}: a {args.steps:,}-step Multi30k de -> en run and the corpus, {size / 2**20:.1f} MiB to carry")


# ------------------------------------------------------------------------------------------ main
def summary(check: Check) -> None:
    """The figures worth a glance, after every stage."""
    check.say("\n== summary")
    for stage in check.results["stages"]:
        result = stage.get("result") or {}
        line = f"{stage['name']}: {stage['status']}" + (f" ({stage['reason']})" if stage.get("reason") else "") \
            + (f", {stage['seconds']} s" if "seconds" in stage else "")
        if stage["name"] == "tests" and "tests" in result:
            line += (f"; {result['passed']} passed, {result['failed'] + result['error']} failed, "
                     f"{result['skipped']} skipped")
        check.say(line)
        for key, rows in (result.get("sizes") or {}).items():
            check.say(f"  {key}: " + ", ".join(
                f"{name} {r['tokens_per_s']:,} tok/s" + (f" ({r['over_fastest_peer']:.2f}x fastest peer)"
                                                          if "over_fastest_peer" in r else "")
                + (f" [compiled in {r['compile_seconds']:.0f} s, {r['recompiles']} recompilation(s)"
                   f"{'' if r['compiled'] else ', FELL BACK TO EAGER'}]" if "compiled" in r else "")
                for name, r in rows.items()))
        for table in result.get("tables") or []:
            check.say(f"  {table['strategy']} {table['sentences']}: " + ", ".join(
                f"{name} {r['sentences_per_s']:,} sent/s ({r['speedup_vs_generate']:.2f}x generate)"
                for name, r in table["rows"].items()))
        if "test_bleu" in result:
            check.say(f"  test BLEU {result['test_bleu']} after {result['train_steps']} steps "
                      f"({result['train_seconds']} s of training)")
    check.say(f"results: {check.out / RESULTS}; log: {check.out / LOG}")


STAGES = ("tests", "train_step", "decoding", "serve", "multi30k")
CONTENDERS = ("ours", "ours (compiled)", "torch.nn.Transformer", "Marian")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None,
                        help=f"folder for {RESULTS} and {LOG} (made if missing; needed but with --prepare)")
    parser.add_argument("--dry-run", action="store_true",
                        help="every stage on the CPU at tiny sizes, on a run trained on the spot: the wiring")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES),
                        help="the stages to run, in their order (default: all)")
    parser.add_argument("--budget", type=float, default=None,
                        help=f"seconds for the whole check (default: {BUDGET:.0f}; 600 with --dry-run)")
    parser.add_argument("--carried", type=Path, default=CARRIED,
                        help=f"the carried run/ and data/ (default: {CARRIED}, relative to the repository root)")
    parser.add_argument("--prepare", action="store_true",
                        help="train the run and copy the corpus the check carries into --carried, then stop")
    parser.add_argument("--steps", type=int, default=2000, help="--prepare: steps of training (default: 2000)")
    parser.add_argument("--from", dest="data_dir", default=None,
                        help="--prepare: a local copy of the corpora (../shared/data); else Multi30k is downloaded")
    args = parser.parse_args(argv)
    if not args.carried.is_absolute():
        args.carried = ROOT / args.carried
    if args.prepare:
        prepare(args)
        return 0
    if args.out is None:
        parser.error("--out is needed: the folder for the results")
    check = Check(args.out, dry_run=args.dry_run, budget=args.budget or (600.0 if args.dry_run else BUDGET))
    check.say(f"GPU check{' (dry run, on the CPU)' if args.dry_run else ''}, {check.results['started']}, "
              f"budget {check.budget:.0f} s")
    machine(check, dry_run=args.dry_run)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        stages(check, args, Path(tmp))
    summary(check)
    check.save()
    return 0 if all(s["status"] in ("done", "skipped") for s in check.results["stages"]) else 1


if __name__ == "__main__":
    sys.exit(main())
