"""Text in, text out: the object users (and the server) hold.

A ``Translator`` owns a model, its vocabularies and a ``DecodeConfig``. It tokenizes a list of
sentences, sorts them by length so each batch wastes little padding, decodes, and returns the
translations in the input order.

Bad input never loses the other sentences' translations: a sentence with no token the model
can read (empty, whitespace only; with a tokenizer that appends ``</s>``, a text that is only
``</s>``) translates to "" and a sentence longer than ``max_input_tokens`` is cut to that
length with a warning (``TruncationWarning``, a ``TranslationWarning`` carrying which sentence and
how it was cut), keeping the ``</s>`` a source tokenizer appends.
``translate_text`` cuts a text into sentences first, so nothing is cut there.

``precision`` (:mod:`transformer.inference_precision`) is the number format it translates in: ``bf16``
(``fp16`` on CUDA) with a bfloat16 (float16) copy of the model, weights and activations in that
format, log-probabilities and beam scores in float32: no weight is cast again during decoding.
``int8`` with int8 copies of the linear layers' weights (one scale per output feature)
multiplied by float32 activations in the CPU engine's kernels: a quarter of the weights' memory
traffic, sums in float32 (Transformer models on CPU).

On CPU the translator prepares the model it holds for the engine's decoding kernels
(``transformer.cpu.prepare_for_decoding``: its linear weights packed once, a decoder layer's step
in one call); ``TRANSFORMER_FUSED_CPU=0`` keeps PyTorch's operators. A model handed to the
constructor is prepared in place; ``close()`` gives it back as it was. On CUDA it decodes the
CUDA engine's way (``transformer.cuda.decoding``): larger batches, encoded whole, finished
sentences checked for every few steps instead of at each, so the host does not wait for the GPU
at every step, and the decoder's step captured in CUDA graphs
(``transformer.cuda.decoding_steps``); the outputs are the same.

A batch is budgeted by what its decoder cache grows to: rows (sentences x beams) x output
positions (each sentence's limit, ``max_len_a`` x source length + ``max_len_b``) at most
``max_tokens``, and at most ``MAX_BATCH_ROWS`` rows.
``benchmarks/fast_paths.py`` measures the speed and the BLEU of each precision on one checkpoint.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import torch

from transformer.errors import UserError
from transformer.cuda import decoding as cuda_decoding
from transformer.run.directory import run_languages
from transformer.run.layout import CONFIG_FILE, WEIGHTS_FILE
from transformer.run.model import CheckpointError, load_model
from transformer.decoding import DecodeConfig, Hypothesis, decode
from transformer.decoding.constraints import Constraint
from transformer.cpu import Swaps, prepare_for_decoding
from transformer.cpu.swap import plain_copy
from transformer.cpu.training_precision import slow_bf16_warning
from transformer.model import RNNSeq2Seq, Transformer
from transformer.inference_precision import check_precision, resolve_device, weight_dtype
from transformer.text import Vocabularies
from transformer.translate.warning import TermWarning, TranslationWarning, TruncationWarning

if TYPE_CHECKING:
    from transformer.translate.calibration import Calibration
    from transformer.translate.forced import ForcedScore
    from transformer.translate.glossary import Glossary, Term

GlossaryLike = "Glossary | Mapping[str, str] | Iterable[tuple[str, str]]"

DEFAULT_MAX_INPUT_TOKENS = 1024
# Decoder rows x output positions per batch on a CPU (on CUDA: cuda_decoding.BATCH_TOKENS): about the
# rows the earlier budget of 12,000 source tokens x beams gave at Multi30k's lengths (15-20 tokens).
CPU_BATCH_TOKENS = 50_000
# Rows (sentences x beams) per batch at most, whatever the budget: past a few thousand a step is as
# fast per row as it gets while its memory keeps growing (a float32 row of logits over a 32,000-token
# vocabulary alone is 128 KB), and CUDA's attention kernels refuse batches of 65,536 rows or more.
MAX_BATCH_ROWS = 4096
# Encoding a right-padded batch on CPU: with more than this share of padding, sentences are encoded
# in groups of similar length (the decoder still runs the whole batch); a group takes the next
# longer sentence while its padded size stays within GROUP_PADDING x its real tokens, or while it
# holds fewer than GROUP_MIN_TOKENS tokens (so each group's products stay large). Grouping must
# save at least GROUP_MIN_SAVING padded positions.
PADDING_TO_GROUP = 0.25
GROUP_PADDING = 1.15
GROUP_MIN_TOKENS = 256
GROUP_MIN_SAVING = 2048
_TRAILING_PUNCTUATION = re.compile(r"[^\w\u2581]+$")  # what may follow a term's last piece in the same token
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # a byte-fallback token


class Translator:
    """Translate sentences with a trained model (beam search with the paper's settings by default).

    ``precision``: ``fp32`` (the default), ``bf16``, ``int8`` (Transformer models on the CPU) or
    ``fp16`` (on CUDA), checked by :func:`transformer.inference_precision.check_precision`."""

    def __init__(
        self,
        model: Transformer | RNNSeq2Seq,
        vocab: Vocabularies,
        *,
        decoding: DecodeConfig | None = None,
        device: str | torch.device = "cpu",
        max_tokens: int | None = None,
        max_input_tokens: int | None = None,
        precision: str = "fp32",
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        if model.config.src_vocab_size != vocab.src.vocab_size or model.config.tgt_vocab_size != vocab.tgt.vocab_size:
            raise UserError(
                f"model vocabularies ({model.config.src_vocab_size}, {model.config.tgt_vocab_size}) do not match "
                f"the tokenizer's ({vocab.src.vocab_size}, {vocab.tgt.vocab_size})"
            )
        self.device = torch.device(device)
        if max_tokens is not None and max_tokens < 1:
            raise UserError(f"max_tokens must be >= 1, got {max_tokens}")
        check_precision(precision, self.device, model=model)
        self.model = model.to(self.device).eval()
        if precision == "bf16" and (warning := slow_bf16_warning(self.device)):
            warnings.warn(f"{warning}; translate in float32 (without bf16) on this device", stacklevel=2)
        if weight_dtype(precision) != torch.float32:
            self.model = low_precision_copy(self.model, weight_dtype(precision))
        self._swaps = Swaps()
        if self.device.type == "cpu" and isinstance(self.model, Transformer):
            # The kernels pack float32 weights (as they are, or int8 copies); a bf16 copy's they leave
            # to PyTorch's operators.
            self._swaps = prepare_for_decoding(self.model, precision="int8" if precision == "int8" else "fp32")
        elif self.device.type == "cuda" and isinstance(self.model, Transformer):
            from transformer.cuda.decoding_steps import accelerate_decoding

            self._swaps = accelerate_decoding(self.model)  # static buffers, the step in CUDA graphs
        self.vocab = vocab
        self.decoding = decoding or DecodeConfig()
        on_gpu = self.device.type == "cuda"
        self.max_tokens = max_tokens or (cuda_decoding.BATCH_TOKENS if on_gpu else CPU_BATCH_TOKENS)
        self.sync_every = cuda_decoding.SYNC_EVERY if on_gpu else 1  # steps between checks for finished sentences
        learned = getattr(model.config, "positional", None) == "learned"  # the recurrent baseline has no positions
        limit = model.config.max_positions if learned else DEFAULT_MAX_INPUT_TOKENS
        self.max_input_tokens = min(max_input_tokens or limit, limit)
        self.precision = precision
        self.src_lang, self.tgt_lang = src_lang, tgt_lang  # language codes, e.g. for sentence splitting
        self.calibration = calibration  # maps a translation's features to its confidence (None: no confidence)
        self._endings: dict[str, list[int]] | None = None  # a piece -> the pieces that are it + punctuation
        self._word_pieces: frozenset[int] | None = None  # the pieces that go on with the word before them

    @classmethod
    def from_run_dir(cls, run_dir: str | os.PathLike[str], **kwargs) -> Translator:
        """Load ``config.json``, ``model.safetensors`` and the tokenizer files of a run directory
        (and its languages from ``run_config.json`` when it has them).

        The translator owns the model it loads; its weights are frozen (``requires_grad`` False)."""
        run_dir = Path(run_dir)
        model = load_model(run_dir).requires_grad_(False)
        try:
            vocab = Vocabularies.load(run_dir)
        except (FileNotFoundError, UserError) as err:  # a damaged file; any other error is a bug
            raise CheckpointError(f"{run_dir}: cannot load the tokenizer: {err}") from None
        src_lang, tgt_lang = run_languages(run_dir)
        kwargs.setdefault("src_lang", src_lang)
        kwargs.setdefault("tgt_lang", tgt_lang)
        if "calibration" not in kwargs:
            from transformer.translate.calibration import Calibration

            kwargs["calibration"] = Calibration.load(run_dir)
        return cls(model, vocab, **kwargs)

    def close(self) -> None:
        """Give the model back as it was handed in (undo the CPU engine's swaps); the translator
        still works, on the model's own code."""
        self._swaps.undo()

    def with_decoding(self, **changes) -> Translator:
        """A translator sharing this model, with some decoding settings changed."""
        other = object.__new__(Translator)
        other.__dict__.update(self.__dict__)
        other.decoding = replace(self.decoding, **changes)
        return other

    # ------------------------------------------------------------------------------------------
    def translate_text(self, text: str, *, glossary: GlossaryLike | None = None) -> str:
        """Translate a text of any length: split into sentences, each translated, put back where
        it was (paragraphs, line breaks and spacing kept; see ``transformer.translate.document``).
        ``glossary``: as for ``translate``."""
        from transformer.translate.document import translate_document

        return translate_document(self, text, glossary=glossary).text

    def translate(self, texts: Iterable[str], *, glossary: GlossaryLike | None = None) -> list[str]:
        """The best translation of each text (one sentence, or one pre-segmented line), in input order.

        ``texts``: any iterable of str (a list, a generator...), not a single str. ``glossary``: a
        :class:`~transformer.translate.glossary.Glossary`, a dict ``{source: target}`` or
        ``(source, target)`` pairs; each text's translation contains the target side of every
        term whose source side it contains (constrained beam search; see ``translate_n_best``)."""
        texts = list(texts) if not isinstance(texts, (str, bytes)) else texts
        results = self.translate_n_best(texts, glossary=glossary)
        if glossary is not None and any(hyps and hyps[0].unmet for hyps in results):
            terms = self.glossary_terms(texts, glossary)
            for i, hyps in enumerate(results):
                if hyps and hyps[0].unmet:
                    warnings.warn(TermWarning([terms[i][c] for c in hyps[0].unmet], f"sentence {i + 1}"), stacklevel=2)
        return [self.vocab.tgt.decode(n_best[0].tokens) if n_best else "" for n_best in results]

    def translate_n_best(self, texts: Iterable[str], *, glossary: GlossaryLike | None = None,
                         confidence: bool = False) -> list[list[Hypothesis]]:
        """``decoding.n_best`` hypotheses per text (best first), in input order; [] for a text with
        no token the model can read (empty, whitespace only).

        ``glossary``: terms to enforce (``translate``). The target side of every term found in a
        text becomes a constraint of beam search (greedy search and sampling refuse a glossary
        that applies); one the search cannot meet within the text's length limit, or that the
        detokenized translation does not hold as a whole word, is named in ``Hypothesis.unmet``
        (indices into ``glossary_terms(texts)[i]``; ``translate`` and the document functions turn
        them into a ``TermWarning``).
        ``confidence``: set ``Hypothesis.confidence`` from the run's calibration (None without
        one); it costs one teacher-forced pass over the outputs."""
        if isinstance(texts, (str, bytes)):
            raise TypeError("translate() takes a list of sentences; wrap a single sentence in a list "
                            "(or use translate_text for a text of any length)")
        texts = list(texts)  # read an iterator once
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {i} is {type(text).__name__}, not str")
        src_ids = self.encode_sources(texts)
        terms = self.glossary_terms(texts, glossary)
        constraints = [[self._term_tokens(term) for term in found] for found in terms]
        results: list[list[Hypothesis]] = [[] for _ in texts]
        framing = {self.vocab.src.bos_id, self.vocab.src.eos_id, self.vocab.src.pad_id}
        todo = [i for i, ids in enumerate(src_ids) if any(t not in framing for t in ids)]
        for batch in self._length_sorted_batches(todo, src_ids):
            found = self._decode_batch([src_ids[i] for i in batch], [constraints[i] for i in batch], confidence)
            for i, hyps in zip(batch, found):
                results[i] = hyps
                if terms[i]:
                    for hyp in hyps:
                        hyp.unmet = self._unmet_in_text(hyp, terms[i])
        return results

    def _unmet_in_text(self, hypothesis: Hypothesis, terms: Sequence[Term]) -> tuple[int, ...]:
        """``hypothesis.unmet`` with the terms its detokenized text does not hold as a whole word
        (a token sequence can hold a term's tokens while the text does not: a piece after it that
        goes on with its word, byte tokens that together are not UTF-8)."""
        from transformer.translate.glossary import word_character

        text = self.vocab.tgt.decode(hypothesis.tokens)
        unmet = set(hypothesis.unmet)
        for c, term in enumerate(terms):
            written = self.vocab.tgt.decode(self._term_tokens_of(term.target)).strip()  # as the decoder writes it
            at = text.find(written)
            while at >= 0 and written:
                end = at + len(written)
                if not ((at > 0 and word_character(text[at - 1]) and word_character(written[0]))
                        or (end < len(text) and word_character(text[end]) and word_character(written[-1]))):
                    break
                at = text.find(written, at + 1)
            if at < 0 or not written:
                unmet.add(c)
        return tuple(sorted(unmet))

    def glossary_terms(self, texts: Sequence[str], glossary: GlossaryLike | None) -> list[list[Term]]:
        """The glossary's terms found in each text (``Glossary.matches``), in input order; a term
        whose target side is longer than any output the translator can produce is refused
        (``GlossaryError`` naming it). ``glossary`` may also be a list of one ``Glossary`` per
        text (a term base's entries for each segment, as terminology test sets give them)."""
        if glossary is None:
            return [[] for _ in texts]
        from transformer.translate.glossary import per_text

        glossaries = per_text(glossary, len(texts))
        found = [g.matches(text) for g, text in zip(glossaries, texts)]
        limit = self.longest_output
        counted: dict[str, int] = {}

        def count(target: str) -> int:
            if target not in counted:
                counted[target] = len(self._term_tokens_of(target))
            return counted[target]

        for g, terms in zip(glossaries, found):
            if terms:
                g.check_lengths(count, limit, what="the longest output", terms=terms)
        return found

    def _term_tokens(self, term: Term) -> Constraint:
        """A term's constraint: its target's tokens, the last of which may also be written with
        punctuation attached (a vocabulary holding ``▁building.`` writes "building." so); where the
        term ends with a word character and the vocabulary marks word starts (``▁``), the pieces
        that would go on with its last word may not follow it ("dark" never becomes "darkes")."""
        from transformer.translate.glossary import word_character

        tokens = self._term_tokens_of(term.target)
        if self._endings is None:
            tgt = self.vocab.tgt
            special = set(tgt.special_ids.values())
            self._endings = {}
            for i, piece in enumerate(tgt.pieces(list(range(tgt.vocab_size)))):
                word = _TRAILING_PUNCTUATION.sub("", piece)
                if word and word != piece and i not in special:
                    self._endings.setdefault(word, []).append(i)
        pieces = self.vocab.tgt.pieces(tokens) if tokens else []
        ends_a_word = bool(pieces) and pieces[0].startswith("\u2581") and word_character(term.target[-1])
        not_after = self._continuations() if ends_a_word else frozenset()
        return Constraint(tuple(tokens), tuple(self._endings.get(pieces[-1] if pieces else "", ())), not_after)

    def _continuations(self) -> frozenset[int]:
        """The target pieces that go on with the word before them: no word-start mark (``▁``), and
        a word character first; of the byte tokens, the ASCII letters and digits, the bytes that
        continue a character (which would also turn a term written in byte tokens into U+FFFD) and
        those that start a letter of two bytes (U+00C0 to U+07FF). One set, shared by every term's
        constraint."""
        from transformer.translate.glossary import word_character

        if self._word_pieces is None:
            tgt = self.vocab.tgt
            special = set(tgt.special_ids.values())
            found = set()
            for i, piece in enumerate(tgt.pieces(list(range(tgt.vocab_size)))):
                byte = _BYTE_PIECE.fullmatch(piece)
                if i in special or not piece:
                    continue
                if byte is None:
                    glued = word_character(piece[0])
                else:  # an ASCII letter or digit; or a byte that cannot start a character, or starts a letter
                    value = int(byte.group(1), 16)
                    glued = word_character(chr(value)) if value < 0x80 else not (value == 0xC2 or 0xE0 <= value <= 0xF4)
                if glued:
                    found.add(i)
            self._word_pieces = frozenset(found)
        return self._word_pieces

    def _term_tokens_of(self, target: str) -> list[int]:
        """A term's target side as the decoder writes it inside a sentence (no ``</s>``)."""
        ids = self.vocab.tgt.encode(target)
        return ids[:-1] if ids and ids[-1] == self.vocab.tgt.eos_id else ids

    def encode_sources(self, texts: Sequence[str]) -> list[list[int]]:
        """Source token ids, cut to ``max_input_tokens`` (with a ``TruncationWarning``); the
        ``</s>`` a source tokenizer appends (Marian's) stays the last token of a cut sequence."""
        ids = self.vocab.src.encode_batch(list(texts))
        limit = self.max_input_tokens
        appends_eos = bool(getattr(self.vocab.src, "append_eos", False))
        for i, seq in enumerate(ids):
            if len(seq) > limit:
                keep_eos = appends_eos and limit > 1 and seq[-1] == self.vocab.src.eos_id
                warnings.warn(TruncationWarning(i + 1, len(seq), limit, keep_eos), stacklevel=3)
                ids[i] = seq[: limit - 1] + seq[-1:] if keep_eos else seq[:limit]
        return ids

    def detokenize(self, hypothesis: Hypothesis) -> str:
        return self.vocab.tgt.decode(hypothesis.tokens)

    def score_translations(self, sources: Sequence[str],
                           targets: Sequence[str | Sequence[int]]) -> list[ForcedScore | None]:
        """How probable the model finds each given translation of its source (forced decoding:
        :mod:`transformer.translate.forced`), in the units of its own hypotheses' scores:
        ``ForcedScore.score`` of a hypothesis's tokens is that hypothesis's ``score``, and
        ``mean_log_prob`` compares translations of any length. One batched teacher-forced pass;
        None for a source with no token the model can read (empty, whitespace only).

        ``targets``: texts (tokenized as the model's target side), or token ids without
        ``<s>``/``</s>`` (a hypothesis's ``tokens``)."""
        from transformer.decoding.common import length_penalty_factor
        from transformer.translate.forced import ForcedScore, forced_log_probs

        if isinstance(sources, (str, bytes)) or isinstance(targets, (str, bytes)):
            raise TypeError("score_translations() takes lists of sources and targets; wrap a single pair in lists")
        sources, targets = list(sources), list(targets)
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
        src_ids = self.encode_sources(sources)
        texts = [i for i, t in enumerate(targets) if isinstance(t, str)]
        tgt_ids = [list(t) if not isinstance(t, str) else [] for t in targets]
        eos = self.vocab.tgt.eos_id
        for i, ids in zip(texts, self.vocab.tgt.encode_batch([targets[i] for i in texts])):
            tgt_ids[i] = ids[:-1] if ids and ids[-1] == eos else ids  # as the decoder writes it: </s> scored once
        framing = {self.vocab.src.bos_id, self.vocab.src.eos_id, self.vocab.src.pad_id}
        todo = [i for i, ids in enumerate(src_ids) if any(t not in framing for t in ids)]
        found = forced_log_probs(self.model, [src_ids[i] for i in todo], [tgt_ids[i] for i in todo],
                                 src_pad_id=self.vocab.src.pad_id, bos_id=self.vocab.tgt.bos_id, eos_id=eos,
                                 device=self.device)
        beam = self.decoding.strategy == "beam"
        out: list[ForcedScore | None] = [None] * len(sources)
        for i, (log_prob, steps, complete, end) in zip(todo, found):
            lp = float(length_penalty_factor(torch.tensor([steps]), self.decoding.length_penalty,
                                             self.decoding.alpha)[0]) if beam else 1.0
            out[i] = ForcedScore(log_prob, steps, log_prob / lp, complete, end)
        return out

    # ------------------------------------------------------------------------------------------
    def _length_sorted_batches(self, todo: list[int], src_ids: list[list[int]]) -> list[list[int]]:
        """Group sentence indices of similar length: a batch's rows x output positions (what its decoder
        cache grows to) stay within ``max_tokens``, its rows within ``MAX_BATCH_ROWS``."""
        width = self._width()
        order = sorted(todo, key=lambda i: len(src_ids[i]))
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            rows = (len(current) + 1) * width
            if current and (rows * self._output_positions(len(src_ids[i])) > self.max_tokens or rows > MAX_BATCH_ROWS):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _decode_batch(self, seqs: list[list[int]], constraints: list[list[list[int]]] | None = None,
                      confidence: bool = False) -> list[list[Hypothesis]]:
        src, mask = padded(seqs, self.vocab.src.pad_id, self.device)
        memory = self._encode_by_length(src, mask, [len(s) for s in seqs])
        confidence = confidence and self.calibration is not None
        if confidence and memory is None:  # encoded once, for the decoder and the confidence's pass
            with torch.inference_mode():
                memory = self.model.encode(src, mask)
        bos, eos = self.vocab.tgt.bos_id, self.vocab.tgt.eos_id
        results = decode(self.model, src, mask, self.decoding, bos_id=bos, eos_id=eos, memory=memory,
                         sync_every=self.sync_every, constraints=constraints if constraints and any(constraints) else None)
        if confidence:
            from transformer.translate.calibration import attach_confidence

            attach_confidence(self.model, src, mask, results, self.calibration, bos_id=bos, eos_id=eos, memory=memory)
        return results

    @torch.inference_mode()
    def _encode_by_length(self, src: torch.Tensor, mask: torch.Tensor, lens: list[int]) -> torch.Tensor | None:
        """The memory of a CPU batch, encoded in groups of sentences of similar length, each group
        cut to its longest sentence; None (encode the batch whole) where there is little padding
        to save. Exact at the real positions: a sentence's tokens attend to its own tokens only.

        A batch is sorted by length but padded to its longest sentence (with 256 Multi30k
        sentences, about 2.3x the real tokens); the decoder keeps the whole batch."""
        B, S = src.shape
        if B < 2 or self.device.type != "cpu" or not isinstance(self.model, Transformer) \
                or sum(lens) >= (1.0 - PADDING_TO_GROUP) * B * S:
            return None
        groups: list[list[int]] = [[]]
        real = 0  # tokens in the last group
        for i in sorted(range(B), key=lambda i: lens[i]):  # shortest first: a group's last is its longest
            if real >= GROUP_MIN_TOKENS and (len(groups[-1]) + 1) * lens[i] > GROUP_PADDING * (real + lens[i]):
                groups.append([])
                real = 0
            groups[-1].append(i)
            real += lens[i]
        padded = sum(len(group) * lens[group[-1]] for group in groups)
        if len(groups) == 1 or B * S - padded < GROUP_MIN_SAVING:
            return None
        memory = torch.zeros(B, S, self.model.config.d_model, dtype=next(self.model.parameters()).dtype)
        for group in groups:
            rows = torch.tensor(group)
            width = max(1, lens[group[-1]])
            memory[rows, :width] = self.model.encode(src[rows, :width], mask[rows, :width])
        return memory

    @property
    def longest_output(self) -> int:
        """The most tokens a translation may have: the length limit of a source of
        ``max_input_tokens`` (a glossary term or a memory term longer than it cannot be placed)."""
        return int(self.decoding.max_len_a * self.max_input_tokens + self.decoding.max_len_b)

    def _width(self) -> int:
        """Decoder rows per sentence: beams (or n-best samples)."""
        return max(self.decoding.beam_size if self.decoding.strategy == "beam" else 1, self.decoding.n_best)

    def _output_positions(self, source_length: int) -> int:
        """The most output positions of a sentence of ``source_length`` tokens (``output_limits``)."""
        positions = max(1, int(self.decoding.max_len_a * source_length + self.decoding.max_len_b))
        learned = getattr(self.model.config, "positional", None) == "learned"
        return min(positions, self.model.config.max_positions) if learned else positions


def padded(seqs: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id sequences as one right-padded ``(B, S)`` tensor and its mask (True = real token), on ``device``."""
    src = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(src, dtype=torch.bool)
    for row, s in enumerate(seqs):
        src[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[row, : len(s)] = True
    return src.to(device), mask.to(device)


def low_precision_copy(model: Transformer | RNNSeq2Seq, dtype: torch.dtype) -> Transformer | RNNSeq2Seq:
    """A copy of ``model`` with its weights in ``dtype`` (bfloat16 or float16) for inference
    (``model`` itself is left as it is; a model already in ``dtype`` is returned as it is).

    Unlike autocast, which keeps fp32 weights and casts every layer's input and weight on the
    fly, the copy holds low-precision weights and the whole forward pass runs in that format
    without casts; the decoders still compute log-probabilities and scores in float32.
    """
    if all(p.dtype == dtype for p in model.parameters()):
        return model
    return plain_copy(model).to(dtype).eval()


def load_translator(run_dir: str | os.PathLike[str], *, decoding: DecodeConfig | None = None,
                    precision: str = "fp32", device: str = "cpu",
                    **options) -> Translator:
    """The translator of a trained run directory, as the CLI, the server and ``attend`` load it.

    ``decoding`` defaults to the paper's beam search; ``precision`` is ``fp32`` (default), ``bf16``,
    ``int8`` or ``fp16``; ``device`` is
    ``cpu``, ``cuda`` or ``auto`` (:func:`transformer.inference_precision.resolve_device`: ``auto`` is the
    CPU for int8); other ``options`` go to ``Translator``. Raises FileNotFoundError naming what is
    missing, ValueError for settings that do not go together."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE) if not (run_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{run_dir} is not a trained run directory: missing {', '.join(missing)}")
    return Translator.from_run_dir(run_dir, decoding=decoding, precision=precision,
                                   device=resolve_device(device, precision=precision), **options)
