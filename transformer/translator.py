"""Text in, text out: the object users (and the server) hold.

A ``Translator`` owns a model, its vocabularies and a ``DecodeConfig``. It tokenizes a list of
sentences, sorts them by length so each batch wastes little padding, decodes, and returns the
translations in the input order.

Bad input never loses the other sentences' translations: an empty (or whitespace-only)
sentence translates to "" and a sentence longer than ``max_input_tokens`` is cut to that
length with a warning (``TranslationWarning``).

``bf16=True`` translates with a bfloat16 copy of the model (weights and activations in bf16,
log-probabilities and beam scores in float32): no weight is cast again during decoding.
``quantize`` translates with int8 weights (CPU only), in one of these ways:

* ``"int8-weights"``: the compiled CPU kernels (``transformer.model.packed_linear``) multiply
  float32 activations by int8 copies of the linear layers' weights (one scale per output
  feature), summing in float32: a quarter of the weights' memory traffic, nothing else changed.
  It needs the compiled kernels and a Transformer.
* ``"int8-dynamic"``: a copy of the model whose linear layers are PyTorch's dynamically quantised
  int8 layers (activations quantised per batch too; int8 products where the CPU has VNNI or AMX).
* ``"int8-mixed"``: ``"int8-weights"`` for batches of up to ``int8_weights_max_rows()`` decoder
  rows (sentences x beams), ``"int8-dynamic"`` for larger ones (the int8 weights are faster on
  small batches, the dynamic layers' int8 products on large ones; the crossover depends on
  whether the CPU has int8 dot-product instructions).
  It keeps the dynamically quantised copy beside the float32 model, and a sentence's translation
  may depend on the batch it lands in (as with ``"int8-dynamic"`` alone, whose activations are
  quantised per batch).
* ``"int8"`` picks ``"int8-mixed"``, or ``"int8-dynamic"`` where the kernels are unavailable or
  the model is the recurrent baseline (``Translator.quantize`` says which was taken).

``benchmarks/fast_paths.py`` measures the speed and the BLEU of each against fp32 on the same
checkpoint.
"""

from __future__ import annotations

import copy
import os
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

from transformer.checkpoint import CheckpointError, load_model
from transformer.decoding import DecodeConfig, Hypothesis, decode
from transformer.model import RNNSeq2Seq, Transformer, packed_linear
from transformer.precision import cpu_int8_units, slow_bf16_warning
from transformer.tokenizer import Vocabularies

DEFAULT_MAX_INPUT_TOKENS = 1024
QUANTIZE = (None, "int8", "int8-weights", "int8-dynamic", "int8-mixed")
# "int8-mixed": batches of up to this many decoder rows (sentences x beams) use the kernels' int8
# weights, larger ones PyTorch's dynamically quantised layers, whose int8 products win once the
# products are large (see int8_weights_max_rows). Measured with the Multi30k model, one batch,
# 2 cores, torch 2.13, time of the int8 weights / time of the dynamic layers: on an AVX2 CPU
# without int8 dot-product instructions 0.66-0.83 at 32-128 rows, 0.91-1.00 at 256, 1.01-1.13 at
# 512; on an AVX-512 CPU with VNNI, which the dynamic layers' products use, 0.52-0.57 at 1-4
# rows, 0.74-0.87 at 8-32, 0.96-1.14 at 64 and 1.09-1.22 at 128-512.
INT8_WEIGHTS_MAX_ROWS = 384  # CPUs without VNNI or AMX
INT8_WEIGHTS_MAX_ROWS_INT8_UNITS = 32  # CPUs with them
KERNEL_INT8 = ("int8-weights", "int8-mixed")  # the kinds that pack int8 copies for the compiled kernels


class TranslationWarning(UserWarning):
    """Input that was changed to be translatable (e.g. truncated)."""


class Translator:
    """Translate sentences with a trained model (beam search with the paper's settings by default)."""

    def __init__(
        self,
        model: Transformer | RNNSeq2Seq,
        vocab: Vocabularies,
        *,
        decoding: DecodeConfig | None = None,
        device: str | torch.device = "cpu",
        max_tokens: int = 12000,
        max_input_tokens: int | None = None,
        bf16: bool = False,
        quantize: str | None = None,
    ) -> None:
        if model.config.src_vocab_size != vocab.src.vocab_size or model.config.tgt_vocab_size != vocab.tgt.vocab_size:
            raise ValueError(
                f"model vocabularies ({model.config.src_vocab_size}, {model.config.tgt_vocab_size}) do not match "
                f"the tokenizer's ({vocab.src.vocab_size}, {vocab.tgt.vocab_size})"
            )
        self.device = torch.device(device)
        if quantize not in QUANTIZE:
            raise ValueError(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
        if quantize and (self.device.type != "cpu" or bf16):
            raise ValueError("int8 quantisation is for fp32 CPU inference: use device='cpu' and bf16=False")
        if quantize == "int8":
            quantize = int8_kind(model)
        if quantize in KERNEL_INT8 and not isinstance(model, Transformer):
            raise ValueError(f"quantize={quantize!r} is for Transformer models (the recurrent baseline's "
                             "layers do not run the compiled kernels); use 'int8-dynamic'")
        if quantize in KERNEL_INT8 and not packed_linear.enabled():
            raise ValueError(f"quantize={quantize!r} needs the compiled CPU kernels (a C compiler, and "
                             "TRANSFORMER_FUSED_CPU not 0); use 'int8-dynamic'")
        self.model = model.to(self.device).eval()
        # "int8-mixed": batches of more than int8_weights_max_rows() rows decode with this copy instead
        self._large_batch_model: Transformer | RNNSeq2Seq | None = None
        if quantize == "int8-dynamic":
            self.model = quantize_int8(self.model)
        elif quantize == "int8-mixed":
            self._large_batch_model = quantize_int8(self.model)
        elif bf16:
            if warning := slow_bf16_warning(self.device):
                warnings.warn(f"{warning}; translate in float32 (without bf16) on this device", stacklevel=2)
            self.model = to_bf16(self.model)
        self.vocab = vocab
        self.decoding = decoding or DecodeConfig()
        self.max_tokens = max_tokens
        learned = getattr(model.config, "positional", None) == "learned"  # the recurrent baseline has no positions
        limit = model.config.max_positions if learned else DEFAULT_MAX_INPUT_TOKENS
        self.max_input_tokens = min(max_input_tokens or limit, limit)
        self.quantize = quantize

    @classmethod
    def from_run_dir(cls, run_dir: str | os.PathLike[str], **kwargs) -> Translator:
        """Load ``config.json``, ``model.safetensors`` and the tokenizer files of a run directory.

        The translator owns the model it loads: its weights are frozen (``requires_grad`` False),
        so the CPU kernels' packed copies of them are made once, not in every call (see
        ``transformer.model.packed_linear``)."""
        run_dir = Path(run_dir)
        model = load_model(run_dir).requires_grad_(False)
        try:
            vocab = Vocabularies.load(run_dir)
        except (FileNotFoundError, ValueError) as err:
            raise CheckpointError(f"{run_dir}: cannot load the tokenizer: {err}") from None
        return cls(model, vocab, **kwargs)

    def with_decoding(self, **changes) -> Translator:
        """A translator sharing this model, with some decoding settings changed."""
        other = object.__new__(Translator)
        other.__dict__.update(self.__dict__)
        other.decoding = replace(self.decoding, **changes)
        return other

    # ------------------------------------------------------------------------------------------
    def translate(self, texts: Sequence[str]) -> list[str]:
        """The best translation of each text, in input order."""
        return [self.vocab.tgt.decode(n_best[0].tokens) if n_best else "" for n_best in self.translate_n_best(texts)]

    def translate_n_best(self, texts: Sequence[str]) -> list[list[Hypothesis]]:
        """``decoding.n_best`` hypotheses per text (best first), in input order; [] for an empty text."""
        if isinstance(texts, str):
            raise TypeError("translate() takes a list of sentences; wrap a single sentence in a list")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {i} is {type(text).__name__}, not str")
        src_ids = self.encode_sources(texts)
        results: list[list[Hypothesis]] = [[] for _ in texts]
        todo = [i for i, ids in enumerate(src_ids) if ids]
        # the batches share one packed copy of the weights (int8 with quantize="int8-weights" / "int8-mixed")
        with packed_linear.packing(int8=self.quantize in KERNEL_INT8):
            for batch in self._length_sorted_batches(todo, src_ids):
                for i, hyps in zip(batch, self._decode_batch([src_ids[i] for i in batch])):
                    results[i] = hyps
        return results

    def encode_sources(self, texts: Sequence[str]) -> list[list[int]]:
        """Source token ids, cut to ``max_input_tokens`` (with a ``TranslationWarning``)."""
        ids = self.vocab.src.encode_batch(list(texts))
        for i, seq in enumerate(ids):
            if len(seq) > self.max_input_tokens:
                warnings.warn(
                    f"sentence {i} has {len(seq)} tokens; translating its first {self.max_input_tokens} "
                    "(the model's input limit)", TranslationWarning, stacklevel=3,
                )
                ids[i] = seq[: self.max_input_tokens]
        return ids

    def detokenize(self, hypothesis: Hypothesis) -> str:
        return self.vocab.tgt.decode(hypothesis.tokens)

    # ------------------------------------------------------------------------------------------
    def _length_sorted_batches(self, todo: list[int], src_ids: list[list[int]]) -> list[list[int]]:
        """Group sentence indices of similar length; a batch's padded source size stays under ``max_tokens``."""
        width = self._width()
        order = sorted(todo, key=lambda i: len(src_ids[i]))
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            if current and (len(current) + 1) * len(src_ids[i]) * width > self.max_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _decode_batch(self, seqs: list[list[int]]) -> list[list[Hypothesis]]:
        pad = self.vocab.src.pad_id
        src = torch.full((len(seqs), max(len(s) for s in seqs)), pad, dtype=torch.long)
        mask = torch.zeros_like(src, dtype=torch.bool)
        for row, s in enumerate(seqs):
            src[row, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[row, : len(s)] = True
        src, mask = src.to(self.device), mask.to(self.device)
        model = self.model
        if self._large_batch_model is not None and len(seqs) * self._width() > int8_weights_max_rows():
            model = self._large_batch_model
        return decode(model, src, mask, self.decoding, bos_id=self.vocab.tgt.bos_id, eos_id=self.vocab.tgt.eos_id)

    def _width(self) -> int:
        """Decoder rows per sentence: beams (or n-best samples)."""
        return max(self.decoding.beam_size if self.decoding.strategy == "beam" else 1, self.decoding.n_best)


def int8_kind(model: Transformer | RNNSeq2Seq | None = None) -> str:
    """What ``quantize="int8"`` takes here for ``model`` (a Transformer if None): ``"int8-dynamic"``
    where the compiled kernels are unavailable or the model is the recurrent baseline, else
    ``"int8-mixed"``."""
    if not packed_linear.enabled() or (model is not None and not isinstance(model, Transformer)):
        return "int8-dynamic"
    return "int8-mixed"


def int8_weights_max_rows() -> int:
    """The largest batch, in decoder rows (sentences x beams), that ``"int8-mixed"`` decodes with the
    kernels' int8 weights on this CPU: ``INT8_WEIGHTS_MAX_ROWS_INT8_UNITS`` where it has int8
    dot-product instructions (AVX-512 VNNI or AMX), whose products make the dynamic layers
    faster from smaller batches on, else ``INT8_WEIGHTS_MAX_ROWS``."""
    return INT8_WEIGHTS_MAX_ROWS_INT8_UNITS if cpu_int8_units() else INT8_WEIGHTS_MAX_ROWS


def to_bf16(model: Transformer | RNNSeq2Seq) -> Transformer | RNNSeq2Seq:
    """A bfloat16 copy of ``model`` for inference (``model`` itself is left as it is).

    Unlike autocast, which keeps fp32 weights and casts every layer's input and weight on the
    fly, the copy holds bf16 weights and the whole forward pass runs in bf16 without casts; the
    decoders still compute log-probabilities and scores in float32.
    """
    if all(p.dtype == torch.bfloat16 for p in model.parameters()):
        return model
    return copy.deepcopy(model).to(torch.bfloat16).eval()


def quantize_int8(model: Transformer | RNNSeq2Seq) -> Transformer | RNNSeq2Seq:
    """A copy of ``model`` whose ``nn.Linear`` layers are dynamically quantised to int8 (CPU inference).

    Weights are stored as int8 (one scale per matrix); activations are quantised on the fly per
    batch. Embeddings stay fp32; a tied output projection gets its own int8 copy.
    """
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization announces its move to torchao
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=False).eval()
