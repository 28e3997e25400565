"""Translating on a GPU: the CUDA engine's choices for the ``Translator``, made once for the device.

A CPU decodes best in batches that fit its caches, with finished sentences dropped from the batch
at every step (each step's work then shrinks). A GPU has thousands of lanes and runs kernels the
host queues: it wants batches large enough to fill it, and a host that never waits for it inside
the decoding loop. So on CUDA the ``Translator`` decodes

* in batches of up to ``BATCH_TOKENS`` decoder rows (sentences x beams) x output positions
  (each sentence's limit, source length + 50 by default: what the decoder's cache grows to;
  a CPU's: 50,000), and at most 4,096 rows (``translator.MAX_BATCH_ROWS``): a thousand
  Multi30k sentences with beam 4 are two or three batches. Counting source tokens instead gave short
  inputs 160,000 / S rows (80,000 for 2-token inputs: tens of GB of cache, more rows than
  CUDA's attention kernels take);
* checking for finished sentences every ``SYNC_EVERY`` steps (``decode(..., sync_every=...)``):
  each check reads a value back and so waits for every queued step; between checks finished
  sentences run on with their results frozen on the device, so the outputs are the same;
* encoding each batch whole (the CPU's length-grouped encoding saves padded work that a GPU
  does in parallel anyway, at the price of more, smaller launches);
* with the decoder's steps over buffers allocated once per batch and captured in CUDA graphs
  (``decoding_steps``, applied by the ``Translator``).

The precision is the one value of :mod:`transformer.inference_precision`: on a GPU ``fp32``, ``bf16`` or
``fp16`` (a bfloat16 or float16 copy of the weights; ``int8`` is a CPU format and refused).

The dynamic batcher of ``transformer serve`` merges up to ``SERVE_BATCH_SIZE`` sentences into one
model call on a GPU (32 on a CPU). These numbers are chosen from the GPU's shape, not yet
measured (``BATCH_TOKENS`` holds, at most, 7.9 GB of float32 cache for the base model's 6
layers of 512, counting the two sets of keys and values ``decoding_steps`` keeps):
``benchmarks/translate_speed.py --device cuda`` measures them against ``generate()``
and CTranslate2 (docs/benchmarks.md).
"""

from __future__ import annotations

SYNC_EVERY = 8
BATCH_TOKENS = 160_000
SERVE_BATCH_SIZE = 256
