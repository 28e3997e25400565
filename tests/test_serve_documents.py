"""transformer serve with real text (issue 24): paragraphs in, the same structure out, the sentence
alignment, attention per sentence, limits counted in sentences and characters, and the dynamic
batcher putting the sentences of concurrent requests into the same model calls without letting a
long request hold up the others.

In-process (TestClient / httpx on the ASGI app) against the small random model of the tiny_run fixture;
the batcher's order is checked with a stand-in model function.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient
from serve_helpers import SCHEMA, assert_error

from transformer.cli import main
from transformer.serve.app import create_app
from transformer.serve.batching import DynamicBatcher, Overloaded, TimedOut
from transformer.serve.limits import ServeLimits
from transformer.translate.document import translate_document
from transformer.translate.segment import segment_text
from transformer.translate.translator import Translator

# Three lines, a blank one, leading and trailing whitespace, CRLF, an abbreviation, a number and
# an emoji (one code point, two UTF-16 units, four UTF-8 bytes) before the last sentences.
PARAGRAPH = ("  Je suis étudiant. Le chat noir dort sur la table.\n\n"
             "M. Dupont mange 3.5 pommes 🍎 ! Il pleut.\r\n\tNous mangeons du pain.\n")


@pytest.fixture(scope="module")
def translator(tiny_run) -> Translator:
    return Translator.from_run_dir(tiny_run())


LIMITS = dict(max_chars=400, max_texts=4, max_sentences=8, max_input_tokens=40, max_output_tokens=20)


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(create_app(translator, ServeLimits(**LIMITS), src_lang="fr", tgt_lang="en")) as c:
        yield c


def decoding(translator: Translator, max_length: int, **changes) -> Translator:
    return translator.with_decoding(max_len_a=0.0, max_len_b=max_length, **changes)


# ---------------------------------------------------------------------------------------------
def test_a_paragraph_comes_back_in_its_structure_with_the_alignment(client, translator):
    response = client.post("/v1/translate", json={"text": PARAGRAPH, "max_length": 8})
    assert response.status_code == 200, response.text
    body = response.json()
    got = body["translations"][0]
    want = translate_document(decoding(translator, 8), PARAGRAPH)  # the library's document translation
    assert got["source"] == PARAGRAPH
    assert got["translation"] == want.text
    assert [(tuple(s["source_span"]), tuple(s["target_span"]), s["line"]) for s in got["sentences"]] == \
        [(a.source, a.target, a.line) for a in want.sentences]
    # every sentence there, in order, on its line; spans are str (code point) indices
    segments = segment_text(PARAGRAPH, "fr").segments
    assert [PARAGRAPH[a:b] for a, b in (s["source_span"] for s in got["sentences"])] == [s.text for s in segments]
    assert [s["line"] for s in got["sentences"]] == [1, 1, 3, 3, 4]
    assert PARAGRAPH[slice(*got["sentences"][3]["source_span"])] == "Il pleut."  # after the emoji
    for s in got["sentences"]:
        assert got["translation"][slice(*s["target_span"])] == s["n_best"][0]["translation"].strip()
    # the structure: same lines, the same whitespace around and between the sentences
    out = got["translation"]
    assert out.startswith("  ") and out.endswith(".\n") is False and out.endswith("\n")
    assert out.count("\n") == PARAGRAPH.count("\n") and "\n\n" in out and "\r\n\t" in out
    assert body["timing"]["batch_size"] == 5 and body["timing"]["model_calls"] == 1


def test_n_best_of_a_paragraph_and_of_one_sentence(client, translator):
    text = "Je suis étudiant. Le chat noir dort."
    body = client.post("/v1/translate", json={"text": text, "beam_size": 3, "n_best": 2, "max_length": 6}).json()
    got = body["translations"][0]
    sentences = [s.text for s in segment_text(text, "fr").segments]
    hyps = decoding(translator, 6, beam_size=3, n_best=2).translate_n_best(sentences)
    assert len(got["n_best"]) == 2 and len(got["sentences"]) == 2
    for s, h in zip(got["sentences"], hyps):
        assert [x["translation"] for x in s["n_best"]] == [translator.detokenize(y) for y in h]
        assert [x["score"] for x in s["n_best"]] == pytest.approx([y.score for y in h], abs=1e-5)
    for k, alternative in enumerate(got["n_best"]):  # the k-th hypothesis of every sentence, in the structure
        assert alternative["translation"] == " ".join(translator.detokenize(h[k]).strip() for h in hyps)
        assert alternative["log_prob"] == pytest.approx(sum(h[k].log_prob for h in hyps), abs=1e-4)
        assert alternative["score"] == pytest.approx(sum(h[k].score for h in hyps) / 2, abs=1e-5)
    assert got["translation"] == got["n_best"][0]["translation"] and got["score"] == got["n_best"][0]["score"]

    one = client.post("/v1/translate", json={"text": "le chat noir", "beam_size": 3, "n_best": 2,
                                             "max_length": 6}).json()["translations"][0]
    assert one["n_best"] == one["sentences"][0]["n_best"] and one["sentences"][0]["source_span"] == [0, 12]


def test_a_list_of_paragraphs(client, translator):
    texts = ["Le chat dort. Il pleut.", "Nous mangeons.", "Je suis étudiant.\nelle lit."]
    body = client.post("/v1/translate", json={"text": texts, "max_length": 6}).json()
    want = [translate_document(decoding(translator, 6), t) for t in texts]
    assert [t["translation"] for t in body["translations"]] == [w.text for w in want]
    assert [len(t["sentences"]) for t in body["translations"]] == [2, 1, 2]
    assert body["timing"]["batch_size"] == 5


@pytest.mark.parametrize("body, words", [
    ({"text": "Le chat. " * 9}, ["9 sentences", "at most 8", "max_sentences"]),
    ({"text": ["Le chat. Il pleut.", "Tu dors. Elle lit. On mange.", "Il pleut. Tu dors. Elle lit. On mange."]}, ["9 sentences", "(2, 3, 4 per text)", "at most 8"]),
    ({"text": "x" * 401}, ["text", "400 characters"]),
])
def test_limits_count_sentences_and_characters(client, body, words):
    assert_error(client.post("/v1/translate", json=body), 422, "invalid_request", *words)
    if isinstance(body["text"], str):
        assert_error(client.post("/v1/attention", json=body), 422, "invalid_request", *words)


def test_characters_are_code_points(client):
    text = "Le chat 🍎🍎🍎🍎🍎 dort.".ljust(400)  # 400 code points; 405 UTF-16 units, 420 UTF-8 bytes
    assert len(text) == 400 and len(text.encode("utf-16-le")) // 2 == 405
    response = client.post("/v1/translate", json={"text": text, "max_length": 4})
    assert response.status_code == 200, response.text
    got = response.json()["translations"][0]
    assert got["sentences"][0]["source_span"] == [0, 19] and got["translation"].endswith(" " * 381)  # not 24: UTF-16
    assert_error(client.post("/v1/translate", json={"text": text + "x"}), 422, "invalid_request", "400 characters")


def test_schema_and_model_info_carry_the_new_limits(client):
    schema = client.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    assert "sentences" in components["Translation"]["required"]
    assert "code points" in json.dumps(components["SentenceTranslation"])
    assert components["AttentionRequest"]["properties"]["sentence"]["maximum"] == 7
    assert "at most 8 sentences in all" in json.dumps(components["TranslateRequest"]["properties"]["text"])
    assert "model_calls" in components["Timing"]["required"]
    assert client.get("/v1/model").json()["limits"]["max_sentences"] == 8


def test_serve_help_lists_the_sentence_limit(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--max-sentences MAX_SENTENCES sentences per request, all its texts together (default: 256)" in out
    assert "--max-chars MAX_CHARS characters (Unicode code points) per text" in out


# ---------------------------------------------------------------------------------------------
def test_attention_of_each_sentence_of_a_paragraph(client, translator):
    segments = segment_text(PARAGRAPH, "fr").segments
    for index in (0, 3):
        response = client.post("/v1/attention", json={"text": PARAGRAPH, "sentence": index, "max_length": 8})
        assert response.status_code == 200, response.text
        doc = response.json()
        jsonschema.validate(doc, SCHEMA)
        assert doc["source"] == segments[index].text
        assert doc["translation"] == decoding(translator, 8).translate([segments[index].text])[0]
        assert response.headers["x-sentence-index"] == str(index) and response.headers["x-sentence-count"] == "5"
        assert response.headers["x-source-span"] == f"{segments[index].start},{segments[index].end}"
    default = client.post("/v1/attention", json={"text": PARAGRAPH, "max_length": 8})
    assert default.json()["source"] == "Je suis étudiant." and default.headers["x-sentence-index"] == "0"
    assert_error(client.post("/v1/attention", json={"text": PARAGRAPH, "sentence": 5}), 422, "invalid_request",
                 "sentence 5 does not exist", "5 sentences (0 to 4)")
    assert_error(client.post("/v1/attention", json={"text": "le chat", "sentence": 8}), 422, "invalid_request",
                 "sentence", "7")
    assert_error(client.post("/v1/attention", json={"text": "le chat", "sentence": -1}), 422, "invalid_request",
                 "sentence")
    assert_error(client.post("/v1/attention", json={"text": "le chat", "sentence": "1"}), 422, "invalid_request",
                 "sentence", "integer")


# ---------------------------------------------------------------------------------------------
async def _concurrently(app, bodies: list[dict], gap_s: float = 0.0) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
        async def one(i: int, body: dict) -> httpx.Response:
            await asyncio.sleep(i * gap_s)
            return await c.post("/v1/translate", json=body)
        responses = await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))
    await app.state.batcher.close()
    return list(responses)


def test_sentences_of_concurrent_requests_share_model_calls(translator):
    texts = ["Je suis étudiant. Le chat noir dort.", "Nous mangeons du pain. Il pleut. Elle lit.", "Tu dors."]
    # The call starts when all six sentences are in (a full batch), not when a wait runs out: a slow
    # machine cannot split them; the 10 s wait only ends a test whose batcher fails to count them.
    app = create_app(translator, ServeLimits(batch_wait_ms=10_000, max_batch_size=6), src_lang="fr")
    responses = asyncio.run(_concurrently(app, [{"text": t, "max_length": 6} for t in texts]))
    timings = [r.json()["timing"] for r in responses]
    assert [(t["batch_size"], t["batch_requests"], t["model_calls"]) for t in timings] == [(6, 3, 1)] * 3
    # each request gets its own sentences back, as one call with all six sentences gives them
    sentences = [[s.text for s in segment_text(t, "fr").segments] for t in texts]
    flat = decoding(translator, 6).translate([s for group in sentences for s in group])
    k = 0
    for response, group in zip(responses, sentences):
        got = response.json()["translations"][0]
        assert [got["translation"][slice(*s["target_span"])] for s in got["sentences"]] == \
            [t.strip() for t in flat[k: k + len(group)]]
        k += len(group)


def test_a_long_request_is_translated_in_calls_that_let_a_later_one_through(translator):
    app = create_app(translator, ServeLimits(batch_wait_ms=50, max_batch_size=4, max_texts=4), src_lang="fr")
    long_text = " ".join(["Le chat dort.", "Il pleut.", "Nous mangeons.", "Elle lit.", "Tu dors."] * 2)  # 10
    responses = asyncio.run(_concurrently(app, [{"text": long_text, "max_length": 4},
                                                {"text": "je suis étudiant.", "max_length": 4}], gap_s=0.01))
    long_timing, short_timing = (r.json()["timing"] for r in responses)
    assert long_timing["model_calls"] == 3 and long_timing["batch_size"] == 4
    assert short_timing["model_calls"] == 1  # in the second call, not after the long request
    assert short_timing["queue_ms"] < long_timing["total_ms"]
    assert responses[0].json()["translations"][0]["translation"] == \
        translate_document(decoding(translator, 4), long_text).text


def test_overload_counts_sentences(translator):
    # In turn, each once the one before is queued or answered: the first request's three sentences
    # wait for a fourth (a full batch; the 10 s wait is never waited), the second's two would make
    # five, and the third's one fills the queue and the batch.
    app = create_app(translator, ServeLimits(batch_wait_ms=10_000, max_batch_size=4, max_queue=4), src_lang="fr")

    async def in_turn() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            def post(text: str):
                return c.post("/v1/translate", json={"text": text, "max_length": 2})
            first = asyncio.create_task(post("Il pleut. Tu dors. Elle lit."))
            while app.state.batcher.health()["queued_texts"] < 3:
                assert not first.done(), "the first request did not wait for company"
                await asyncio.sleep(0.01)
            refused = await post("Le chat dort. Nous mangeons.")
            third = await post("Je suis étudiant.")
            responses = [await first, refused, third]
        await app.state.batcher.close()
        return responses

    responses = asyncio.run(in_turn())
    assert [r.status_code for r in responses] == [200, 503, 200]
    assert_error(responses[1], 503, "overloaded", "3 texts are waiting", "at most 4")
    # an idle server takes a request larger than the queue
    app = create_app(translator, ServeLimits(max_queue=2), src_lang="fr")
    responses = asyncio.run(_concurrently(app, [{"text": "Il pleut. Tu dors. Elle lit. Le chat dort.", "max_length": 2}]))
    assert responses[0].status_code == 200 and len(responses[0].json()["translations"][0]["sentences"]) == 4


# ---------------------------------------------------------------------------------------------
# The batcher alone, with a stand-in model: which texts go into which call.
def run_jobs(jobs: list[tuple[str, list[str]]], max_batch_size: int, **options) -> tuple[list, list]:
    calls: list[list[str]] = []
    total = sum(len(texts) for _, texts in jobs)

    def run_batch(key, texts):
        calls.append(list(texts))
        if len(calls) == 1:  # the later jobs (5 ms apart) arrive during the first call, however slow the machine
            deadline = time.monotonic() + 30  # only keeps a broken batcher from hanging the test
            while batcher.health()["queued_texts"] + len(texts) < total and time.monotonic() < deadline:
                time.sleep(0.005)
        time.sleep(0.1)  # each call lasts: a job's calls outlast a later job's wait for its turn
        return [t.upper() for t in texts]

    batcher = DynamicBatcher(run_batch, max_batch_size=max_batch_size, **options)

    async def go():
        async def one(i, key, texts):
            await asyncio.sleep(i * 0.005)  # arrive in this order
            try:
                return await batcher.translate(key, texts)
            except (Overloaded, TimedOut) as err:
                return err
        try:
            return await asyncio.gather(*(one(i, k, t) for i, (k, t) in enumerate(jobs)))
        finally:
            await batcher.close()

    return asyncio.run(go()), calls


def test_batcher_fills_calls_in_order_and_sends_a_partly_taken_job_to_the_back():
    a = [f"a{i}" for i in range(20)]
    results, calls = run_jobs([("k", a), ("k", ["b0"]), ("k", ["c0", "c1", "c2"])], 8, batch_wait_ms=100)
    assert calls == [a[:8], ["b0", "c0", "c1", "c2", *a[8:12]], a[12:]]  # full calls; b and c in the second
    assert [r[0] for r in results] == [[t.upper() for t in a], ["B0"], ["C0", "C1", "C2"]]
    infos = [r[1] for r in results]
    assert [(i.model_calls, i.batch_size, i.batch_requests) for i in infos] == [(3, 8, 3), (1, 8, 3), (1, 8, 3)]
    assert infos[1].queue_ms < infos[0].queue_ms + infos[0].compute_ms


def test_batcher_gives_a_large_job_calls_of_its_own_of_at_most_max_alone():
    a = [f"a{i}" for i in range(20)]
    results, calls = run_jobs([("k", a), ("k", ["b0"])], 8, max_alone=16, batch_wait_ms=100)
    assert calls == [a[:16], ["b0", *a[16:]]]  # as a list of 16 texts ran before: one call
    assert [r[0] for r in results] == [[t.upper() for t in a], ["B0"]]
    assert (results[0][1].model_calls, results[0][1].batch_size) == (2, 16)


def test_batcher_keys_are_not_mixed_and_a_job_is_never_starved():
    a, b = [f"a{i}" for i in range(6)], [f"b{i}" for i in range(3)]
    results, calls = run_jobs([("k", a), ("other", b), ("k", ["c0"])], 4, batch_wait_ms=50)
    assert calls == [a[:4], b, ["c0", *a[4:]]]
    assert [r[0] for r in results] == [[t.upper() for t in a], [t.upper() for t in b], ["C0"]]


def test_batcher_drops_the_rest_of_a_job_that_timed_out():
    calls: list[list[str]] = []
    timed_out = threading.Event()

    def slow(key, texts):  # the first call lasts until its job has timed out, however slow the machine
        calls.append(list(texts))
        timed_out.wait(timeout=30)
        return list(texts)

    batcher = DynamicBatcher(slow, max_batch_size=2, batch_wait_ms=0, timeout_s=0.2)

    async def go():
        try:
            with pytest.raises(TimedOut):
                await batcher.translate("k", ["a", "b", "c", "d", "e", "f"])
            timed_out.set()
            deadline = time.monotonic() + 30  # only keeps a broken batcher from hanging the test
            while batcher.health()["queued_texts"] or batcher.health()["running_texts"]:
                assert time.monotonic() < deadline, batcher.health()
                await asyncio.sleep(0.01)
            return batcher.health()
        finally:
            await batcher.close()

    health = asyncio.run(go())
    assert calls == [["a", "b"]] and health["timed_out"] == 1  # the call under way ended; no other began
