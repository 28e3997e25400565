"""The features of a translation that its confidence is computed from: what the model knows.

The model's own scores rank translations only roughly: a long, correct sentence has a lower
log-probability than a short, wrong one, and a translation that skips half of its source can be
fluent and probable. The confidence combines a few numbers the model gives for a finished
translation, its own score and what one teacher-forced pass of the decoder over ``<s> + tokens``
shows (the step that predicted each token, ``</s>`` included), into one probability fitted on
held-out data (:mod:`~transformer.translate.calibration`):

* ``mean_log_prob``: the length-normalised log-probability, ``Hypothesis.log_prob / (len(tokens)
  + 1)`` (the log-probability of the tokens and ``</s>`` over their number: the raw baseline);
* ``min_log_prob``, ``p10_log_prob``: the least probable token, the 10th percentile of the tokens;
* ``mean_entropy``: the mean entropy of the model's distribution at each step (how unsure it was);
* ``uncovered_share``, ``coverage_penalty``: how the last decoder layer's encoder-decoder attention,
  averaged over heads and summed over the output steps, covers the source tokens (the share that
  received less than half a step's attention; GNMT's coverage penalty ``sum_j log min(c_j, 1)``
  divided by the source length);
* ``length_ratio``, ``length_ratio_squared``: ``log(output length / source length)`` and its square
  (a translation much shorter or longer than usual is suspect);
* ``source_length``: ``log`` of the source length.

:data:`FEATURES` lists them all (every one is computed); a calibration uses some of them.

The features of a hypothesis depend on its source, its tokens and its score alone, not on the
other sentences of its batch (padding is masked; the output layer, where a feature needs it, runs
over a bounded number of rows at a time).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from transformer.decoding import Hypothesis
from transformer.decoding.common import inference, token_log_probs
from transformer.model import Transformer

FEATURES = ("mean_log_prob", "min_log_prob", "p10_log_prob", "mean_entropy", "uncovered_share", "coverage_penalty",
            "length_ratio", "length_ratio_squared", "source_length")
UNCOVERED_BELOW = 0.5  # a source token with less attention than this, summed over the steps, is "uncovered"
COVERAGE_FLOOR = 0.01  # the coverage penalty's floor: a token with less attention counts as this little
# Logits of at most this many elements are held at a time (rows x steps x vocabulary): 64 MB in float32.
_LOGIT_ELEMENTS = 1 << 24


# The features read from the model's distribution at each step: they need the output layer's logits.
_DISTRIBUTION = ("min_log_prob", "p10_log_prob", "mean_entropy")


@inference
def hypothesis_features(model: Transformer, src: Tensor, src_mask: Tensor, results: Sequence[Sequence[Hypothesis]],
                        *, bos_id: int, eos_id: int, memory: Tensor | None = None,
                        names: Sequence[str] = FEATURES) -> np.ndarray:
    """The :data:`FEATURES` of every hypothesis, as ``(M, len(FEATURES))`` float64 in the order of
    ``results`` flattened (sentence by sentence, best first).

    ``mean_log_prob`` is the hypothesis's own ``log_prob / (len(tokens) + 1)``; the others come from
    one teacher-forced pass of the decoder over ``<s> + tokens``, the output layer included only
    where a feature of the distribution (``min_log_prob``, ``p10_log_prob``, ``mean_entropy``) is
    wanted.

    Args:
        model: the model that translated (a ``Transformer``: one decoder pass with the attention
            weights; another model, such as the recurrent baseline: its ``attention_maps`` and
            ``decode``).
        src, src_mask: the ``(B, S)`` source ids and mask (True = real token) the results came from.
        results: per sentence, its hypotheses (``decode``'s output).
        bos_id, eos_id: the target tokenizer's ``<s>`` and ``</s>``.
        memory: ``model.encode(src, src_mask)`` when the caller has it (a ``Transformer``'s);
            else the sources are encoded here.
        names: the features wanted; the columns of the others are nan.
    """
    flat = [(b, h) for b, hyps in enumerate(results) for h in hyps]
    if not flat:
        return np.zeros((0, len(FEATURES)))
    if isinstance(model, Transformer) and memory is None:
        memory = model.encode(src, src_mask)
    distribution = any(name in names for name in _DISTRIBUTION)
    # with the logits, a bounded number of rows at a time: rows x steps x vocabulary elements
    longest = max(len(h.tokens) for _, h in flat) + 1
    rows = max(1, _LOGIT_ELEMENTS // (longest * model.config.tgt_vocab_size)) if distribution else len(flat)
    out = np.concatenate([
        _chunk_features(model, src, src_mask, memory, flat[start : start + rows], bos_id=bos_id, eos_id=eos_id,
                        distribution=distribution, entropy="mean_entropy" in names)
        for start in range(0, len(flat), rows)])
    out[:, [i for i, name in enumerate(FEATURES) if name not in names]] = np.nan
    return out


def _chunk_features(model: Transformer, src: Tensor, src_mask: Tensor, memory: Tensor | None,
                    chunk: list[tuple[int, Hypothesis]], *, bos_id: int, eos_id: int, distribution: bool,
                    entropy: bool) -> np.ndarray:
    dev = src.device
    width = max(len(h.tokens) for _, h in chunk) + 1
    # A translation that filled a learned position table was cut there without </s>: its steps
    # read every position, and the pass reads no more (the step after it was never taken).
    cfg = getattr(model, "config", None)
    if cfg is not None and getattr(cfg, "positional", None) == "learned":
        width = min(width, cfg.max_positions)
    tgt = torch.full((len(chunk), width), bos_id, dtype=torch.long)  # (M, T): <s> + tokens, padding after (causal)
    gold = torch.full((len(chunk), width), eos_id, dtype=torch.long)  # (M, T): tokens + </s>
    for i, (_, h) in enumerate(chunk):
        tokens = torch.tensor(h.tokens, dtype=torch.long)
        tgt[i, 1 : len(h.tokens) + 1] = tokens[: width - 1]
        gold[i, : len(h.tokens)] = tokens
    index = torch.tensor([b for b, _ in chunk], device=dev)
    rows_mask = src_mask.index_select(0, index)
    if memory is not None:
        logits, cross = _teacher_forced(model, memory.index_select(0, index), tgt.to(dev), rows_mask,
                                        logits=distribution)
    else:
        logits, cross = _attention_maps(model, src.index_select(0, index), tgt.to(dev), rows_mask,
                                        logits=distribution)
    picked = spread = None
    if logits is not None:
        log_probs = token_log_probs(logits)  # (M, T, V) float32
        picked = log_probs.gather(-1, gold.to(dev).unsqueeze(-1)).squeeze(-1).double().cpu().numpy()  # (M, T)
        if entropy:
            spread = (-(log_probs.exp() * log_probs).sum(-1)).double().cpu().numpy()  # (M, T)
    cross = cross.double().cpu()  # (M, T, S)
    mask = rows_mask.cpu()
    out = np.empty((len(chunk), len(FEATURES)))
    for i, (_, h) in enumerate(chunk):
        steps = min(len(h.tokens) + 1, width)
        out[i] = _features(h.log_prob / steps, None if picked is None else picked[i, :steps],
                           None if spread is None else spread[i, :steps], cross[i, :steps][:, mask[i]].numpy())
    return out


def _teacher_forced(model: Transformer, memory: Tensor, tgt: Tensor, src_mask: Tensor, *,
                    logits: bool) -> tuple[Tensor | None, Tensor]:
    """The logits ``(M, T, V)`` of ``tgt`` (None unless ``logits``) and the last decoder layer's
    encoder-decoder attention, averaged over its heads, ``(M, T, S)``: one pass of a Transformer's
    decoder."""
    hidden, _, cross = model.decoder(tgt, memory, src_mask, need_weights=True)
    return model.output(hidden) if logits else None, cross[-1].mean(dim=1)


def _attention_maps(model, src: Tensor, tgt: Tensor, src_mask: Tensor, *, logits: bool) -> tuple[Tensor | None, Tensor]:
    """What :func:`_teacher_forced` gives, from any model with ``attention_maps``, ``encode`` and ``decode``."""
    cross = model.attention_maps(src, tgt, src_mask).cross[-1].mean(dim=1)
    return model.decode(tgt, model.encode(src, src_mask), src_mask) if logits else None, cross


def _features(mean_log_prob: float, log_probs: np.ndarray | None, entropy: np.ndarray | None,
              attention: np.ndarray) -> list[float]:
    """One hypothesis's :data:`FEATURES` from its length-normalised log-probability, its steps'
    target log-probabilities ``(T,)`` and entropies ``(T,)`` (None: not computed, nan) and its
    head-averaged attention over its real source tokens ``(T, S)``."""
    steps, source = attention.shape
    coverage = attention.sum(axis=0)  # (S,) attention each source token received over all steps
    ratio = math.log(steps / max(source, 1))
    return [
        float(mean_log_prob),
        float(log_probs.min()) if log_probs is not None else math.nan,
        float(np.percentile(log_probs, 10)) if log_probs is not None else math.nan,
        float(entropy.mean()) if entropy is not None else math.nan,
        float((coverage < UNCOVERED_BELOW).mean()) if source else 0.0,
        float(np.log(np.clip(coverage, COVERAGE_FLOOR, 1.0)).mean()) if source else 0.0,
        ratio,
        ratio * ratio,
        math.log(max(source, 1)),
    ]
