"""A :class:`~transformer.training.trainer.Trainer`'s set-up: the device and precision, the run
directory's lock, the data, the model and its engine, the optimizer, and the resume from the latest
checkpoint; all of it done once, when the trainer is made, before the first step."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np
import torch

from transformer import cuda
from transformer.cpu import accelerate_training
from transformer.cpu.training_precision import resolve_precision
from transformer.model import build_model
from transformer.model.loss import LabelSmoothedCrossEntropy
from transformer.inference_precision import resolve_device
from transformer.run.checkpoints import latest_checkpoint, read_tensor_file
from transformer.run.config import RunConfig
from transformer.run.directory import check_model_config, previous_run, write_run_files
from transformer.run.layout import ATOMIC_FILES, EMA_FILE, METRICS_FILE, TRAINER_STATE_FILE
from transformer.run.lock import RunLock, remove_stale_files, storage_errors
from transformer.run.metrics import MetricsLog
from transformer.run.model import load_config, load_weights
from transformer.text import Vocabularies
from transformer.training import distributed as D
from transformer.training.alignment_log import AlignmentLog
from transformer.training.data_setup import PreparedData, make_batches, prepare_data
from transformer.training.ema import WeightAverage
from transformer.training.finetune import freeze, model_config_for, open_source, provenance, refuse_itself
from transformer.training.progress import Progress
from transformer.training.trainer_saving import EMA_UPDATES_KEY, LOG_WINDOW_KEY, SCALER_KEY
from transformer.training.schedule import build_optimizer
from transformer.training.state import CheckpointError, TrainerState, load_checkpoint, remove_stale_work_files
from transformer.training.tensorboard_log import TensorBoardLog
from transformer.errors import UserError

FINITE = 2**53  # "no step yet" for the first step with a non-finite loss (exact as int64 and float64)


class TrainerSetUp:
    """The making of a trainer (``__init__``), its lock and its resume; :class:`~transformer.training.trainer.Trainer`
    adds the training loop."""

    def __init__(self, cfg: RunConfig, run_dir: str | Path, *, show_progress: bool = True, stream: TextIO | None = None,
                 tensorboard_hint: bool = True):
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.tensorboard_hint = tensorboard_hint  # the notice when tensorboard is missing (the demo has no use for it)
        t = cfg.train
        self.device = resolve_device(t.device, setting="train.device")
        self.precision = resolve_precision(t.precision, self.device)  # "auto" resolved: fp32, bf16 or fp16
        if self.precision == "fp16" and self.device.type != "cuda":
            raise UserError("train.precision=fp16 needs CUDA (loss scaling); use bf16 or fp32 on CPU")
        if t.compile and self.device.type != "cuda":
            raise UserError("train.compile applies to training on CUDA (on a CPU the CPU engine's kernels "
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
        # fp16: the loss scale the last step left (a resumed run's is the checkpoint's; no read of the GPU here)
        self.loss_scale = self.scaler.get_scale() if self.scaler is not None else None
        D.adopt_layout(self.state, self.dist, self.accumulate)
        self.alignments = AlignmentLog.for_run(self.run_dir, self.data, t.alignment_sentences,
                                               after_step=self.state.step, write=self.dist.is_main)
        self.board = TensorBoardLog()  # opened when training starts

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
            updates = self.state.extra.get(EMA_UPDATES_KEY, self.state.step)
            if type(updates) is not int or updates < 0:
                raise CheckpointError(f"{path / TRAINER_STATE_FILE}: {EMA_UPDATES_KEY} must be an integer >= 0, "
                                      f"got {updates!r:.80}")
            self.ema.load(saved, updates)
        window = self.state.extra.get(LOG_WINDOW_KEY)
        if self.dist.is_main and isinstance(window, dict):  # all processes' sums: the first one holds them
            try:
                loss, tokens = float(window.get("loss", 0.0)), float(window.get("tokens", 0.0))
            except (TypeError, ValueError):  # a value of the wrong kind in the file
                raise CheckpointError(f"{path / TRAINER_STATE_FILE}: bad {LOG_WINDOW_KEY!r} entry: {window!r:.80}") from None
            self.window_loss.fill_(loss)
            self.window_tokens = tokens
        self.resumed_from = self.state.step
        if self.dist.is_main:
            self.metrics.truncate_after(self.state.step)

    def _say(self, text: str) -> None:
        """A message on the run's progress output (stderr before training starts)."""
        if self.progress is not None:
            self.progress.message(text)
        elif self.show_progress:
            print(text, file=self.stream or sys.stderr)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
