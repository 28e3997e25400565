"""Alternative translations: up to n DISTINCT translations of each text, best first.

Beam search's n-best list often holds the same text several times: two token sequences may
detokenise to one string (a word spelt as one subword or as two), and a text of several sentences
whose k-th hypotheses differ in one sentence only repeats the others. The alternatives are what
is left of the n-best list once the detokenised texts are deduplicated:

* a sentence's alternatives are its beam's hypotheses (``beam_size`` of them, every finished
  hypothesis the search keeps), detokenised, each text kept once, in the beam's order;
* a text of several sentences: its k-th alternative puts each sentence's k-th distinct translation
  (its last when it has fewer) in the text's structure, as ``translate_lines`` and the server
  build n-best lines; the texts built are deduplicated again.

The first alternative is always the translation the translator gives without alternatives
(``translate_document``): the beam search runs with the translator's own settings, and asking it
for every hypothesis it keeps does not change its best. So there are at most ``beam_size``
alternatives: a larger ``n`` gives no more (greedy search is a beam of one: one translation).
Widen the beam (``translator.with_decoding(beam_size=8)``) for more, knowing that the best
translation may change with the beam, as it does without alternatives. There are fewer than
``n`` where the beam has fewer distinct texts.

The server's ``alternatives`` (``/v1/translate`` and LibreTranslate's ``/translate``) are these,
the first left out (it is the translation itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import TYPE_CHECKING

from transformer.errors import UserError
from transformer.translate.document import _translate_sentences, kept_whole
from transformer.translate.segment import segment_text

if TYPE_CHECKING:
    from transformer.translate.translator import Translator


def distinct(texts: Iterable[str], n: int | None = None) -> list[str]:
    """The first ``n`` different texts of ``texts`` (all when ``n`` is None), in order, each once.

    ``texts`` is read lazily: no more of it than the ``n`` different ones need."""
    seen: dict[str, None] = {}
    if n is not None and n < 1:
        return []
    for text in texts:
        seen.setdefault(text, None)
        if len(seen) == n:
            break
    return list(seen)


def combine(per_sentence: Sequence[Sequence[str]], n: int, build: Callable[[list[str]], str]) -> list[str]:
    """Up to ``n`` distinct texts of a text of several sentences, best first.

    Args:
        per_sentence: each sentence's translations, best first (duplicates allowed; [] for a
            sentence without any: it is translated as "").
        n: the most texts to return.
        build: the text from one translation per sentence (e.g. ``Document.rebuild``).

    Returns:
        The k-th text built from each sentence's k-th distinct translation (its last when it has
        fewer), for k from 0, each text once: the first is built from every sentence's best.
    """
    options = [distinct(translations) or [""] for translations in per_sentence]
    rounds = max((len(o) for o in options), default=1)
    built = (build([o[min(k, len(o) - 1)] for o in options]) for k in range(rounds))
    return distinct(built, n)


def translate_alternatives(translator: Translator, texts: Iterable[str], n: int, *,
                           lang: str | None = None) -> list[list[str]]:
    """Up to ``n`` distinct translations of each text, best first (see the module doc).

    Args:
        translator: beam search (its ``beam_size`` bounds the count) or greedy search (one
            translation); a sampling translator is refused, as samples have no best.
        texts: texts of any length, each cut into sentences as ``translate_document`` cuts it
            (a str alone is refused: wrap it in a list).
        n: the most translations per text (>= 1).
        lang: the source language for sentence splitting (default: the translator's).

    Returns:
        One list per text, in input order, its first item ``translate_document(translator,
        text).text``; fewer than ``n`` items where the beam has fewer distinct texts. A text
        without a sentence (empty, blank) gives ``[text]``, as ``translate_document`` does.
    """
    if isinstance(texts, (str, bytes)):
        raise TypeError("translate_alternatives() takes a list of texts; wrap a single text in a list")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"text {i + 1} is {type(text).__name__}, not str")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserError(f"n must be an integer >= 1 (the most translations per text), got {n!r}")
    decoding = translator.decoding
    if decoding.strategy == "sample":
        raise UserError("alternatives come from beam search, and this translator samples (strategy='sample'): "
                        "use translator.with_decoding(strategy='beam')")
    if decoding.strategy == "beam" and n > 1:  # every hypothesis the beam keeps; its best stays the same
        translator = translator.with_decoding(n_best=decoding.beam_size)
    documents = [segment_text(text, lang or translator.src_lang, whole=kept_whole(translator)) for text in texts]
    items = [(s.text, f"text {i + 1}, line {s.line + 1}", "") for i, d in enumerate(documents) for s in d.segments]
    hypotheses = iter(_translate_sentences(translator, items))
    out = []
    for document in documents:
        per_sentence = [[t for t, *_ in hyps] for hyps in islice(hypotheses, len(document.segments))]
        out.append(combine(per_sentence, n, document.rebuild) if per_sentence else [document.text])
    return out
