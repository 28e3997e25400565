"""Batches on a GPU: padded to few shapes, pinned, and copied while the previous step runs.

``DeviceBatches`` wraps an iterator of CPU ``Batch``es. Each batch's lengths are padded up to a
multiple of ``multiple`` (8: tensor cores work in tiles of 8, and a compiled model then sees a
few shapes instead of one per batch); padding changes no number of the step, since the padded
source keys are masked, padded target positions come after every real one (the decoder is
causal) and the loss ignores them. On CUDA each batch is copied from pinned (page-locked) host
memory by a non-blocking copy on a side stream, one batch ahead, so the copy overlaps the
previous step's kernels and the host never waits for it; the compute stream waits for the copy
on the GPU before the batch is used. On a CPU the batches are only padded.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Iterator

import torch
import torch.nn.functional as F

from transformer.data import Batch

PAD_MULTIPLE = 8


def pad_batch(batch: Batch, multiple: int, *, pad_id: int) -> Batch:
    """``batch`` with its source and target lengths padded with ``pad_id`` up to a multiple of ``multiple``."""
    def grow(x: torch.Tensor, value) -> torch.Tensor:
        extra = -x.shape[1] % multiple
        return F.pad(x, (0, extra), value=value) if extra else x

    return replace(batch, src=grow(batch.src, pad_id), src_mask=grow(batch.src_mask, False),
                   tgt_in=grow(batch.tgt_in, pad_id), tgt_out=grow(batch.tgt_out, pad_id))


def _pinned(batch: Batch) -> Batch:
    return replace(batch, src=batch.src.pin_memory(), src_mask=batch.src_mask.pin_memory(),
                   tgt_in=batch.tgt_in.pin_memory(), tgt_out=batch.tgt_out.pin_memory())


class DeviceBatches:
    """Iterate ``batches`` as batches on ``device``, padded to multiples of ``multiple`` and on CUDA
    copied one batch ahead (see module doc)."""

    def __init__(self, batches: Iterable[Batch], device: torch.device, *, pad_id: int,
                 multiple: int = PAD_MULTIPLE) -> None:
        self.batches, self.device, self.pad_id, self.multiple = iter(batches), torch.device(device), pad_id, multiple
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def __iter__(self) -> Iterator[Batch]:
        if self.stream is None:
            for batch in self.batches:
                yield pad_batch(batch, self.multiple, pad_id=self.pad_id).to(self.device)
            return
        ahead = self._copy(next(self.batches, None))
        while ahead is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)  # on the GPU: the copy is done before the step reads the batch
            for t in (ahead.src, ahead.src_mask, ahead.tgt_in, ahead.tgt_out):
                t.record_stream(current)  # its memory is not reused while the step may still read it
            batch, ahead = ahead, self._copy(next(self.batches, None))
            yield batch

    def _copy(self, batch: Batch | None) -> Batch | None:
        if batch is None:
            return None
        host = _pinned(pad_batch(batch, self.multiple, pad_id=self.pad_id))
        with torch.cuda.stream(self.stream):
            return host.to(self.device, non_blocking=True)
