"""Progress output: a bar on a terminal, plain lines otherwise; metrics log; training curve."""

import io
import json

from transformer.run.metrics import MetricsLog, plot_training_curve
from transformer.training.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    p = Progress(total_steps=100, log_every=10, stream=out)
    for step in range(1, 31):
        p.update(step, loss=2.5, lr=1e-3, tokens_per_s=1234.0, epoch=0)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("step 10/100 epoch 0 loss 2.5000 lr 1.000e-03 1,234 tok/s") and "eta" in lines[0]


def test_progress_bar_on_a_terminal():
    out = FakeTerminal()
    p = Progress(total_steps=50, log_every=10, stream=out)
    for step in range(1, 6):
        p.update(step, loss=1.25, lr=2e-4, tokens_per_s=5000.0, epoch=1)
    p.close()
    text = out.getvalue()
    assert "5/50" in text and "loss=1.250" in text and "tok_s=5,000" in text and "\r" in text
    assert "step 5/50" not in text  # a bar, not plain lines


def test_metrics_log_truncation_and_curve(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for step in range(1, 6):
        log.write({"kind": "train", "step": step, "loss": 3.0 - step * 0.1})
    log.write({"kind": "valid", "step": 5, "loss": 2.6, "bleu": 12.0})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "st')  # a line cut short by a crash
    assert len(log.read()) == 6
    log.truncate_after(3)
    assert [r["step"] for r in log.read()] == [1, 2, 3]
    assert all(json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines())
    plot_training_curve(log.read() + [{"kind": "valid", "step": 3, "loss": 2.7, "bleu": 10.0}], tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
