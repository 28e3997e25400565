"""Sentence segmentation for translating real text: no sentence lost, layout kept.

The model translates one sentence at a time, so a text is cut into sentences, each
sentence is translated, and the translations are put back where the sentences were.

- ``split_sentences(line, lang)``: the sentences of one line, as character spans.
  Boundaries come from sentencex (Wikimedia's rule-based segmenter: offline, no model,
  ~300 languages; see docs/segmentation.md for the comparison with pysbd and blingfire),
  corrected by the small per-language rules below.
- ``segment_text(text, lang) -> Document``: every sentence of every line, and
  ``Document.rebuild(translations)``, which replaces each sentence by its translation and
  keeps every other character (indentation, gaps between sentences, blank lines, ``\\r\\n``).
- ``split_to_fit(sentence, count_tokens, limit)``: a sentence too long for the model,
  cut at clause punctuation first, then between words, then (last resort) inside a word.

A boundary is always a run of whitespace, so a sentence never starts or ends with
whitespace and never contains a line break.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable

import sentencex

# --- The correction layer --------------------------------------------------------------
# sentencex is right most of the time; these rules fix what it got wrong on
# tests/data/paragraphs (see docs/segmentation.md). A boundary sentencex proposes is
# dropped when:
#   1. the next sentence would start with a lowercase letter ("9 a.m. sharp", "J.-C. à Rome");
#   2. the word before it is in NEVER_END (titles, "z.B."): they are always followed by
#      the word they belong to;
#   3. the word before it is in BEFORE_NUMBER and a digit follows ("sept. 2024", "S. 45"):
#      these may end a sentence, but not when a number follows;
#   4. the word before it is a single capital letter and a period: an initial ("J. R. R. Tolkien");
#   5. (German) it follows an ordinal number: "im 19. Jahrhundert", "den 2. Platz", "am 3. Mai"
#      (a number and a period after an article/preposition, or before a month name);
# and a boundary is added after "?!" (or "!?", "??"...), "…", "etc." or "usw.", when whitespace
# and a capital letter follow ("You sold it?! I can't", "la porte… La pièce", "usw. Im").
# Words are compared in lowercase, with opening brackets and quotes removed.

NEVER_END = {
    "fr": "m. mm. mme. mmes. mlle. mlles. dr. pr. me. mgr. cf. env. tél. av. apr. c.-à-d. bât.",
    "de": "dr. prof. hr. hrn. fr. z. z.b. d. d.h. u. u.a. bzw. vgl. ggf. evtl. ca. sog. inkl. bspw.",
    "en": "mr. mrs. ms. mx. dr. prof. vs. e.g. i.e. cf. messrs. gen. gov. sen. rep. capt. sgt. lt. col.",
}
BEFORE_NUMBER = {
    "fr": "n°. no. p. pp. art. chap. vol. fig. janv. févr. avr. juil. sept. oct. nov. déc.",
    "de": "nr. s. abs. art. kap. bd. tel. str. jan. feb. aug. sept. okt. nov. dez.",
    "en": "no. nos. p. pp. art. ch. vol. fig. approx. jan. feb. mar. apr. aug. sep. sept. oct. nov. dec.",
}
SPLIT_AFTER = {"fr": "etc.", "de": "etc. usw. usf.", "en": "etc."}
# Abbreviations that lowercase words often follow ("20 min. environ", "et al. showed"); with the
# lists above they tell a short abbreviation from a short word that ends a sentence ("le lit. nous").
CONTINUED_AFTER = {
    "fr": "ex. min. max. sec. hab. vol. fig. éd. coll. trad. resp.",
    "de": "min. max. sek. mio. geb. gest. ehem. abb. med. phil. jur. rer. nat.",
    "en": "al. min. max. sec. inc. co. corp. approx. dept. incl. vol. fig.",
}
GERMAN_ORDINAL_AFTER = set(
    "am im vom zum beim bis ab seit der die das den dem des zur ins ans ein eine einem einen einer".split()
)
GERMAN_MONTHS = set(
    "januar jänner februar märz april mai juni juli august september oktober november dezember".split()
)
DEFAULT_LANG = "en"
_LINE_BREAK = re.compile("[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")  # what str.splitlines() cuts at
_OPENERS = "([{«„“‚‘\"'¿¡"


def _lang(lang: str | None) -> str:
    """'fr-FR', 'FR', 'fr_CA' -> 'fr'; None or '' -> DEFAULT_LANG. sentencex falls back by itself
    for languages it does not know; the correction rules fall back to English."""
    return re.split(r"[-_]", lang.strip().lower())[0] if lang and lang.strip() else DEFAULT_LANG


@functools.cache
def _rules(lang: str) -> tuple[set[str], set[str], re.Pattern, set[str]]:
    """NEVER_END and BEFORE_NUMBER words, the added-boundary pattern, and the stems (no final
    period) of the abbreviations a lowercase word may follow, for ``lang``."""
    never_end, before_number, split_after, continued = (
        table.get(lang, table[DEFAULT_LANG]).split()
        for table in (NEVER_END, BEFORE_NUMBER, SPLIT_AFTER, CONTINUED_AFTER)
    )
    after = "|".join(re.escape(w) for w in split_after)
    stems = {w.rstrip(".") for w in never_end + split_after + continued}
    return (set(never_end), set(before_number), re.compile(rf"(?:[?!]{{2,}}|…|(?<!\w)(?:{after}))(\s+)(?=\S)", re.I),
            stems)


def _keep_together(left: str, right: str, lang: str) -> bool:
    """Whether the boundary between ``left`` (ends with non-space) and ``right`` must go."""
    never_end, before_number, _, _ = _rules(lang)
    before = left.split()
    token = before[-1].lstrip(_OPENERS)
    word = token.lower()
    if word in never_end:
        return True
    if right[0].islower() and _lowercase_continues(token, lang):
        return True
    if right[0].isdigit() and word in before_number:
        return True
    if len(token) == 2 and token[1] == "." and token[0].isupper():
        return True
    if lang == "de" and re.fullmatch(r"\d{1,4}\.", word):
        previous = before[-2].lower() if len(before) > 1 else ""
        next_word = re.match(r"\w*", right).group().lower()
        return previous in GERMAN_ORDINAL_AFTER or next_word in GERMAN_MONTHS
    return False


def _lowercase_continues(token: str, lang: str) -> bool:
    """Whether a lowercase word after ``token`` continues its sentence: after ? ! or an ellipsis
    (« Tu viens ? » demanda-t-elle), a dotted word ("z.B. hier"), a number, a listed abbreviation
    ("20 min. später", "et al. showed", "12 janv. à 18 h"), or a short word that does not read as
    a word of the language: one letter, capitalised ("2 Std. und") or without a vowel ("5 lb. at").
    After any other word and a period ("sur le lit. nous", "je suis étudiant. nous allons"),
    lowercase text still starts a new sentence."""
    if not token.endswith("."):
        return True
    stem = token.rstrip(".")
    if stem.endswith("…") or "." in stem or not any(ch.isalpha() for ch in stem):
        return True
    word = stem.lower()
    if word in _rules(lang)[3] or word in _MONTH_ABBREVIATIONS:
        return True
    return len(stem) <= 3 and (len(stem) == 1 or not stem.islower() or not any(ch in _VOWELS for ch in word))


# Shortened month names ("le 12 janv. à 18 h"), which lowercase words often follow.
_MONTH_ABBREVIATIONS = set("janv févr fevr avr juil sept déc dec jan feb febr mär apr aug okt dez mar jun jul oct "
                           "nov".split())
_VOWELS = set("aeiouyàâäáåæéèêëíìîïóòôöõøœúùûüÿ")


def _gap_at(text: str, i: int) -> tuple[int, int] | None:
    """The run of whitespace around index ``i``, or None if there is none or it is at an edge."""
    if not 0 < i < len(text):
        return None
    a = b = i
    while a > 0 and text[a - 1].isspace():
        a -= 1
    while b < len(text) and text[b].isspace():
        b += 1
    return (a, b) if 0 < a < b < len(text) else None


def split_sentences(text: str, lang: str | None = None) -> list[tuple[int, int]]:
    """The sentences of one line as ``(start, end)`` spans of ``text``, in order.

    Spans hold no leading or trailing whitespace; what lies between them (and before the
    first, after the last) is whitespace only. A whitespace-only text has no sentences.
    Meant for one line or paragraph (``segment_text`` cuts a text into lines first); any
    line or paragraph separator in ``text`` is always a boundary.
    """
    lang = _lang(lang)
    # sentencex (Rust) cannot take lone surrogates; same-length stand-ins keep the offsets.
    safe = re.sub("[\ud800-\udfff]", "\ufffd", text)
    gaps = {_gap_at(text, s["start_index"]) for s in sentencex.get_sentence_boundaries(lang, safe)[1:]}
    for m in _rules(lang)[2].finditer(text):
        if text[m.end(1)].isupper():
            gaps.add((m.start(1), m.end(1)))
    for m in _WORD_PERIOD_LOWERCASE.finditer(text):  # lowercase text: "ich bin müde. wir gehen"
        gaps.add((m.start(1), m.end(1)))
    gaps.discard(None)
    # The rules look at two words either side: a window keeps long lines linear.
    cuts = {(a, b) for a, b in gaps if not _keep_together(text[max(0, a - 100) : a], text[b : b + 100], lang)}
    cuts |= {_gap_at(text, m.start()) for m in _LINE_BREAK.finditer(text)} - {None}
    cuts = sorted(cuts)
    start, end = len(text) - len(text.lstrip()), len(text.rstrip())
    if start >= end:
        return []
    edges = [start, *(i for gap in cuts for i in gap), end]
    return list(zip(edges[::2], edges[1::2]))


# A period after a word of two or more letters, then a lowercase word: a boundary that
# sentencex does not propose in every language ("das ist gut. wir"); the rules above drop it
# after an abbreviation.
_WORD_PERIOD_LOWERCASE = re.compile(r"(?<=[^\W\d_]{2}\.)(\s+)(?=[a-zß-öø-ÿ])")


# --- Whole texts ----------------------------------------------------------------------

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")


@dataclass(frozen=True)
class Segment:
    """One sentence: ``text[start:end]`` of the segmented text, on line ``line`` (from 0)."""

    line: int
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Document:
    """A text cut into sentences; everything outside the sentences is kept as it was."""

    text: str
    segments: list[Segment]

    @property
    def sentences(self) -> list[str]:
        return [s.text for s in self.segments]

    def rebuild(self, translations: list[str]) -> str:
        """The text with sentence i replaced by ``translations[i]``.

        Each translation is stripped and any line break inside it becomes a space, so the
        result has exactly the input's lines, indentation, gaps and blank lines."""
        return self.rebuild_with_spans(translations)[0]

    def rebuild_with_spans(self, translations: list[str]) -> tuple[str, list[tuple[int, int]]]:
        """``rebuild``'s text and where each translation landed in it (character spans)."""
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations for {len(self.segments)} sentences")
        out, spans, position, length = [], [], 0, 0
        for segment, translation in zip(self.segments, translations):
            gap, piece = self.text[position : segment.start], re.sub(r"\s*[\r\n]+\s*", " ", translation.strip())
            out += [gap, piece]
            spans.append((length + len(gap), length + len(gap) + len(piece)))
            length += len(gap) + len(piece)
            position = segment.end
        out.append(self.text[position:])
        return "".join(out), spans


def segment_text(text: str, lang: str | None = None, *, whole: Callable[[str], bool] | None = None) -> Document:
    """Cut ``text`` into lines (``\\n``, ``\\r\\n`` or ``\\r``) and each line into sentences.

    ``whole``: asked of each line of several sentences; a line it says yes to stays one sentence
    (a translation memory's entry, which is translated as it was stored, not sentence by sentence).
    """
    segments = []
    for number, line in enumerate(_LINE.finditer(text)):
        content = line.group().rstrip("\r\n")
        spans = split_sentences(content, lang)
        if len(spans) > 1 and whole is not None and whole(content):
            spans = [(spans[0][0], spans[-1][1])]
        for a, b in spans:
            start, end = line.start() + a, line.start() + b
            segments.append(Segment(number, start, end, text[start:end]))
    return Document(text, segments)


# --- Sentences too long for the model -------------------------------------------------

# Where to cut, best first: after ; or :, after a dash, after a comma, between words;
# then anywhere (a single "word" longer than the limit, e.g. a URL).
_CUTS = [r"(?<=[;:])\s+", r"(?<=[—–])\s+", r"(?<=,)\s+", r"\s+"]


def _pieces(text: str, a: int, b: int, cut: str | None) -> list[tuple[int, int]]:
    if cut is None:
        return [(i, i + 1) for i in range(a, b)]
    edges = [a, *(i for m in re.finditer(cut, text[a:b]) for i in (a + m.start(), a + m.end())), b]
    return [(x, y) for x, y in zip(edges[::2], edges[1::2]) if x < y]


def fit_spans(
    sentence: str, count_tokens: Callable[[str], int], limit: int, level: int = 0
) -> list[tuple[int, int]]:
    """``split_to_fit`` as spans of ``sentence``: consecutive, whitespace-only gaps
    (empty only where a single word had to be cut)."""
    a, b = len(sentence) - len(sentence.lstrip()), len(sentence.rstrip())
    if a >= b:
        return []
    return _fit(sentence, a, b, count_tokens, limit, level)


def _fit(text, a, b, count_tokens, limit, level):
    if b - a <= 1 or count_tokens(text[a:b]) <= limit:
        return [(a, b)]
    pieces = _pieces(text, a, b, _CUTS[level] if level < len(_CUTS) else None)
    if len(pieces) == 1:
        return _fit(text, a, b, count_tokens, limit, level + 1)
    spans, i = [], 0
    while i < len(pieces):  # greedily take the most pieces that fit (binary search)
        lo, hi = 0, len(pieces) - i
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count_tokens(text[pieces[i][0] : pieces[i + mid - 1][1]]) <= limit:
                lo = mid
            else:
                hi = mid - 1
        if lo == 0:  # this piece alone is too long: cut it at the next, finer level
            spans += _fit(text, *pieces[i], count_tokens, limit, level + 1)
            i += 1
        else:
            spans.append((pieces[i][0], pieces[i + lo - 1][1]))
            i += lo
    return spans


def split_to_fit(sentence: str, count_tokens: Callable[[str], int], limit: int) -> list[str]:
    """Cut ``sentence`` into pieces of at most ``limit`` tokens, nothing dropped.

    Cuts at clause punctuation (; : then — – then ,) first, then between words, and inside
    a word only when that word alone is over the limit. The pieces are stripped; between
    them the sentence had whitespace (or nothing, for a cut inside a word), so joining
    their translations with single spaces covers the whole sentence. A piece exceeds the
    limit only if one character alone does (``count_tokens`` counting BOS/EOS with
    ``limit`` < 3, say). A sentence within the limit comes back as one piece.
    """
    return [sentence[a:b] for a, b in fit_spans(sentence, count_tokens, limit)]
