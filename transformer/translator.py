"""Text in, text out: the object users (and the server) hold.

A ``Translator`` owns a model and its vocabularies. It tokenizes a list of sentences, sorts
them by length so each batch wastes little padding, decodes, and returns the translations in
the input order.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from typing import Sequence

import torch

from transformer.checkpoint import CheckpointError, load_model
from transformer.decoding import Hypothesis, greedy_search
from transformer.model import Transformer
from transformer.tokenizer import Vocabularies


class Translator:
    """Translate sentences with a trained model (greedy decoding)."""

    def __init__(
        self,
        model: Transformer,
        vocab: Vocabularies,
        *,
        device: str | torch.device = "cpu",
        max_tokens: int = 4096,
        bf16: bool = False,
    ) -> None:
        if model.config.src_vocab_size != vocab.src.vocab_size or model.config.tgt_vocab_size != vocab.tgt.vocab_size:
            raise ValueError(
                f"model vocabularies ({model.config.src_vocab_size}, {model.config.tgt_vocab_size}) do not match "
                f"the tokenizer's ({vocab.src.vocab_size}, {vocab.tgt.vocab_size})"
            )
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.vocab = vocab
        self.max_tokens = max_tokens
        self.bf16 = bf16

    @classmethod
    def from_run_dir(cls, run_dir: str | os.PathLike[str], **kwargs) -> Translator:
        """Load ``config.json``, ``model.safetensors`` and the tokenizer files of a run directory."""
        run_dir = Path(run_dir)
        model = load_model(run_dir)
        try:
            vocab = Vocabularies.load(run_dir)
        except (FileNotFoundError, ValueError) as err:
            raise CheckpointError(f"{run_dir}: cannot load the tokenizer: {err}") from None
        return cls(model, vocab, **kwargs)

    def translate(self, texts: Sequence[str]) -> list[str]:
        """Translations of ``texts``, in the same order."""
        return [self.vocab.tgt.decode(h.tokens) for h in self.translate_hypotheses(texts)]

    def translate_hypotheses(self, texts: Sequence[str]) -> list[Hypothesis]:
        """Best hypothesis (token ids and score) per input sentence, in input order."""
        if isinstance(texts, str):
            raise TypeError("translate() takes a list of sentences; wrap a single sentence in a list")
        src_ids = self.vocab.src.encode_batch(list(texts))
        results: list[Hypothesis | None] = [None] * len(src_ids)
        for batch in self._length_sorted_batches(src_ids):
            hyps = self._decode_batch([src_ids[i] for i in batch])
            for i, hyp in zip(batch, hyps):
                results[i] = hyp
        return [r if r is not None else Hypothesis([], 0.0) for r in results]

    def _length_sorted_batches(self, src_ids: list[list[int]]) -> list[list[int]]:
        order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            longest = max(len(src_ids[i]), 1)
            if current and (len(current) + 1) * longest > self.max_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _decode_batch(self, seqs: list[list[int]]) -> list[Hypothesis]:
        pad = self.vocab.src.pad_id
        width = max(max(len(s) for s in seqs), 1)
        src = torch.full((len(seqs), width), pad, dtype=torch.long)
        for row, s in enumerate(seqs):
            src[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask = torch.zeros_like(src, dtype=torch.bool)
        for row, s in enumerate(seqs):
            mask[row, : max(len(s), 1)] = True  # an empty sentence still gets one (padding) key
        src, mask = src.to(self.device), mask.to(self.device)
        autocast = (
            torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()
        )
        with autocast:
            return greedy_search(
                self.model, src, mask, bos_id=self.vocab.tgt.bos_id, eos_id=self.vocab.tgt.eos_id
            )
