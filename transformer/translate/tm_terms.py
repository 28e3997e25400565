"""The terms a sentence shares with its fuzzy match in the translation memory, as glossary terms
(``transformer translate --tm PATH --tm-constraints``, ``transformer serve --tm-constraints``).

A fuzzy match ``(S', T')`` of a sentence ``S`` differs from it in a few words; where the two
sources agree, a person has already said how to translate them, in ``T'``. Each run of words ``S``
shares with ``S'`` (a *phrase*: it stops at a word with punctuation before or after it) is
aligned to the words of ``T'`` that translate it, and the pair becomes a glossary
:class:`~transformer.translate.glossary.Term`: constrained beam search then writes the memory's
wording into the model's translation of ``S``, and the model translates what differs.

Only where the model is unsure of its own translation (:func:`retranslate_unsure`): its mean
log-probability per token below :data:`UNSURE_LOG_PROB`. A model at home in the sentences' domain
translates them better than pieces of another sentence's translation can (a shared phrase next to
a changed word is often worded otherwise: "gilet de sauvetage rouge", "red life jacket"); one out
of its domain translates them worse.

Words are whitespace-separated, compared case-folded without the punctuation around them.

Alignment: one teacher-forced pass of the model over ``(S', T')``. The encoder-decoder attention
of its next-to-last decoder layer (the last of a one-layer model), averaged over the heads,
summed over the pieces of each source word and averaged over those of each target word, is a
word-to-word matrix: a target word is linked to the source word it attends to most, and a source
word to the target word that attends to it most. A phrase's target side runs from the first to
the last target word linked with a word of the phrase, either way, and is kept only where it is
consistent: no target word inside it that holds a letter or a digit attends most to a word
outside the phrase. A pair whose pieces do not fall into its whitespace words (a tokenizer
marking word starts some other way) gives no terms, nor does one the model cannot read whole (a
source over the input limit, a target over the output limit).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

import numpy as np
import torch

from transformer.decoding import Hypothesis
from transformer.text.tokenizer import WORD_BOUNDARY
from transformer.translate.glossary import MAX_TERM_CHARS, Glossary, Term, fold
from transformer.translate.translator import padded

_EDGE = re.compile(r"^\W+|\W+$")  # the punctuation around a word
_CONTENT = re.compile(r"[^\W_]")  # a letter or a digit
PAIRS_PER_PASS = 32  # fuzzy matches aligned in one forward pass
UNSURE_LOG_PROB = -0.8
"""The mean log-probability per token (``</s>`` counted) of a model's translation under which the
memory's terms are given to it (chosen on Tatoeba's and Multi30k's validation sets, docs/memory.md)."""


def _core(word: str) -> str:
    """A word as phrases are compared: without the punctuation around it, case-folded."""
    return fold(_EDGE.sub("", word) or word)


def _word_numbers(pieces: Sequence[str], framing: Sequence[bool]) -> list[int | None]:
    """The whitespace word of each piece (None for ``<s>``, ``</s>``): a piece marked ``▁`` starts one."""
    out: list[int | None] = []
    word = -1
    for piece, framed in zip(pieces, framing):
        if framed:
            out.append(None)
            continue
        if piece.startswith(WORD_BOUNDARY) or word < 0:
            word += 1
        out.append(word)
    return out


def _word_matrix(attention: np.ndarray, src_words: list[int | None], n_src: int, tgt_words: list[int],
                 n_tgt: int) -> np.ndarray:
    """``(n_tgt, n_src)``: a piece-level attention ``(T, S)`` summed over each source word's
    pieces and averaged over each target word's."""
    rows = np.zeros((n_tgt, len(tgt_words)))
    rows[tgt_words, np.arange(len(tgt_words))] = 1.0
    rows /= rows.sum(axis=1, keepdims=True)
    cols = np.zeros((len(src_words), n_src))
    real = [i for i, w in enumerate(src_words) if w is not None]
    cols[real, [src_words[i] for i in real]] = 1.0
    return rows @ attention @ cols


def _phrase_terms(sentence: str, source: str, target: str, matrix: np.ndarray) -> list[Term]:
    """The terms of one sentence from its match ``(source, target)`` and their word matrix."""
    words, match_words, target_words = sentence.split(), source.split(), target.split()
    to_source = matrix.argmax(axis=1)  # each target word's source word
    to_target = matrix.argmax(axis=0)  # each source word's target word
    blocks = difflib.SequenceMatcher(a=[_core(w) for w in words], b=[_core(w) for w in match_words],
                                     autojunk=False).get_matching_blocks()
    terms = []
    for at, at_match, size in blocks:
        start = 0
        while start < size:
            end = start  # the phrase stops at a word with punctuation after it, in either sentence
            while (end + 1 < size and not _edged(words[at + end], match_words[at_match + end], after=True)
                   and not _edged(words[at + end + 1], match_words[at_match + end + 1], after=False)):
                end += 1
            phrase = range(start, end + 1)
            start = end + 1
            linked_words = {at_match + k for k in phrase if _CONTENT.search(match_words[at_match + k])}
            if not linked_words:
                continue
            span = sorted({j for j in range(len(target_words)) if to_source[j] in linked_words}
                          | {int(to_target[i]) for i in linked_words})
            first, last = span[0], span[-1]
            if any(to_source[j] not in linked_words and _CONTENT.search(target_words[j]) for j in range(first, last + 1)):
                continue
            term = Term(_EDGE.sub("", " ".join(words[at + k] for k in phrase)),
                        _EDGE.sub("", " ".join(target_words[first:last + 1])))
            if term.source and term.target and max(len(term.source), len(term.target)) <= MAX_TERM_CHARS:
                terms.append(term)
    return terms


def _edged(word: str, match_word: str, *, after: bool) -> bool:
    """Whether either word has punctuation after it (``after``) or before it."""
    pattern = r"\W$" if after else r"^\W"
    return bool(re.search(pattern, word) or re.search(pattern, match_word))


def memory_terms(translator, sentences: Sequence[str], matches: Sequence[tuple[str, str] | None]) -> list[list[Term]]:
    """The terms each sentence shares with its fuzzy match, a ``(source, target)`` entry (see the
    module doc; ``[]`` where the match is None or gives none), in the order of the sentence's words.

    ``translator``: a :class:`~transformer.translate.translator.Translator` (its model, vocabularies
    and output length limit)."""
    if len(sentences) != len(matches):
        raise ValueError(f"{len(sentences)} sentences for {len(matches)} matches")
    out: list[list[Term]] = [[] for _ in sentences]
    rows = [i for i, (sentence, match) in enumerate(zip(sentences, matches)) if match is not None and sentence.split()]
    pairs = [(" ".join(matches[i][0].split()), " ".join(matches[i][1].split())) for i in rows]
    for i, (source, target), matrix in zip(rows, pairs, word_matrices(translator, pairs)):
        if matrix is not None:
            out[i] = _phrase_terms(" ".join(sentences[i].split()), source, target, matrix)
    return out


@torch.no_grad()
def word_matrices(translator, pairs: Sequence[tuple[str, str]]) -> list[np.ndarray | None]:
    """The word-to-word attention ``(target words, source words)`` of each ``(source, target)`` pair
    (whitespace words; see the module doc), None for a pair it cannot give: a model without
    attention maps, a source over the input limit or without a token the model reads, a target
    longer than the output limit, pieces that do not fall into the whitespace words."""
    out: list[np.ndarray | None] = [None] * len(pairs)
    vocab, model = translator.vocab, translator.model
    if not hasattr(model, "attention_maps"):
        return out
    limit = translator.longest_output
    framing = {vocab.src.bos_id, vocab.src.eos_id, vocab.src.pad_id}
    todo = []
    for i, (source, target) in enumerate(pairs):
        src, tgt = vocab.src.encode(source), vocab.tgt.encode(target)
        tgt = tgt[:-1] if tgt and tgt[-1] == vocab.tgt.eos_id else tgt
        if (not tgt or len(tgt) > limit or len(src) > translator.max_input_tokens
                or not any(t not in framing for t in src)):
            continue
        src_words = _word_numbers(vocab.src.pieces(src), [t in framing for t in src])
        tgt_words = _word_numbers(vocab.tgt.pieces(tgt), [False] * len(tgt))
        if (max((w for w in src_words if w is not None), default=-1) + 1 != len(source.split())
                or tgt_words[-1] + 1 != len(target.split())):
            continue
        todo.append((i, src, tgt, src_words, tgt_words))
    for start in range(0, len(todo), PAIRS_PER_PASS):
        chunk = todo[start:start + PAIRS_PER_PASS]
        src, mask = padded([c[1] for c in chunk], vocab.src.pad_id, translator.device)
        # <s> + the target, padded after with <s> (causal: unseen): row j predicts target piece j
        tgt, _ = padded([[vocab.tgt.bos_id, *c[2][:-1]] for c in chunk], vocab.tgt.bos_id, translator.device)
        maps = model.attention_maps(src, tgt, mask)
        layer = len(maps.cross) - 2 if len(maps.cross) > 1 else 0
        cross = maps.cross[layer].float().mean(dim=1).cpu().numpy()  # (M, T, S)
        for row, (i, s, t, src_words, tgt_words) in enumerate(chunk):
            source, target = pairs[i]
            out[i] = _word_matrix(cross[row, : len(t), : len(s)], src_words, len(source.split()), tgt_words,
                                  len(target.split()))
    return out


def unsure(hypotheses: Sequence[Hypothesis], below: float = UNSURE_LOG_PROB) -> bool:
    """Whether the best of ``hypotheses`` has a mean log-probability per token below ``below``."""
    return bool(hypotheses) and hypotheses[0].log_prob / (len(hypotheses[0].tokens) + 1) < below


def retranslate_unsure(translator, texts: Sequence[str], results: list[list[Hypothesis]],
                       matches: Sequence[tuple[str, str] | None], users: Sequence[Glossary | None], options: dict,
                       below: float = UNSURE_LOG_PROB) -> list[list[Term]]:
    """Translate again, with the terms they share with their fuzzy ``matches`` after their users'
    glossaries (:func:`with_memory_terms`), the texts whose translations in ``results`` (the
    translator's, replaced in place) are :func:`unsure`; returns the memory's terms each text was
    translated with (a text without one is not translated again).

    ``options``: the ``translate_n_best`` options of ``results`` (its glossary is ``users``'). The
    hypotheses' ``unmet`` name the users' terms alone (:func:`users_unmet`)."""
    used: list[list[Term]] = [[] for _ in texts]
    redo = [i for i, (hyps, match) in enumerate(zip(results, matches)) if match is not None and unsure(hyps, below)]
    found = memory_terms(translator, [texts[i] for i in redo], [matches[i] for i in redo]) if redo else []
    offered = {i: terms for i, terms in zip(redo, found) if terms}
    searched = {i: with_memory_terms(users[i], terms, texts[i]) for i, terms in offered.items()}
    kept = {i: [term for term in searched[i].matches(texts[i]) if term in offered[i]] for i in searched}
    redo = [i for i in searched if kept[i]]  # a sentence all of whose terms gave way to the user's: as it was
    if not redo:
        return used
    again = translator.translate_n_best([texts[i] for i in redo], **{**options, "glossary": [searched[i] for i in redo]})
    for i, hyps in zip(redo, again):
        users_unmet(hyps, searched[i].matches(texts[i]), users[i].matches(texts[i]) if users[i] is not None else [])
        results[i] = hyps
        used[i] = kept[i]
    return used


def with_memory_terms(glossary: Glossary | None, terms: Sequence[Term], sentence: str) -> Glossary:
    """The glossary ``sentence`` is searched with: the terms of ``glossary`` (the user's, which
    win) found in it, then the memory's ``terms`` that leave each of those found. Of overlapping
    matches the longest wins, and of two with one target the first, so a memory phrase holding a
    user's term, or worded as one, would drop that term from the search without a word. Built
    from the terms found alone: a glossary file of millions of terms is not indexed again."""
    wanted = glossary.matches(sentence) if glossary is not None else []
    own = Glossary(wanted, name=glossary.name) if glossary is not None else Glossary()
    return own.extended(term for term in terms if set(wanted) <= set(own.extended([term]).matches(sentence)))


def users_unmet(hypotheses, searched: Sequence[Term], users: Sequence[Term]) -> None:
    """Turn each hypothesis's ``unmet`` (indices into ``searched``, the terms found in its sentence
    with the memory's) into indices into ``users`` (those of the user's glossary alone): a memory
    term the search could not place is the memory's suggestion, not a term the user asked for."""
    where = {term: k for k, term in enumerate(users)}
    for hypothesis in hypotheses:
        hypothesis.unmet = tuple(where[searched[c]] for c in hypothesis.unmet if searched[c] in where)
