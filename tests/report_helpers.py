"""A fake run directory for the report tests: the files a training run writes, with known numbers.

``make_run`` writes run_config.json, config.json, metrics.jsonl (a train record every 50 steps,
a valid record every 100) and, unless told not to, alignments.jsonl in the trainer's format: at
evaluation k of K, every head's weights are ``(1 - a) * uniform + a * alignment`` with
``a = k / (K - 1)``, so the first snapshot is uniform and the last the word alignment.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SRC = ["je", "suis", "étudi", "·ant", "."]
TGT = ["i", "am", "a", "student", ".", "</s>"]
# the source token each target token aligns with ("a" and "student" both with "étudi")
ALIGN = [0, 1, 2, 2, 4, 4]
LAYERS, HEADS = 2, 2
TRAIN_EVERY, EVAL_EVERY, STEPS = 50, 100, 400


def train_records() -> list[dict]:
    return [{"kind": "train", "step": s, "epoch": s // 200, "loss": 8.0 * 0.8 ** (s / 50) + 0.3 * (s % 100 == 0),
             "lr": 1e-3 * min(s / 200, (200 / s) ** 0.5), "tokens_per_s": 1000.0 + 7 * s - (s % 150),
             "grad_norm": 3.0 / (1 + s / 100)} for s in range(TRAIN_EVERY, STEPS + 1, TRAIN_EVERY)]


def valid_records() -> list[dict]:
    return [{"kind": "valid", "step": s, "epoch": s // 200, "loss": 6.0 - s / 100, "nll": 5.5 - s / 100,
             "ppl": float(np.exp(5.5 - s / 100)), "bleu": 2.0 + s / 20, "chrf": 15.0 + s / 10,
             "exact_match": s / 1000, "sentences": 50} for s in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)]


def snapshot_weights(k: int, n: int, src=SRC, tgt=TGT, align=ALIGN) -> np.ndarray:
    """(layers, heads, tgt, src) weights of evaluation ``k`` of ``n``, rounded to 3 decimals as the trainer does."""
    a = k / max(n - 1, 1)
    hard = np.zeros((len(tgt), len(src)))
    hard[np.arange(len(tgt)), align] = 1.0
    weights = np.empty((LAYERS, HEADS, len(tgt), len(src)))
    for layer in range(LAYERS):
        for head in range(HEADS):
            sharp = a * (0.6 + 0.2 * head + 0.1 * layer) if layer or head else a
            weights[layer, head] = (1 - sharp) / len(src) + sharp * hard
    return np.round(weights, 3)


def alignment_lines(src=SRC, tgt=TGT, align=ALIGN) -> list[dict]:
    steps = [r["step"] for r in valid_records()]
    return [{"step": s, "epoch": s // 200, "sentences": [
        {"index": 3, "src_tokens": src, "tgt_tokens": tgt, "layers": snapshot_weights(k, len(steps), src, tgt, align).tolist()},
        {"index": 9, "src_tokens": src[:3], "tgt_tokens": tgt[:2] + ["</s>"],
         "layers": snapshot_weights(k, len(steps), src[:3], tgt[:2] + ["</s>"], [0, 1, 2]).tolist()},
    ]} for k, s in enumerate(steps)]


def make_run(path: Path, *, alignments: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    config = {"data": {"corpus": "builtin", "src_lang": "fr", "tgt_lang": "en", "max_tokens": 2500},
              "model": {"preset": "tiny", "n_heads": HEADS, "n_decoder_layers": LAYERS},
              "train": {"device": "cpu", "precision": "fp32", "threads": 2, "log_every": TRAIN_EVERY,
                        "eval_every": EVAL_EVERY, "alignment_sentences": 2}}
    (path / "run_config.json").write_text(json.dumps(config), encoding="utf-8")
    (path / "config.json").write_text(json.dumps({"d_model": 32, "n_heads": HEADS, "n_encoder_layers": 2,
                                                  "n_decoder_layers": LAYERS}), encoding="utf-8")
    records = sorted(train_records() + valid_records(), key=lambda r: (r["step"], r["kind"] == "valid"))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
    if alignments:
        (path / "alignments.jsonl").write_text(
            "".join(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in alignment_lines()),
            encoding="utf-8")
    return path


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` and its bytes (to check that nothing was written)."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# Strings that run script if a page inserts them as markup; each says which one fired.
HOSTILE = {"epoch": "<img src=x onerror=alert(7)>", "d_model": "<img src=x onerror=alert(1)>",
           "n_heads": "</script><script>alert(2)</script>", "layers": "<svg onload=alert(3)>",
           "token": "<img src=x onerror=alert(4)>", "section": "</script><b onclick=alert(5)>x",
           "setting": "<iframe srcdoc='<script>alert(6)</script>'>", "summary": "<script>alert(8)</script>",
           "host": "<img src=x onerror=alert(9)>", "loss": "<b>not a number</b>"}


def make_hostile_run(path: Path) -> Path:
    """A run directory whose every file carries markup where the trainer writes plain values: epochs,
    model sizes, settings, tokens, summaries and the lock's host as strings of HTML, a validation loss
    as a string and another as NaN."""
    make_run(path)
    records = sorted(train_records() + valid_records(), key=lambda r: (r["step"], r["kind"] == "valid"))
    for r in records:
        r["epoch"] = HOSTILE["epoch"]
    valid = [r for r in records if r["kind"] == "valid"]
    valid[-1]["loss"] = HOSTILE["loss"]  # the last evaluation: the one the summary and the timeline show
    valid[0]["loss"] = float("nan")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (path / "config.json").write_text(json.dumps({
        "d_model": HOSTILE["d_model"], "n_heads": HOSTILE["n_heads"], "n_encoder_layers": HOSTILE["layers"],
        "n_decoder_layers": LAYERS}), encoding="utf-8")
    config = json.loads((path / "run_config.json").read_text(encoding="utf-8"))
    config[HOSTILE["section"]] = {HOSTILE["setting"]: HOSTILE["setting"]}
    config["train"]["precision"] = HOSTILE["setting"]
    (path / "run_config.json").write_text(json.dumps(config), encoding="utf-8")
    tokens = SRC[:-1] + [HOSTILE["token"]]
    lines = alignment_lines(src=tokens)
    for line in lines:
        line["epoch"] = HOSTILE["epoch"]
    (path / "alignments.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    (path / "benchmark.json").write_text(json.dumps({HOSTILE["summary"]: HOSTILE["summary"]}), encoding="utf-8")
    (path / ".lock").write_text(json.dumps({"pid": 1, "host": HOSTILE["host"], "started": HOSTILE["epoch"]}))
    return path
