"""A :class:`~transformer.training.trainer.Trainer`'s validation and saving: the validation loss, perplexity
and BLEU, the best model, the checkpoints (with what a resume needs beyond the weights), and what a run
writes at its end (averaged or moving-average weights, the training curve)."""

from __future__ import annotations

import math
from typing import Any, Iterator

import torch

from transformer.data import make_batch
from transformer.decoding import DecodeConfig
from transformer.run.layout import CURVE_FILE, EMA_FILE
from transformer.run.metrics import plot_training_curve
from transformer.run.model import WEIGHTS_FILE, save_weights
from transformer.training import distributed as D
from transformer.training.averaging import average_last
from transformer.training.progress import Progress
from transformer.training.state import save_checkpoint
from transformer.translate.evaluation import score
from transformer.translate.translator import Translator

SCALER_KEY = "grad_scaler"  # TrainerState.extra entry of fp16's loss scaler, so a resume keeps its scale
EMA_UPDATES_KEY = "ema_updates"  # TrainerState.extra entry: updates of the moving average of the weights
# TrainerState.extra entry: the logging window open at a checkpoint (loss sum and target tokens over all
# processes), so that a resumed run's first record covers the same steps as the uninterrupted run's
LOG_WINDOW_KEY = "log_window"


class ValidationAndSaving:
    """Validating, saving checkpoints and finishing a run: the part of
    :class:`~transformer.training.trainer.Trainer` that writes to the run directory as training goes."""

    def _validate_and_save(self, progress: Progress) -> dict[str, Any] | None:
        self._check_finite(weights=True)
        record = self.validate() if self.dist.is_main else None
        if record is not None:
            self.metrics.write(record)
            self.board.scalars(record)
            alignments = self.alignments.snapshot(self.model)  # cross-attention of the followed sentences
            self.alignments.write(record["step"], record["epoch"], alignments)
            self.board.alignments(record["step"], alignments)
            metric = record["bleu"] if record.get("bleu") is not None else -record["loss"]
            if self.state.best_metric is None or metric > self.state.best_metric:
                self.state.best_metric, self.state.best_step = metric, self.state.step
                save_weights(self.model, self.run_dir / WEIGHTS_FILE)
                record["best"] = True
            progress.message(
                f"validation at step {record['step']}: loss {record['loss']:.4f} ppl {record['ppl']:.2f}"
                + (f" BLEU {record['bleu']:.2f} exact {record['exact_match']:.1%}" if record.get("bleu") is not None else "")
            )
        elif self.dist.is_main:
            save_weights(self.model, self.run_dir / WEIGHTS_FILE)  # no validation data: keep the latest
        self._save()
        return record

    @torch.no_grad()
    def validate(self) -> dict[str, Any] | None:
        """Validation loss and perplexity on all validation pairs; BLEU on the first ``eval_sentences``."""
        if not self.data.valid:
            return None
        self.model.eval()
        nll = tokens = smoothed = 0.0
        examples = sorted(self.data.valid, key=lambda e: len(e[0]))
        for chunk in _chunks(examples, self.cfg.data.max_tokens):
            batch = make_batch(chunk, pad_id=self.vocab.src.pad_id, bos_id=self.vocab.tgt.bos_id,
                               eos_id=self.vocab.tgt.eos_id).to(self.device)
            with self._autocast():
                logits = self.model(batch.src, batch.tgt_in, batch.src_mask)
            loss, nll_sum = self.criterion(logits, batch.tgt_out)
            smoothed, nll, tokens = smoothed + float(loss), nll + float(nll_sum), tokens + batch.n_tgt_tokens
        record: dict[str, Any] = dict(kind="valid", step=self.state.step, epoch=self.state.epoch,
                                      loss=smoothed / tokens, nll=nll / tokens, ppl=math.exp(min(nll / tokens, 50)))
        n = min(self.cfg.train.eval_sentences, len(self.data.valid_text))
        if n:
            pairs = self.data.valid_text[:n]
            # validation translates in bf16 where the run trains in it, else in fp32 (fp16 runs too)
            translator = Translator(self.model, self.vocab, decoding=DecodeConfig(strategy="greedy"), device=self.device,
                                    precision="bf16" if self.precision == "bf16" else "fp32")
            try:
                hypotheses = translator.translate([s for s, _ in pairs])
            finally:
                translator.close()  # the training modules back, the packed weights dropped
            scores = score(hypotheses, [r for _, r in pairs])
            record.update(bleu=scores.bleu, chrf=scores.chrf, exact_match=scores.exact_match, sentences=n)
        return record

    def _save(self) -> None:
        self._check_finite(weights=True)
        # The open logging window's sums over all processes go into the checkpoint and stay with the first
        # process only, here as after a resume, so that both runs log the same numbers.
        loss, tokens = D.all_reduce_sum([float(self.window_loss), self.window_tokens], self.dist, self.device)
        self.state.extra[LOG_WINDOW_KEY] = {"loss": loss, "tokens": tokens}
        self.window_loss.fill_(loss if self.dist.is_main else 0.0)
        self.window_tokens = tokens if self.dist.is_main else 0.0
        if self.scaler is not None:
            self.state.extra[SCALER_KEY] = self.scaler.state_dict()  # plain numbers: the scale and its counters
        if self.ema is not None:
            self.state.extra[EMA_UPDATES_KEY] = self.ema.updates
        if self.dist.is_main:
            save_checkpoint(self.run_dir, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                            state=self.state, keep_last=self.cfg.train.keep_last,
                            tensor_files={EMA_FILE: self.ema.tensors} if self.ema is not None else None)
        D.barrier(self.dist)

    def _finish(self, progress: Progress) -> None:
        if self.dist.is_main:
            n = self.cfg.train.average_last
            if n:
                used = average_last(self.run_dir, n, self.run_dir / WEIGHTS_FILE)
                progress.message(f"averaged the last {len(used)} checkpoints into {self.run_dir / WEIGHTS_FILE}")
            if self.ema is not None:
                with self.ema.swapped_into(self.model):
                    save_weights(self.model, self.run_dir / WEIGHTS_FILE)
                progress.message(f"the moving average of the weights (decay {self.ema.decay}) is the model: "
                                 f"{self.run_dir / WEIGHTS_FILE}")
            try:
                plot_training_curve(self.metrics.read(), self.run_dir / CURVE_FILE)
            except Exception as err:  # a plot must never lose a finished run
                progress.message(f"could not draw the training curve: {err}")
        D.barrier(self.dist)


def _chunks(examples: list, max_tokens: int) -> Iterator[list]:
    chunk: list = []
    for e in examples:
        width = max(len(e[0]), len(e[1]) + 1)
        if chunk and (len(chunk) + 1) * width * 2 > max_tokens:
            yield chunk
            chunk = []
        chunk.append(e)
    if chunk:
        yield chunk

