"""The training loop: the paper's recipe (section 5) with checkpoints and exact resume.

A run directory holds everything needed to translate with, inspect or resume a run::

    run/
      config.json, model.safetensors   the model (best on validation, averaged, or the moving average;
                                       load_model reads it)
      tokenizer.json                   the tokenizer (tokenizer.src.json + tokenizer.tgt.json if separate)
      run_config.json                  the full RunConfig
      metrics.jsonl, training_curve.png
      checkpoints/step-XXXXXXXX/       weights, optimizer, schedule, RNG, data position (and
                                       ema.safetensors with train.ema)
      checkpoints/latest.json

Running the same command again on an existing run directory resumes from its latest
checkpoint and continues exactly as if it had never stopped (same data order, same RNG).
A run directory that holds a different configuration is refused and left untouched.

A run directory has one writer at a time: the trainer holds an exclusive OS lock on
``run/.lock`` (:mod:`transformer.run.lock`) from before it reads the directory until the
run ends, so a second training on the same directory is refused at once, naming the first; the
lock dies with its process, so a killed run never blocks the next. Holding it, the trainer
removes the work files that runs killed mid-write left behind. A read-only or full disk ends
the run with :class:`~transformer.run.lock.RunStorageError`, one line naming the fix.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.nn.parallel import DistributedDataParallel

from transformer import cuda
from transformer.cpu.training_precision import slow_bf16_warning
from transformer.data import Batch, drop_words
from transformer.errors import UserError
from transformer.model.loss import symmetric_kl
from transformer.run.checkpoints import latest_checkpoint
from transformer.run.lock import storage_errors
from transformer.training import distributed as D
from transformer.training.data_setup import data_report
from transformer.training.progress import Progress
from transformer.training.trainer_saving import SCALER_KEY, ValidationAndSaving
from transformer.training.schedule import cooldown_factor, run_progress, scale_rates
from transformer.training.trainer_setup import FINITE, TrainerSetUp
from transformer.training.tensorboard_log import TensorBoardLog

__all__ = ["FINITE", "SCALER_KEY", "TrainResult", "Trainer", "TrainingDiverged"]


class TrainingDiverged(UserError):
    """The loss, the gradient norm or the weights stopped being finite: the run stops naming the step,
    before anything is saved from it (the command line exits with status 2)."""


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    epochs_completed: int
    seconds: float
    valid: dict[str, Any] | None  # last validation record
    resumed_from: int | None  # step of the checkpoint resumed from
    target_tokens: int = 0  # target tokens trained on, from the start of the run


class Trainer(TrainerSetUp, ValidationAndSaving):
    """Trains a ``Transformer`` (or the recurrent baseline, ``model.architecture=rnn``) on a ``RunConfig``
    into a run directory.

    The set-up (device, precision, data, model, optimizer, resume) is
    :class:`~transformer.training.trainer_setup.TrainerSetUp`'s, validating and saving are
    :class:`~transformer.training.trainer_saving.ValidationAndSaving`'s; the loop is here."""

    def train(self, *, pause_at: float | None = None) -> TrainResult:
        """Train to the end of the recipe, holding the run directory's lock throughout, then release it.

        ``pause_at`` stops earlier, once the run has trained that many seconds in all (validated and
        saved as at its end), without changing the recipe: the schedule, a cooldown included, stays
        the whole run's, and training again goes on from there."""
        self.pause_at = pause_at
        self._lock()  # again, when train() is called a second time
        try:
            with storage_errors(self.run_dir), D.peer_failures(self.dist, self.run_dir):
                return self._train()
        finally:
            self.board.close()
            self.lock.release()

    def _train(self) -> TrainResult:
        t, st = self.cfg.train, self.state
        model: torch.nn.Module = self.model
        if self.dist.enabled:
            # broadcast_buffers off: the one buffer, the positional table, is the config's on every process, and
            # broadcasting it would be a collective at every forward pass
            devices = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(self.model, device_ids=devices, broadcast_buffers=False)
        total = t.max_steps or t.epochs * self.steps_per_epoch
        before = st.seconds  # the run's time limit counts the invocations before this one too
        limits = [x for x in (t.time_limit, self.pause_at) if x is not None]
        progress = Progress(total_steps=total, initial_step=st.step, log_every=t.log_every, stream=self.stream,
                            enabled=self.show_progress, time_limit=max(min(limits) - before, 0.0) if limits else None)
        self.progress = progress
        self._announce(progress)
        self.board = TensorBoardLog.open(self.run_dir, enabled=t.tensorboard and self.dist.is_main, resume_step=st.step,
                                         say=progress.message if self.tensorboard_hint else lambda _: None)
        start = self.clock()
        compiled_before = self._compile_seconds()

        def agree_clock() -> None:
            """``st.seconds`` read now: rank 0's clock on every rank, so that every rank stops at the same step
            and cools down alike; the time compiling took is the compiler's, not training's (left out)."""
            st.seconds = D.broadcast_number(before + self.clock() - start - (self._compile_seconds() - compiled_before),
                                            self.dist, self.device)

        rate_tokens = 0.0  # the tokens of the logging window trained by this call (the rate's, not the loss's)
        window_start = self.rate_clock()
        last_valid: dict[str, Any] | None = None
        stop = self._run_over()  # a finished run resumed: nothing to do
        while st.epoch < t.epochs and not stop:
            batches = self._device_batches(self.batches.iter_from(st.epoch, st.batch_in_epoch))
            for group in _groups(batches, self.accumulate):
                model.train()
                lr = self._apply_cooldown(total)  # the rate this step uses (the scheduler moves it on after)
                loss_sum, tokens = self._step(model, group)
                st.step += 1
                st.batch_in_epoch += len(group)
                self.window_loss += loss_sum
                self.window_tokens += tokens
                rate_tokens += tokens
                if st.step % t.log_every == 0:
                    self._log(progress, lr=lr, rate_tokens=rate_tokens, window_start=window_start)
                    rate_tokens, window_start = 0.0, self.rate_clock()
                evaluate = bool(t.eval_every) and st.step % t.eval_every == 0
                save = bool(t.save_every) and st.step % t.save_every == 0
                if not self.dist.enabled or st.step % t.log_every == 0 or evaluate or save:
                    agree_clock()  # several processes agree when they meet anyway, never at every step
                stop = self._run_over()
                if stop:
                    break
                paused = self.rate_clock()
                if evaluate:
                    last_valid = self._validate_and_save(progress)
                elif save:
                    self._save()
                window_start += self.rate_clock() - paused  # tokens/s counts training, not evaluating or saving
            else:  # the epoch ran to its end
                st.epoch += 1
                st.batch_in_epoch = 0
                if not t.eval_every:
                    if self.dist.enabled:
                        agree_clock()
                    last_valid = self._validate_and_save(progress)
        if last_valid is None or last_valid.get("step") != st.step:
            if self.dist.enabled:
                agree_clock()
            last_valid = self._validate_and_save(progress)
        self._finish(progress)
        progress.close()
        return TrainResult(self.run_dir, st.step, st.epoch, self.clock() - start, last_valid, self.resumed_from,
                           st.target_tokens)

    def _announce(self, progress: Progress) -> None:
        """Say what is trained, on what, where and how, and what the data holds."""
        t, st = self.cfg.train, self.state
        progress.message(f"training {self.model.num_parameters():,} parameters on {len(self.data.train):,} pairs, "
                         f"{len(self.batches)} batches/epoch"
                         + (f" (BPE-dropout {self.cfg.data.bpe_dropout})" if self.cfg.data.bpe_dropout else "")
                         + (f" (word dropout {t.word_dropout})" if t.word_dropout else "")
                         + f", device {self.device}, {self.precision}"
                         + (" (auto)" if t.precision == "auto" else "") + ", "
                         + D.describe_layout(self.dist, self.accumulate, t.accumulate)
                         + (f"; resumed at step {st.step}" if self.resumed_from else ""))
        if self.precision == "bf16" and (warning := slow_bf16_warning(self.device)):
            progress.message(f"warning: {warning}; use train.precision=fp32 or auto")
        progress.message(data_report(self.data.stats))

    def _log(self, progress: Progress, *, lr: float, rate_tokens: float, window_start: float) -> None:
        """Close the logging window: its loss over all processes (the one read of the device's loss
        sum per window), a ``train`` record in metrics.jsonl and TensorBoard, the progress line.

        Args:
            lr: the learning rate of the window's last step.
            rate_tokens: the target tokens this call trained in the window (the rate's, not the loss's).
            window_start: when the window's training began, on ``rate_clock``.
        """
        st = self.state
        window_loss, window_tokens, rate_tokens = D.all_reduce_sum(
            [float(self.window_loss), self.window_tokens, rate_tokens], self.dist, self.device)
        self._check_finite()
        rate = rate_tokens / max(self.rate_clock() - window_start, 1e-9)
        record = dict(kind="train", step=st.step, epoch=st.epoch, loss=window_loss / window_tokens,
                      lr=lr, tokens_per_s=rate, grad_norm=float(self.grad_norm))
        if self.dist.is_main:
            self.metrics.write(record)
            self.board.scalars(record)
        progress.update(st.step, loss=record["loss"], lr=record["lr"], tokens_per_s=rate, epoch=st.epoch)
        self.window_loss.zero_()
        self.window_tokens = 0.0

    def _run_over(self) -> bool:
        """Whether the run has reached ``train.max_steps`` or spent ``train.time_limit`` (over all
        invocations), or reached the ``pause_at`` of this call."""
        t, st = self.cfg.train, self.state
        return ((t.max_steps is not None and st.step >= t.max_steps) or (t.time_limit is not None and st.seconds > t.time_limit)
                or (self.pause_at is not None and st.seconds >= self.pause_at))

    def _apply_cooldown(self, total_steps: int) -> float:
        """Set and return the learning rate of the next step (the schedule's times the cooldown factor)."""
        t, st = self.cfg.train, self.state
        return scale_rates(self.optimizer, self.scheduler, cooldown_factor(
            run_progress(steps=st.step, seconds=st.seconds, total_steps=total_steps, time_limit=t.time_limit), t.cooldown))

    def _device_batches(self, batches: Iterator[Batch]) -> Iterator[Batch]:
        """The batches on the training device: on CUDA padded to few shapes and copied one batch ahead
        (``transformer.cuda.DeviceBatches``); on a CPU as they are."""
        if self.device.type == "cpu":
            return batches
        return iter(cuda.DeviceBatches(batches, self.device, pad_id=self.vocab.tgt.pad_id))

    def _compile_seconds(self) -> float:
        """Host seconds the CUDA engine has spent on batches that compiled a graph (0 without torch.compile)."""
        return self.engine.compile_seconds if isinstance(self.engine, cuda.CudaTraining) else 0.0

    def _step(self, model: torch.nn.Module, group: list[Batch]) -> tuple[torch.Tensor, float]:
        """One optimizer step over ``group``; the loss is normalised by the step's global target tokens.

        Returns the step's summed loss as a float64 tensor on the device (read on the logging cadence,
        so the host does not wait for the GPU each step) and the local target tokens."""
        t = self.cfg.train
        local_tokens = float(sum(b.n_tgt_tokens for b in group))
        global_tokens = local_tokens
        if self.dist.enabled:  # every process knows the other processes' batches of the step: no collective
            global_tokens = float(D.step_target_tokens(self.batches, self.state, len(group), self.dist,
                                                       local=int(local_tokens)))
        self.state.target_tokens += int(global_tokens)
        # DDP averages gradients over ranks, so scale by world_size to get sum / global tokens.
        factor = self.dist.world_size / global_tokens
        loss_total = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, batch in enumerate(group):
            batch = batch.to(self.device)
            batch = drop_words(batch, t.word_dropout, pad_id=self.vocab.tgt.pad_id,  # the batch itself at 0
                               src_unk_id=self.vocab.src.unk_id, tgt_unk_id=self.vocab.tgt.unk_id)
            sync = nullcontext() if (not self.dist.enabled or i == len(group) - 1) else model.no_sync()  # type: ignore[operator]
            with sync:
                reported = self._forward_backward(model, batch, factor)
            loss_total += reported.detach()
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        norm = None  # this step's gradient norm, where measured
        if t.clip_norm:  # the norm before clipping
            self.grad_norm = norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        elif (self.state.step + 1) % t.log_every == 0:  # measured only for the steps a log record reports
            self.grad_norm = norm = torch.nn.utils.get_total_norm(
                [p.grad for p in self.model.parameters() if p.grad is not None])
        if self.scaler:
            if self.loss_scale is None:  # a scaler given after the set-up
                self.loss_scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)  # skips the optimizer step when a gradient is inf or nan
            self.scaler.update()
            # update() lowers the scale only after a skipped step: fp16's one read of a step (the schedule
            # counts the steps taken), against the scale the previous step left
            scale, self.loss_scale = self.loss_scale, self.scaler.get_scale()
            stepped = self.loss_scale >= scale
        else:
            self.optimizer.step()
            stepped = True
        if stepped:  # fp16's skipped steps (inf or nan gradients) are the loss scaler's to handle, not divergence
            self._note_nonfinite(loss_total, norm)
        if stepped:  # the schedule counts the optimizer steps taken
            self.scheduler.step()
            if self.ema is not None:
                self.ema.update(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        return loss_total, local_tokens

    def _forward_backward(self, model: torch.nn.Module, batch: Batch, factor: float) -> torch.Tensor:
        """One batch's forward and backward passes (the CUDA engine's ``run``: it times a compilation and
        falls back to eager where compiling the backward fails); returns the loss to report."""
        def passes() -> torch.Tensor:
            with self._autocast():  # the forward pass only; backward runs in the dtypes it recorded
                loss, reported = self._loss(model, batch)
            scaled = loss * factor
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            return reported

        return self.engine.run(passes) if isinstance(self.engine, cuda.CudaTraining) else passes()

    def _note_nonfinite(self, loss: torch.Tensor, norm: torch.Tensor | None) -> None:
        """Keep on the device the first step whose loss or gradient norm is not finite: a few scalar kernels,
        no read, so a GPU never waits here (``_check_finite`` reads it on the logging cadence and before saving)."""
        finite = torch.isfinite(loss) if norm is None else torch.isfinite(loss) & torch.isfinite(norm)
        step = self.state.step + 1
        self.nonfinite_step = torch.where(finite, self.nonfinite_step, self.nonfinite_step.clamp(max=step))

    def _check_finite(self, *, weights: bool = False) -> None:
        """Raise :class:`TrainingDiverged` where a step's loss or gradient norm was not finite (or, with
        ``weights``, where a weight is not finite), naming the first such step; every process agrees.

        Called on the logging cadence and before validating or saving, so no checkpoint or model is ever
        written from such weights and the latest checkpoint stays the last finite one."""
        first = float(self.nonfinite_step)
        finite_weights = 1.0
        if weights:
            finite_weights = float(torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all())
        first, finite_weights = D.all_reduce_min([first, finite_weights], self.dist, self.device)
        if first >= FINITE and finite_weights:
            return
        what = (f"the loss or the gradient norm is not finite at step {int(first)}" if first < FINITE
                else f"the weights are not finite after step {self.state.step}")
        checkpoint = latest_checkpoint(self.run_dir)
        kept = (f"the latest checkpoint, {checkpoint.name}, is the last finite one" if checkpoint
                else "no checkpoint was written")
        cause = (f"the initial weights (train.init_from={self.cfg.train.init_from}) or the learning rate"
                 if self.cfg.train.init_from else "the learning rate")
        raise TrainingDiverged(
            f"training diverged: {what}; nothing was saved from it and {kept}; check {cause}: lower train.lr "
            "(train.lr_scale for the noam schedule), raise train.warmup or set train.clip_norm, in a new run directory")

    def _loss(self, model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's summed training loss and the label-smoothed cross-entropy part to report.

        With ``train.rdrop`` (R-Drop, Liang et al. 2021) the batch goes through the model twice in
        one pass, so each copy gets its own dropout masks, and the loss adds the symmetric KL
        divergence between the two predictions: (CE_1 + CE_2 + alpha * (KL(p1||p2) + KL(p2||p1)) / 2) / 2
        per target token, as in the paper's code."""
        real = batch.tgt_out != self.vocab.tgt.pad_id  # (B, T)
        # logits (N, V) at the real target positions only, or (B, T, V) at every position with the padding
        # ignored by the loss (see self.sparse_logits)
        positions, target = (real, batch.tgt_out[real]) if self.sparse_logits else (None, batch.tgt_out)
        alpha = self.cfg.train.rdrop
        if not alpha:
            loss, _ = self.criterion(model(batch.src, batch.tgt_in, batch.src_mask, positions=positions), target)
            return loss, loss
        twice = [torch.cat([x, x]) for x in (batch.src, batch.tgt_in, batch.src_mask)]
        logits = model(*twice, positions=None if positions is None else torch.cat([positions, positions]))
        ce, _ = self.criterion(logits, torch.cat([target, target]))  # the first copy's rows, then the second's
        first, second = logits.chunk(2)
        kl = symmetric_kl(first, second, keep=None if self.sparse_logits else real)
        return 0.5 * (ce + alpha * kl), 0.5 * ce

    def _autocast(self):
        precision = self.precision
        if precision == "fp32":
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def _groups(batches: Iterator[Batch], size: int) -> Iterator[list[Batch]]:
    """Whole steps of ``size`` batches; the few left at the epoch's end are not a step, so the batches of
    every step are the same whatever the number of processes (see :mod:`transformer.training.distributed`)."""
    group: list[Batch] = []
    for b in batches:
        group.append(b)
        if len(group) == size:
            yield group
            group = []

