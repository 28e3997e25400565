"""Scoring (transformer.translate.evaluation): exact match compares like with like."""

from pathlib import Path

import pytest
import sacrebleu

from transformer.translate.evaluation import normalize_for_match, score

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.mark.parametrize("hypothesis, reference", [
    ("Tu viens ?", "Tu viens\u202f?"),                 # narrow no-break space before "?" (French typography)
    ("« Bonjour ! »", "«\u00a0Bonjour\u00a0!\u00a0»"),  # no-break spaces
    ("fin ...", "ﬁn …"),                               # NFKC: ligature and ellipsis
    ("le chat", "  le   chat\t"),                       # whitespace runs and ends
])
def test_exact_match_normalizes_both_sides_the_same_way(hypothesis, reference):
    """Hypotheses come out of the tokenizer normalized (NFKC, whitespace runs to one space); the
    references were compared raw, so a perfect translation of a reference with a no-break space
    did not count as exact."""
    assert normalize_for_match(hypothesis) == normalize_for_match(reference)
    s = score([hypothesis, "autre chose"], [reference, "tout autre"])
    assert s.exact_match == 0.5
    assert s.bleu == pytest.approx(sacrebleu.corpus_bleu([hypothesis, "autre chose"], [[reference, "tout autre"]]).score)


def test_exact_match_still_tells_different_sentences_apart():
    assert score(["le chat", "Le chat", "le chat."], ["le  chat", "le chat", "le chat"]).exact_match == pytest.approx(1 / 3)


@pytest.mark.skipif(not (SHARED_DATA / "tatoeba").is_dir(), reason="needs ../shared/data/tatoeba")
def test_normalized_tatoeba_references_match_themselves_exactly():
    """Measured on Tatoeba en->fr: the normalized references scored BLEU 100 but exact match 94.95%."""
    from transformer.corpus.registry import corpus_pairs, tatoeba_splits

    pairs = tatoeba_splits(corpus_pairs("tatoeba", src="en", tgt="fr", split="all",
                                        directory=SHARED_DATA / "tatoeba"), seed=0)["test"]
    references = [r for _, r in pairs]
    hypotheses = [normalize_for_match(r) for r in references]
    assert sum(h != r for h, r in zip(hypotheses, references)) > 50  # the split has such references
    s = score(hypotheses, references)
    assert s.exact_match == 1.0
