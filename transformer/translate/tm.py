"""Translating with a translation memory (``transformer translate --tm PATH``).

:class:`MemoryTranslator` stands in front of a
:class:`~transformer.translate.translator.Translator`: of the sentences it is given, those with an
accepted entry of the language pair in the memory (the same source after
:func:`~transformer.memory.text.normalise`) get that entry's target as their translation, and
only the others are given to the model, which does not run at all when every sentence is found.
Every way a text is translated (lines, documents, HTML, files) hands its sentences to the
translator's ``translate_n_best`` and reads them back through ``detokenize``, so the memory
serves them all. Sentences that are not found may have fuzzy matches (entries whose sources are
at least ``threshold`` alike): they are kept, with their similarity, for the outputs that show
alternatives (``--json``), and with ``constraints`` the words a sentence shares with its best
match become glossary terms of its translation where the model is unsure of its own
(:mod:`transformer.translate.tm_terms`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from transformer.decoding import Hypothesis
from transformer.errors import UserError
from transformer.memory import Entry, Match, TMBusyError, TMError, TranslationMemory
from transformer.memory.text import language_code
from transformer.translate.glossary import Term, per_text
from transformer.translate.tm_terms import UNSURE_LOG_PROB, retranslate_unsure

DEFAULT_THRESHOLD = 0.75  # TranslationMemory.search's min_similarity (docs/memory.md)


@dataclass
class MemoryHypothesis(Hypothesis):
    """A translation that comes from the memory: ``text`` is the entry's target (no tokens; score
    0.0, the log-probability of a certainty, and no confidence: the model did not make it)."""

    text: str = ""
    entry: Entry | None = None


class MemoryTranslator:
    """A translator that answers from a translation memory first (see the module doc).

    Args:
        translator: the model's translator; every attribute this class lacks is its.
        memory: the open memory (closed by :meth:`close`).
        source_lang: the language of the sentences given.
        target_lang: the language of the translations wanted.
        threshold: the lowest similarity of a fuzzy match kept (0 to 1); ``None``: no fuzzy search.
        constraints: the terms a text shares with its best fuzzy match are constraints of its
            translation, after the glossary's own, where the model's own translation is unsure
            (beam search only; the translator's other strategies search without them).
        unsure_below: the mean log-probability per token under which a translation is unsure
            (:func:`~transformer.translate.tm_terms.unsure`).

    After each ``translate_n_best`` call, :attr:`found` holds the entry of each text served from
    the memory, :attr:`matches` the fuzzy matches of the others and :attr:`terms` the memory's
    terms each was translated with (texts as given), and :attr:`served` and :attr:`sentences`
    count the texts served and given since the start. A memory term the search could not place
    is not named in ``Hypothesis.unmet``, which names the glossary's terms alone.
    """

    def __init__(self, translator, memory: TranslationMemory, source_lang: str, target_lang: str, *,
                 threshold: float | None = DEFAULT_THRESHOLD, constraints: bool = False,
                 unsure_below: float = UNSURE_LOG_PROB) -> None:
        if constraints and threshold is None:
            raise ValueError("memory constraints come from fuzzy matches: give a threshold")
        self.translator, self.memory = translator, memory
        self.source_lang, self.target_lang = source_lang, target_lang
        self.threshold, self.constraints, self.unsure_below = threshold, constraints, unsure_below
        self.found: dict[str, Entry] = {}
        self.matches: dict[str, list[Match]] = {}
        self.terms: dict[str, list[tuple[Term, Entry]]] = {}
        self.served = self.sentences = 0

    def __getattr__(self, name: str):
        return getattr(self.translator, name)

    def close(self) -> None:
        self.memory.close()

    def _lookup(self, text: str) -> Entry | None:
        """The accepted entry of ``text`` (:func:`recall`), its fuzzy matches kept."""
        entry, found = recall(self.memory, text, self.source_lang, self.target_lang, self.threshold)
        if found:
            self.matches[text] = found
        return entry

    def keeps_whole(self, line: str) -> bool:
        """Whether a line of several sentences is translated whole (:func:`holds`)."""
        return holds(self.memory, line, self.source_lang, self.target_lang)

    def translate_n_best(self, texts: Iterable[str], **options) -> list[list[Hypothesis]]:
        """As the translator's, the texts found in the memory answered by their entries alone."""
        texts = list(texts)
        self.found, self.matches, self.terms = {}, {}, {}
        entries = [self._lookup(text) if isinstance(text, str) else None for text in texts]
        todo = [i for i, entry in enumerate(entries) if entry is None]
        results: list[list[Hypothesis]] = [[] for _ in texts]
        if todo:
            users = [None] * len(todo)
            if options.get("glossary") is not None:  # a glossary per text: the model's texts keep their own
                glossaries = per_text(options["glossary"], len(texts))
                users = [glossaries[i] for i in todo]
                options = {**options, "glossary": users}
            for i, hyps in zip(todo, self._translate([texts[i] for i in todo], options, users)):
                results[i] = hyps
        for i, entry in enumerate(entries):
            if entry is not None:
                self.found[texts[i]] = entry
                results[i] = [MemoryHypothesis([], 0.0, text=entry.target, entry=entry)]
        self.sentences += sum(1 for text in texts if isinstance(text, str) and text.strip())
        self.served += len(texts) - len(todo)
        return results

    def _translate(self, texts: list[str], options: dict, users: list) -> list[list[Hypothesis]]:
        """The model's hypotheses of ``texts``, with the memory's terms where ``constraints`` asks
        (``users``: each text's glossary of ``options``, or None)."""
        results = self.translator.translate_n_best(texts, **options)
        matches = [self.matches[text][0] if self.matches.get(text) else None for text in texts]
        if not self.constraints or self.translator.decoding.strategy != "beam" or not any(matches):
            return results
        used = retranslate_unsure(self.translator, texts, results,
                                  [(m.entry.source, m.entry.target) if m else None for m in matches], users, options,
                                  self.unsure_below)
        for text, terms, match in zip(texts, used, matches):
            if terms:
                self.terms[text] = [(term, match.entry) for term in terms]
        return results

    def detokenize(self, hypothesis: Hypothesis) -> str:
        if isinstance(hypothesis, MemoryHypothesis):
            return hypothesis.text
        return self.translator.detokenize(hypothesis)

    def notes(self, text: str) -> dict:
        """What the last call found for ``text`` (as given to it), for a JSON record: ``memory``
        (the entry's id and similarity 1.0) where the memory gave its translation, else
        ``memory_alternatives`` (its fuzzy matches: text, similarity, the entry's id and source)
        and ``memory_terms`` (the terms it was translated with) where it has some; {} otherwise."""
        return memory_notes(self.found.get(text), self.matches.get(text, ()), self.terms.get(text, ()))

    def summary(self) -> str:
        return (f"{self.served} of {self.sentences} sentence{'s' * (self.sentences != 1)} from the translation "
                f"memory {self.memory.path}")


def recall(memory: TranslationMemory, text: str, source_lang: str, target_lang: str,
           threshold: float | None) -> tuple[Entry | None, list[Match]]:
    """The accepted entry of ``text`` in ``memory`` for the pair, and where there is none its fuzzy
    matches from ``threshold`` up (None: no fuzzy search), best first. ``(None, [])`` for a text
    the memory cannot hold (blank, too long, with a control character): the model translates it.

    Raises:
        TMBusyError: the memory is locked past its timeout (the memory's fault, not the text's).
    """
    if not text.strip():
        return None, []
    try:
        entry = memory.lookup(text, source_lang, target_lang)
        if entry is None and threshold is not None:
            return None, memory.search(text, source_lang, target_lang, min_similarity=threshold)
    except TMBusyError:
        raise
    except TMError:
        return None, []
    return entry, []


def holds(memory: TranslationMemory, line: str, source_lang: str, target_lang: str) -> bool:
    """Whether ``line`` has an accepted entry of its own in the pair: a line of several sentences
    that is one entry is translated whole, as that entry, not cut into sentences. A memory locked
    past its timeout holds nothing (the line is cut, as without a memory)."""
    try:
        return recall(memory, line, source_lang, target_lang, None)[0] is not None
    except TMBusyError:
        return False


def memory_notes(entry: Entry | None, matches: Iterable[Match] = (),
                 terms: Iterable[tuple[Term, Entry]] = ()) -> dict:
    """What a JSON record says of a sentence's lookup: ``memory`` (the entry's id and similarity
    1.0) where ``entry`` gave its translation, else ``memory_alternatives`` (the fuzzy ``matches``:
    text, similarity, the entry's id and source) where there are some, and ``memory_terms`` (the
    ``terms`` its translation was searched with: source, target and the entry's id) where there
    are some; {} otherwise."""
    if entry is not None:
        return {"memory": {"id": entry.id, "similarity": 1.0}}
    notes = {}
    if matches := list(matches):
        notes["memory_alternatives"] = [{"text": m.entry.target, "similarity": round(m.similarity, 4),
                                         "id": m.entry.id, "source": m.entry.source} for m in matches]
    if terms := list(terms):
        notes["memory_terms"] = [{"source": term.source, "target": term.target, "id": entry.id}
                                 for term, entry in terms]
    return notes


def memory_translator(translator, path: str, *, source_lang: str | None, threshold: float | None,
                      fuzzy: bool, constraints: bool = False) -> MemoryTranslator:
    """``translator`` in front of the memory at ``path``, which must exist (a lookup never creates
    one): its pair is ``source_lang`` (default: the run's) to the run's target language. ``fuzzy``:
    fuzzy matches are searched for; ``constraints``: their shared terms constrain the translations
    (searched for either way).

    Raises:
        UserError: no memory there, a bad threshold, constraints without beam search, or a run
            that names no languages.
        TMError: a file that is not a translation memory (damaged, another application's).
    """
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    if not 0 < threshold <= 1:
        raise UserError(f"--tm-threshold must be a similarity above 0 and at most 1, got {threshold}")
    if constraints and translator.decoding.strategy != "beam":
        raise UserError(f"--tm-constraints puts the memory's terms in the translation by beam search; "
                        f"{translator.decoding.strategy} decoding cannot (use beam search, e.g. --beam 4)")
    if not Path(path).exists():
        raise UserError(f"no translation memory at {path}: `transformer tm import FILE --tm {path} --src-lang CODE "
                        "--tgt-lang CODE` makes one")
    source, target = source_lang or translator.src_lang, translator.tgt_lang
    if not source or not target:
        raise UserError("--tm looks sentences up by language pair, and the run does not name its "
                        f"{'source' if not source else 'target'} language (data.src_lang, data.tgt_lang)"
                        + (": give --src-lang CODE" if not source else ""))
    pair = language_code(source, "source language"), language_code(target, "target language")
    return MemoryTranslator(translator, TranslationMemory(path), *pair, threshold=threshold if fuzzy or constraints else None,
                            constraints=constraints)
