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

import math
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, TextIO

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from transformer.run.model import WEIGHTS_FILE, load_config, load_weights, save_weights
from transformer.decoding import DecodeConfig
from transformer.data import Batch, drop_words, make_batch
from transformer.translate.evaluation import score
from transformer.model import build_model
from transformer import cuda
from transformer.cpu import accelerate_training
from transformer.cpu.precision import resolve_precision, slow_bf16_warning
from transformer.precision import resolve_device
from transformer.text import Vocabularies
from transformer.training import distributed as D
from transformer.run.config import RunConfig
from transformer.training.data_setup import PreparedData, data_report, make_batches, prepare_data
from transformer.training.finetune import freeze, model_config_for, open_source, provenance, refuse_itself
from transformer.model.loss import LabelSmoothedCrossEntropy, symmetric_kl
from transformer.training.progress import Progress
from transformer.training.schedule import build_optimizer, cooldown_factor, run_progress, scale_rates
from transformer.training.alignment_log import AlignmentLog
from transformer.training.tensorboard_log import TensorBoardLog
from transformer.training.averaging import average_last
from transformer.run.lock import RunLock, remove_stale_files, storage_errors
from transformer.run.checkpoints import latest_checkpoint, read_tensor_file
from transformer.training.state import (
    CheckpointError, TrainerState, load_checkpoint, remove_stale_work_files, save_checkpoint)
from transformer.training.ema import WeightAverage
from transformer.run.directory import check_model_config, previous_run, write_run_files
from transformer.run.layout import ATOMIC_FILES, CURVE_FILE, EMA_FILE, METRICS_FILE
from transformer.run.metrics import MetricsLog, plot_training_curve
from transformer.translate.translator import Translator

SCALER_KEY = "grad_scaler"  # TrainerState.extra entry of fp16's loss scaler, so a resume keeps its scale
EMA_UPDATES_KEY = "ema_updates"  # TrainerState.extra entry: updates of the moving average of the weights
# TrainerState.extra entry: the logging window open at a checkpoint (loss sum and target tokens over all
# processes), so that a resumed run's first record covers the same steps as the uninterrupted run's
LOG_WINDOW_KEY = "log_window"
FINITE = 2**53  # "no step yet" for the first step with a non-finite loss (exact as int64 and float64)


class TrainingDiverged(ValueError):
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


class Trainer:
    """Trains a ``Transformer`` (or the recurrent baseline, ``model.architecture=rnn``) on a ``RunConfig``
    into a run directory."""

    def __init__(self, cfg: RunConfig, run_dir: str | Path, *, show_progress: bool = True, stream: TextIO | None = None,
                 tensorboard_hint: bool = True):
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.tensorboard_hint = tensorboard_hint  # the notice when tensorboard is missing (the demo has no use for it)
        t = cfg.train
        self.device = resolve_device(t.device, setting="train.device")
        self.precision = resolve_precision(t.precision, self.device)  # "auto" resolved: fp32, bf16 or fp16
        if self.precision == "fp16" and self.device.type != "cuda":
            raise ValueError("train.precision=fp16 needs CUDA (loss scaling); use bf16 or fp32 on CPU")
        if t.compile and self.device.type != "cuda":
            raise ValueError("train.compile applies to training on CUDA (on a CPU the CPU engine's kernels "
                             "do that work); leave it off or use train.device=cuda")
        self.dist = D.init_distributed(self.device.type)
        if self.dist.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
        if t.threads:
            torch.set_num_threads(t.threads)
        _seed_everything(t.seed)
        self.show_progress = show_progress and self.dist.is_main
        self.stream = stream
        self.clock = time.perf_counter  # what train.time_limit and the cooldown measure (a test may give its own)
        self.rate_clock = time.perf_counter  # what the logged tokens/s measure (read apart from self.clock)
        self.pause_at: float | None = None  # see train()
        self.progress: Progress | None = None  # while train() runs
        self.lock = RunLock(self.run_dir, command="train")
        try:
            self._lock()  # before anything in the run directory is read or written
            with storage_errors(self.run_dir):
                self._set_up(cfg)
        except BaseException:
            self.lock.release()
            raise

    def _set_up(self, cfg: RunConfig) -> None:
        t = cfg.train
        if t.init_from:
            refuse_itself(t.init_from, self.run_dir)
        vocab, self.initialized_from = previous_run(self.run_dir, cfg)  # kept as first recorded
        # A run resumed on another number of processes keeps its batches per step (or is refused here, before any write).
        self.accumulate = D.resume_accumulation(self.run_dir, t.accumulate, self.dist)
        # Fine-tuning (train.init_from): the initial run gives the tokenizer, the architecture and the
        # weights; a resumed fine-tuning run has them all in its own directory and checkpoint.
        source = None
        if t.init_from and latest_checkpoint(self.run_dir) is None:
            source = open_source(t.init_from, run_dir=self.run_dir)
            vocab = vocab or source.vocab
        # the first process of each machine builds a missing data cache; the others wait for it
        self.data: PreparedData = prepare_data(cfg.data, vocab=vocab,
                                               max_unknown=cfg.data.max_unknown if t.init_from else None,
                                               build=self.dist.local_rank == 0,
                                               progress=(self.stream or sys.stderr) if self.show_progress else None)
        self.vocab: Vocabularies = self.data.vocab
        if source is not None:
            model_cfg = model_config_for(source, cfg)
            self.initialized_from = self.initialized_from or provenance(source)
        elif t.init_from:
            model_cfg = load_config(self.run_dir)
        else:
            model_cfg = cfg.model_config(src_vocab_size=self.vocab.src.vocab_size, tgt_vocab_size=self.vocab.tgt.vocab_size)
        check_model_config(self.run_dir, model_cfg)
        self.model = build_model(model_cfg).to(self.device)
        if source is not None:
            load_weights(self.model, source.weights)
        self.frozen = freeze(self.model, t.frozen_parts())  # out of the optimizer: they stay bit for bit
        self.criterion = LabelSmoothedCrossEntropy(smoothing=t.label_smoothing, ignore_index=self.vocab.tgt.pad_id)
        # One engine for the device, chosen here: on a CPU its kernels take dropout, Add & Norm, short-row
        # attention and the loss; on CUDA torch.compile where asked, and batches copied ahead of their step.
        on_cpu = self.device.type == "cpu"
        self.engine = (accelerate_training(self.model, self.criterion) if on_cpu
                       else cuda.accelerate_training(self.model, compile=t.compile, say=self._say))
        # Logits only at real target positions on a CPU (skips the padding x vocabulary product); on a GPU
        # at every position, the loss ignoring padding, so a step's shapes never wait on the data.
        self.sparse_logits = on_cpu
        schedule, warmup = t.effective_schedule()
        self.optimizer, self.scheduler = build_optimizer(
            [p for p in self.model.parameters() if p.requires_grad], d_model=model_cfg.d_model, warmup=warmup,
            scale=t.lr_scale, schedule=schedule, lr=t.lr, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps,
            weight_decay=t.weight_decay, decoupled=t.optimizer == "adamw",
        )
        self.batches = make_batches(self.data, max_tokens=cfg.data.max_tokens, seed=t.seed, rank=self.dist.rank,
                                    world_size=self.dist.world_size, bpe_dropout=cfg.data.bpe_dropout)
        self.steps_per_epoch = D.steps_per_epoch(len(self.batches), self.accumulate)
        self.metrics = MetricsLog(self.run_dir / METRICS_FILE)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        self.ema = WeightAverage(self.model, t.ema) if t.ema else None
        # the first step whose loss or gradient norm was not finite, kept on the device (see _check_finite)
        self.nonfinite_step = torch.full((), FINITE, dtype=torch.int64, device=self.device)
        self.window_loss = torch.zeros((), dtype=torch.float64, device=self.device)  # of the open logging window
        self.window_tokens = 0.0
        self.state = TrainerState()
        self.resumed_from: int | None = None
        if self.dist.is_main:
            write_run_files(self.run_dir, cfg, self.vocab, model_cfg, self.initialized_from)
        D.barrier(self.dist)
        self._resume()
        D.adopt_layout(self.state, self.dist, self.accumulate)
        self.alignments = AlignmentLog.for_run(self.run_dir, self.data, t.alignment_sentences,
                                               after_step=self.state.step, write=self.dist.is_main)
        self.board = TensorBoardLog()  # opened when training starts

    # ---------------------------------------------------------------------------------- set-up
    def _lock(self) -> None:
        """Take the run directory's lock (the main process only: the other ranks do not write), then
        remove the work files of killed runs; no one else can be writing them now."""
        if not self.dist.is_main or self.lock.held:
            return
        with storage_errors(self.run_dir):
            self.lock.acquire()
            remove_stale_files(self.run_dir, ATOMIC_FILES)
            remove_stale_work_files(self.run_dir)

    def close(self) -> None:
        """Release the run directory's lock (``train`` does at its end); the trainer can still be read."""
        self.lock.release()

    def _resume(self) -> None:
        path = latest_checkpoint(self.run_dir)
        if path is None:
            return
        self.state = load_checkpoint(path, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler)
        if self.scaler is not None and (scaler_state := self.state.extra.get(SCALER_KEY)):
            self.scaler.load_state_dict(scaler_state)  # fp16: the loss scale reached, not the initial one
        if self.ema is not None:
            saved = read_tensor_file(path, EMA_FILE)
            if saved is None:
                raise CheckpointError(f"{path} holds no moving average of the weights ({EMA_FILE}), "
                                      "though train.ema is set")
            self.ema.load(saved, self.state.extra.get(EMA_UPDATES_KEY, self.state.step))
        window = self.state.extra.get(LOG_WINDOW_KEY)
        if self.dist.is_main and isinstance(window, dict):  # all processes' sums: the first one holds them
            self.window_loss.fill_(float(window.get("loss", 0.0)))
            self.window_tokens = float(window.get("tokens", 0.0))
        self.resumed_from = self.state.step
        if self.dist.is_main:
            self.metrics.truncate_after(self.state.step)

    # ---------------------------------------------------------------------------------- loop
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
            model = DistributedDataParallel(self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
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
                # rank 0's clock, so that every rank stops at the same step and cools down alike
                st.seconds = D.broadcast_number(before + self.clock() - start, self.dist, self.device)
                stop = self._run_over()
                if stop:
                    break
                paused = self.rate_clock()
                if t.eval_every and st.step % t.eval_every == 0:
                    last_valid = self._validate_and_save(progress)
                elif t.save_every and st.step % t.save_every == 0:
                    self._save()
                window_start += self.rate_clock() - paused  # tokens/s counts training, not evaluating or saving
            else:  # the epoch ran to its end
                st.epoch += 1
                st.batch_in_epoch = 0
                if not t.eval_every:
                    last_valid = self._validate_and_save(progress)
        if last_valid is None or last_valid.get("step") != st.step:
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

    def _step(self, model: torch.nn.Module, group: list[Batch]) -> tuple[torch.Tensor, float]:
        """One optimizer step over ``group``; the loss is normalised by the step's global target tokens.

        Returns the step's summed loss as a float64 tensor on the device (read on the logging cadence,
        so the host does not wait for the GPU each step) and the local target tokens."""
        t = self.cfg.train
        local_tokens = float(sum(b.n_tgt_tokens for b in group))
        (global_tokens,) = D.all_reduce_sum([local_tokens], self.dist, self.device)
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
                with self._autocast():  # the forward pass only; backward runs in the dtypes it recorded
                    loss, reported = self._loss(model, batch)
                scaled = loss * factor
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
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
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)  # skips the optimizer step when a gradient is inf or nan
            self.scaler.update()
            stepped = self.scaler.get_scale() >= scale  # update() lowers the scale only after a skipped step
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

    def _say(self, text: str) -> None:
        """A message on the run's progress output (stderr before training starts)."""
        if self.progress is not None:
            self.progress.message(text)
        elif self.show_progress:
            print(text, file=self.stream or sys.stderr)

    def _autocast(self):
        precision = self.precision
        if precision == "fp32":
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)

    # ---------------------------------------------------------------------------------- validation
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

    # ---------------------------------------------------------------------------------- saving
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


def _groups(batches: Iterator[Batch], size: int) -> Iterator[list[Batch]]:
    """Whole steps of ``size`` batches; the few left at the epoch's end are not a step, so the batches of
    every step are the same whatever the number of processes (see :mod:`transformer.training.distributed`)."""
    group: list[Batch] = []
    for b in batches:
        group.append(b)
        if len(group) == size:
            yield group
            group = []


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


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
