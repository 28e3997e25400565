"""The translation service of ``transformer serve`` on its own, with no HTTP: the operations the
routes call (texts and HTML pages translated in their structure, the attention of one sentence,
the model's description, the queue's bounds), on the small random model of the tiny_run fixture and
compared with the library (``transformer.translate``) on the same model; and ``input_piece``,
where one model input lies in its text.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import jsonschema
import pytest
from serve_helpers import SCHEMA

from transformer.serve.batching import Overloaded
from transformer.serve.documents import InputPiece, Unprocessable, input_piece
from transformer.serve.limits import ServeLimits
from transformer.serve.service import DecodingSettings, TranslationService
from transformer.translate.document import translate_document
from transformer.translate.html import html_sentences, translate_html
from transformer.translate.segment import segment_text
from transformer.translate.translator import Translator

PARAGRAPH = "Je suis étudiant. Le chat noir dort.\n\nNous mangeons du pain."
LIMITS = ServeLimits(max_chars=600, max_texts=4, max_sentences=8, max_input_tokens=40, max_output_tokens=20)


@pytest.fixture(scope="module")
def translator(tiny_run) -> Translator:
    return Translator.from_run_dir(tiny_run())


@pytest.fixture
def service(translator) -> TranslationService:
    return TranslationService(translator, LIMITS, src_lang="fr", tgt_lang="en")


def run(service: TranslationService, work):
    """Await ``work`` (a coroutine of ``service``) on a new event loop; the service's worker
    stopped after it, as the app's shutdown stops it."""
    async def main():
        try:
            return await work
        finally:
            await service.close()

    return asyncio.run(main())


def library(translator: Translator, max_length: int, **changes) -> Translator:
    return translator.with_decoding(max_len_a=0.0, max_len_b=max_length, **changes)


# ---------------------------------------------------------------------------------------------
def test_texts_are_translated_in_their_structure_as_the_library_does(service, translator):
    settings = DecodingSettings(beam_size=3, max_length=8)
    results, info = run(service, service.translate_texts([PARAGRAPH, "Il pleut."], settings))
    want = translate_document(library(translator, 8, beam_size=3), PARAGRAPH)
    assert [r["source"] for r in results] == [PARAGRAPH, "Il pleut."]
    assert results[0]["translation"] == want.text
    assert [(tuple(s["source_span"]), tuple(s["target_span"]), s["line"]) for s in results[0]["sentences"]] == \
        [(a.source, a.target, a.line) for a in want.sentences]
    assert (info.batch_size, info.batch_requests, info.model_calls) == (4, 1, 1)  # both texts' sentences, one call
    assert service.decoding(settings).model_dump() == {"strategy": "beam", "beam_size": 3, "n_best": 1,
                                                       "alpha": translator.decoding.alpha, "max_length": 8}
    assert service.decoding(DecodingSettings(1)).strategy == "greedy"


def test_pages_keep_their_markup_and_a_page_without_text_needs_no_model_call(service, translator):
    page = "<p>Je suis <b>étudiant</b>. Il pleut.</p>"
    results, info = run(service, service.translate_pages([page, "<p>12</p>"], DecodingSettings(1, max_length=6)))
    greedy = library(translator, 6, strategy="greedy")
    assert results[0]["translation"] == translate_html(page, greedy.translate, lang="fr")
    assert [s["text"] for s in results[0]["sentences"]] == html_sentences(page, lang="fr")
    assert results[1]["translation"] == "<p>12</p>" and results[1]["sentences"] == []
    assert info.model_calls == 1
    _, nothing = run(service, service.translate_pages(["<p>12</p>"]))
    assert nothing.model_calls == 0 and service.health()["batches"] == 1


def test_attention_of_one_sentence_and_where_it_is(service, translator):
    segments = segment_text(PARAGRAPH, "fr").segments
    result = run(service, service.attention(PARAGRAPH, DecodingSettings(1, max_length=8), sentence=2))
    jsonschema.validate(result.data, SCHEMA)
    third = segments[2]
    assert result.piece == InputPiece(sentence=2, sentences=3, sentence_span=(third.start, third.end), piece=0,
                                      pieces=1, span=(third.start, third.end), text=third.text)
    assert result.data["source"] == third.text
    assert result.data["translation"] == library(translator, 8, strategy="greedy").translate([third.text])[0]
    with pytest.raises(Unprocessable, match=r"sentence 3 does not exist: the text has 3 sentences \(0 to 2\)"):
        run(service, service.attention(PARAGRAPH, sentence=3))


def test_the_defaults_come_from_the_translator_and_sampling_is_served_by_search(translator):
    service = TranslationService(translator.with_decoding(strategy="sample"))
    assert service.translator.decoding.strategy == "beam" and service.default == DecodingSettings(4)
    assert service.limits == ServeLimits() and (service.src_lang, service.tgt_lang) == (None, None)
    assert service.segment_lang == "fr"  # the run's source language still splits the sentences
    info = service.model_info()
    assert info.decoding.beam_size == 4 and info.decoding.n_best == 1 and info.limits == ServeLimits().to_dict()
    assert info.src_lang is None and info.parameters == translator.model.num_parameters()


def test_bad_texts_and_a_full_queue_are_refused_before_the_model(translator):
    limits = ServeLimits(max_sentences=2, max_queue=2, max_batch_size=2, batch_wait_ms=10_000)
    service = TranslationService(translator, limits)
    with pytest.raises(Unprocessable, match="the request holds 3 sentences; at most 2"):
        run(service, service.translate_texts([PARAGRAPH]))
    with pytest.raises(Unprocessable, match="text 1 has no sentence to translate"):
        run(service, service.translate_texts(["Il pleut.", "   "]))

    async def three_requests():
        # The first waits for a second sentence alike (a full batch; the 10 s wait is never waited)
        # while the next request, two sentences, would make three; the third's one fills the batch.
        first = asyncio.create_task(service.translate_texts(["Il pleut."], DecodingSettings(1, max_length=4)))
        while service.health()["queued_texts"] == 0:
            assert not first.done(), "the first request did not wait for company"
            await asyncio.sleep(0.01)
        with pytest.raises(Overloaded, match="1 texts are waiting and at most 2 may"):
            await service.translate_texts(["Le chat dort.", "Tu dors."])
        third, _ = await service.translate_texts(["Elle lit."], DecodingSettings(1, max_length=4))
        return (await first)[0], third

    first, third = run(service, three_requests())
    assert first[0]["source"] == "Il pleut." and third[0]["source"] == "Elle lit."
    health = service.health()
    assert (health["rejected_overload"], health["requests"], health["batches"]) == (1, 2, 1)


def test_the_service_is_imported_without_the_web_framework():
    code = ("import sys, transformer.serve.service; "
            "print(sorted(m for m in ('fastapi', 'starlette', 'uvicorn') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------- input_piece
def test_input_piece_places_a_piece_of_a_sentence_in_the_text():
    text = "Il pleut.\nLe chat noir, le chien blanc, la souris grise dorment."
    document = segment_text(text, "fr")
    first, second = document.segments
    spans = [[(0, len(first.text))], [(0, 13), (14, len(second.text))]]  # the second sentence in two pieces
    piece = input_piece(document, spans, 1, 1)
    assert piece == InputPiece(sentence=1, sentences=2, sentence_span=(second.start, second.end), piece=1,
                               pieces=2, span=(second.start + 14, second.end), text=second.text[14:])
    assert text[slice(*piece.span)] == piece.text == "le chien blanc, la souris grise dorment."
    assert input_piece(document, spans, 1, 0).text == "Le chat noir,"
    assert input_piece(document, spans, 0, 0) == InputPiece(0, 2, (0, 9), 0, 1, (0, 9), "Il pleut.")
    for sentence, piece, message in [
            (2, 0, r"sentence 2 does not exist: the text has 2 sentences \(0 to 1\)"),
            (-1, 0, r"sentence -1 does not exist"),
            (0, 1, r"piece 1 does not exist: sentence 0 is translated in 1 piece \(0 to 0\)"),
            (1, 2, r"piece 2 does not exist: sentence 1 is translated in 2 pieces \(0 to 1\)")]:
        with pytest.raises(Unprocessable, match=message):
            input_piece(document, spans, sentence, piece)
