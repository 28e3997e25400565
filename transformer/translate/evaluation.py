"""Scoring translations with sacreBLEU and chrF, reported with their signatures.

Scores are computed on detokenized, cased text with sacreBLEU's default 13a tokenization,
the way papers report them; the signature says exactly how. Exact match compares each
hypothesis with its reference after normalizing both the way the tokenizers normalize text
(:func:`normalize_for_match`: NFKC, whitespace runs to one space), so a reference's no-break
space does not make a perfect translation inexact.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Sequence

import sacrebleu

from transformer.errors import UserError


def normalize_for_match(text: str) -> str:
    """``text`` as the tokenizers normalize it: Unicode NFKC, every whitespace run (U+00A0 and the
    narrow no-break space U+202F included) one space, no leading or trailing whitespace."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


@dataclass
class Scores:
    bleu: float
    chrf: float
    exact_match: float  # fraction of hypotheses equal to their reference, both normalized (normalize_for_match)
    bleu_signature: str
    chrf_signature: str
    n: int

    def as_dict(self) -> dict[str, float | str | int]:
        return {
            "bleu": round(self.bleu, 2),
            "chrf": round(self.chrf, 2),
            "exact_match": round(self.exact_match, 4),
            "bleu_signature": self.bleu_signature,
            "chrf_signature": self.chrf_signature,
            "sentences": self.n,
        }


def score(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """Corpus-level sacreBLEU, chrF and exact match of ``hypotheses`` against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise UserError("nothing to score: no hypotheses")
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    refs = [list(references)]
    b = bleu.corpus_score(list(hypotheses), refs)
    c = chrf.corpus_score(list(hypotheses), refs)
    # Both sides normalized alike: hypotheses come out of the tokenizer normalized, references raw
    # (a no-break space before "?" made a perfect translation inexact).
    same = sum(normalize_for_match(h) == normalize_for_match(r) for h, r in zip(hypotheses, references))
    exact = same / len(hypotheses)
    return Scores(b.score, c.score, exact, str(bleu.get_signature()), str(chrf.get_signature()), len(hypotheses))
