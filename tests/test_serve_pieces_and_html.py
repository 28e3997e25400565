"""transformer serve with the text of issue 24 that is not plain short sentences: a sentence over
the input limit (translated in pieces, with a warning, as ``translate_document`` does), HTML
pages on ``/v1/translate`` (``format: "html"``, as on the LibreTranslate route), and the issue's
bad input (binary data, invalid UTF-8, NUL bytes, a 10 MB line, CRLF) on both APIs.

In-process (TestClient) against the small random model of the tiny_run fixture, compared with the
library (``transformer.translate``) on the same model.
"""

from __future__ import annotations

import random
import re
import unicodedata
from urllib.parse import quote_from_bytes

import jsonschema
import pytest
from fastapi.testclient import TestClient
from serve_helpers import SCHEMA, assert_error

from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.translate.document import translate_document
from transformer.translate.html import html_sentences, translate_html
from transformer.translate.segment import segment_text, split_to_fit
from transformer.translate.translator import TranslationWarning, Translator

LIMIT = 40  # source tokens per model input
LIMITS = dict(max_chars=600, max_texts=4, max_sentences=8, max_input_tokens=LIMIT, max_output_tokens=20)
# Line 2 holds a sentence of about 100 tokens, with commas to cut at.
LONG = ("Le chat dort.\nIl pleut. Le chat noir, le chien blanc et la souris grise, les deux oiseaux du jardin, "
        "la vieille dame du troisième étage, le facteur et son vélo rouge, tous dorment sur la grande table.\n")


@pytest.fixture(scope="module")
def translator(tiny_run) -> Translator:
    return Translator.from_run_dir(tiny_run())


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(create_app(translator, ServeLimits(**LIMITS), src_lang="fr", tgt_lang="en")) as c:
        yield c


def limited(translator: Translator, max_length: int | None = None, **changes) -> Translator:
    """The library's translator with the server's input limit (and ``max_length`` output tokens)."""
    lengths = {} if max_length is None else {"max_len_a": 0.0, "max_len_b": max_length}
    out = translator.with_decoding(**lengths, **changes)
    out.max_input_tokens = LIMIT
    return out


def count(translator: Translator):
    return lambda text: len(translator.vocab.src.encode(text))


# --------------------------------------------------------------------------------------------- long sentences
def test_a_sentence_over_the_input_limit_is_translated_in_pieces(client, translator):
    segments = segment_text(LONG, "fr").segments
    sentence = segments[2].text
    assert count(translator)(sentence) > 2 * LIMIT
    pieces = split_to_fit(sentence, count(translator), LIMIT)  # the segmenter's own cutting
    assert len(pieces) >= 3 and all(p.endswith(",") for p in pieces[:-1])  # at clause punctuation
    assert all(count(translator)(p) <= LIMIT for p in pieces)
    response = client.post("/v1/translate", json={"text": LONG, "beam_size": 2, "n_best": 2, "max_length": 6})
    assert response.status_code == 200, response.text
    got = response.json()["translations"][0]
    # the text as the library translates it: the same pieces, joined in the sentence's place
    with pytest.warns(TranslationWarning, match=f"line 2: a sentence of .* tokens .* in {len(pieces)} pieces"):
        want = translate_document(limited(translator, 6, beam_size=2, n_best=2), LONG)
    assert got["translation"] == want.text
    assert [(tuple(s["source_span"]), tuple(s["target_span"]), s["line"]) for s in got["sentences"]] == \
        [(a.source, a.target, a.line) for a in want.sentences]
    # the long sentence: one alignment entry, its pieces' translations joined with spaces
    entry = got["sentences"][2]
    assert [s["pieces"] for s in got["sentences"]] == [1, 1, len(pieces)]
    assert LONG[slice(*entry["source_span"])] == sentence
    hyps = limited(translator, 6, beam_size=2, n_best=2).translate_n_best(pieces)
    for k in range(2):
        chosen = [h[min(k, len(h) - 1)] for h in hyps]
        assert entry["n_best"][k]["translation"] == " ".join(t for t in map(translator.detokenize, chosen) if t)
        assert entry["n_best"][k]["score"] == pytest.approx(sum(h.score for h in chosen) / len(chosen), abs=1e-4)
        assert entry["n_best"][k]["log_prob"] == pytest.approx(sum(h.log_prob for h in chosen), abs=1e-3)
    assert got["translation"][slice(*entry["target_span"])] == entry["n_best"][0]["translation"].strip()
    assert got["translation"].count("\n") == 2
    # the warning names the sentence and its line
    (warning,) = got["warnings"]
    assert warning["sentence"] == 2
    for words in ("text, sentence 2 (line 2: 'Le chat noir", "tokens long", f"limit of {LIMIT}",
                  f"in {len(pieces)} pieces", "max_input_tokens"):
        assert words in warning["message"], warning["message"]
    # the LibreTranslate route translates it the same way (the server's default decoding)
    libre = client.post("/translate", json={"q": ["Il pleut.", LONG], "source": "fr", "target": "en"})
    assert libre.status_code == 200, libre.text
    with pytest.warns(TranslationWarning):
        assert libre.json()["translatedText"][1] == translate_document(limited(translator), LONG).text
    # a sentence that fits has no warning
    assert client.post("/v1/translate", json={"text": "Il pleut.", "max_length": 4}).json()["translations"][0][
        "warnings"] == []


def test_attention_of_each_piece_of_a_long_sentence(client, translator):
    segments = segment_text(LONG, "fr").segments
    pieces = split_to_fit(segments[2].text, count(translator), LIMIT)
    for index in (0, len(pieces) - 1):
        response = client.post("/v1/attention", json={"text": LONG, "sentence": 2, "piece": index, "max_length": 6})
        assert response.status_code == 200, response.text
        doc = response.json()
        jsonschema.validate(doc, SCHEMA)
        assert doc["source"] == pieces[index]
        a, b = map(int, response.headers["x-piece-span"].split(","))
        assert LONG[a:b] == pieces[index]
        assert response.headers["x-piece-index"] == str(index) and response.headers["x-piece-count"] == str(len(pieces))
        assert response.headers["x-source-span"] == f"{segments[2].start},{segments[2].end}"
    one = client.post("/v1/attention", json={"text": LONG, "sentence": 1, "max_length": 6})
    assert one.headers["x-piece-count"] == "1" and one.json()["source"] == "Il pleut."
    assert_error(client.post("/v1/attention", json={"text": LONG, "sentence": 2, "piece": len(pieces)}), 422,
                 "invalid_request", f"piece {len(pieces)} does not exist", f"{len(pieces)} pieces")
    assert_error(client.post("/v1/attention", json={"text": LONG, "sentence": 0, "piece": 1}), 422,
                 "invalid_request", "1 piece (0 to 0)")


def test_real_limits_are_still_refused(client):
    """Pieces do not lift the limits on characters and sentences (422), nor on the body (413)."""
    assert_error(client.post("/v1/translate", json={"text": LONG + "x" * 600}), 422, "invalid_request",
                 "600 characters")
    assert_error(client.post("/v1/translate", json={"text": LONG + " Il pleut." * 6}), 422, "invalid_request",
                 "9 sentences", "at most 8")
    assert_error(client.post("/v1/translate", json={"text": [LONG, "Il pleut. " * 6]}), 422, "invalid_request",
                 "9 sentences", "(3, 6 per text)")


# --------------------------------------------------------------------------------------------- html
PAGE = ('<!DOCTYPE html><html><head><title>Le chat</title><style>p { color: red }</style></head><body>'
        '<h1 class="t">Je suis étudiant</h1><p>Le <b>chat</b> noir dort. Il pleut &amp; il '
        '<a href="x.html" title="le chat">vente</a>.</p><pre>le chat</pre></body></html>')


def test_html_on_v1_translate_keeps_the_markup_and_aligns_sentences_by_text(client, translator):
    response = client.post("/v1/translate", json={"text": [PAGE, "<p>12</p>"], "format": "html", "beam_size": 3,
                                                  "n_best": 2, "max_length": 6})
    assert response.status_code == 200, response.text
    page, number = response.json()["translations"]
    found = html_sentences(PAGE, lang="fr")
    hyps = limited(translator, 6, beam_size=3, n_best=2).translate_n_best(found)
    for k in range(2):  # the k-th alternative: the page around every sentence's k-th hypothesis
        kth = [translator.detokenize(h[min(k, len(h) - 1)]) for h in hyps]
        assert page["n_best"][k]["translation"] == translate_html(PAGE, lambda asked, kth=kth: kth, lang="fr")
    assert page["translation"] == page["n_best"][0]["translation"] and page["source"] == PAGE
    for kept in ('<h1 class="t">', "<b>", "</b>", '<a href="x.html" title="le chat">', "</a>", "<pre>le chat</pre>",
                 "<style>p { color: red }</style>", "<!DOCTYPE html>"):
        assert kept in page["translation"]
    # the alignment of a page: each sentence of its text, as the model read it; no spans
    assert [s["text"] for s in page["sentences"]] == found and len(found) == 4
    assert all(s["source_span"] is None and s["target_span"] is None and s["line"] is None for s in page["sentences"])
    assert [[x["translation"] for x in s["n_best"]] for s in page["sentences"]] == \
        [[translator.detokenize(y) for y in h] for h in hyps]
    assert page["warnings"] == [] and all(s["pieces"] == 1 for s in page["sentences"])
    # a page without text comes back as it is
    assert number["translation"] == "<p>12</p>" and number["sentences"] == [] and len(number["n_best"]) == 1
    # the LibreTranslate route gives the same page (its default decoding)
    libre = client.post("/translate", json={"q": PAGE, "source": "fr", "target": "en", "format": "html"}).json()
    plain = client.post("/v1/translate", json={"text": PAGE, "format": "html"}).json()["translations"][0]
    assert libre["translatedText"] == plain["translation"]


def test_html_limits_long_sentences_and_bad_format(client, translator):
    long_page = "<p>" + LONG.replace("\n", " <br>") + "</p>"
    response = client.post("/v1/translate", json={"text": long_page, "format": "html", "max_length": 4})
    assert response.status_code == 200, response.text
    got = response.json()["translations"][0]
    sentence = html_sentences(long_page, lang="fr")[2]
    assert [s["pieces"] for s in got["sentences"]] == [1, 1, len(split_to_fit(sentence, count(translator), LIMIT))]
    assert got["sentences"][2]["text"] == sentence and sentence.startswith("Le chat noir,")
    assert got["translation"].startswith("<p>") and got["translation"].count("<br>") == 2
    (warning,) = got["warnings"]
    assert warning["sentence"] == 2 and "text, sentence 2 ('Le chat noir" in warning["message"]
    assert_error(client.post("/v1/translate", json={"text": "<p>" + "Il pleut. " * 9 + "</p>", "format": "html"}),
                 422, "invalid_request", "9 sentences", "at most 8")
    assert_error(client.post("/v1/translate", json={"text": "<p>x</p>", "format": "markdown"}), 422,
                 "invalid_request", "format", "'text' or 'html'")
    response = client.post("/v1/translate", json={"text": "<p>42</p>", "format": "html"})  # no model call
    assert response.status_code == 200 and response.json()["timing"]["model_calls"] == 0


# --------------------------------------------------------------------------------------------- bad input
JSON = {"content-type": "application/json"}
FORM = {"content-type": "application/x-www-form-urlencoded"}


def test_bad_input_of_issue_24_is_refused_naming_the_place_or_translated(client, translator):
    """A request is translated whole or refused whole, naming where the problem is: nothing is
    translated in part, or silently changed."""
    junk = bytes(b for b in random.Random(0).randbytes(3000) if b not in b'"\\')
    # binary data (invalid UTF-8): 400, naming the byte offset
    assert_error(client.post("/v1/translate", content=b'{"text": "' + junk + b'"}', headers=JSON), 400,
                 "invalid_utf8", "not valid UTF-8", "offset")
    libre = client.post("/translate", content=b"source=fr&target=en&q=" + quote_from_bytes(junk).encode(),
                        headers=FORM)
    assert libre.status_code == 400 and "not valid UTF-8" in libre.json()["error"]
    # binary data that decodes (as Latin-1): its first control character named, with its line
    text = "Il pleut.\r\nLe chat dort.\n" + junk[:200].decode("latin-1")
    bad = next(i for i, ch in enumerate(text) if unicodedata.category(ch) == "Cc" and ch not in "\t\n\r")
    line = len(re.findall(r"\r\n|\r|\n", text[:bad])) + 1
    assert line >= 3
    assert_error(client.post("/v1/translate", json={"text": text}), 422, "invalid_request",
                 f"U+{ord(text[bad]):04X} at position {bad} (line {line})")
    # NUL bytes
    assert_error(client.post("/v1/translate", json={"text": "Il pleut.\nLe chat\x00 dort."}), 422, "invalid_request",
                 "the control character U+0000 at position 17 (line 2)")
    libre = client.post("/translate", json={"q": "Il pleut.\nLe chat\x00 dort.", "source": "fr", "target": "en"})
    assert libre.status_code == 400 and "U+0000 at position 17 (line 2)" in libre.json()["error"]
    # a 10 MB line: over the body limit, refused before it is read whole
    huge = "le chat dort sur la table. " * (10_000_000 // 27)
    assert_error(client.post("/v1/translate", json={"text": huge}), 413, "payload_too_large", "262144 bytes")
    libre = client.post("/translate", json={"q": huge, "source": "fr", "target": "en"})
    assert libre.status_code == 413 and "262144 bytes" in libre.json()["error"]
    # CRLF: the line breaks come back as they went in
    crlf = "Il pleut.\r\nLe chat dort.\r\n\r\nNous mangeons.\r\n"
    got = client.post("/v1/translate", json={"text": crlf}).json()["translations"][0]
    assert got["translation"] == translate_document(limited(translator), crlf).text
    assert got["translation"].count("\r\n") == 4 and [s["line"] for s in got["sentences"]] == [1, 2, 4]
    libre = client.post("/translate", json={"q": crlf, "source": "fr", "target": "en"})
    assert libre.json()["translatedText"] == got["translation"]
