"""``transformer serve --tm PATH``: sentences with an accepted entry of their model's pair are
translated as that entry on both APIs (and in files and HTML), marked as such, the others get
their fuzzy matches; ``/suggest`` checks suggestions and keeps those that pass as pending entries,
which once accepted are the translation."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from serve_helpers import live_server

from transformer.cli import build_parser, main
from transformer.errors import UserError
from transformer.memory import TMBusyError, TranslationMemory
from transformer.serve.access import KeyLimits, KeyRing
from transformer.serve.app import create_app
from transformer.serve.cli import server_memory
from transformer.serve.libretranslate import LibreTranslateOptions
from transformer.serve.memory import ServerMemory, sender
from transformer.translate.suggestion_checks import Thresholds

SERVED = ("Le chat dort.", "The cat is asleep, says the memory.")
FUZZY = ("Le petit chat dort dans la maison.", "The little cat sleeps in the house, says the memory.")
NEAR_FUZZY = "Le petit chat dort dans la grande maison."
PENDING = ("Je suis étudiant.", "PENDING")
REJECTED = ("Nous allons manger.", "REJECTED")
OTHER_PAIR = ("Le chien court.", "Der Hund läuft.")
TWO = ("Il pleut. Nous restons ici.", "It rains, so we stay in, says the memory.")  # one entry of two sentences
# A suggestion that passes the cheap checks: English, of a plausible length, not the source.
SOURCE, SUGGESTION = "Les enfants jouent dans le jardin.", "The children are playing in the garden."
# A random tiny model finds any real sentence far less probable than its own output and is sure of no
# end: the model checks are a trained model's (tests/test_suggestion_checks.py), not what these tests
# are about.
LENIENT = Thresholds(absurd_margin=1e9, min_end_log_prob=-math.inf, min_relevance=-math.inf)


@pytest.fixture
def memory_path(tmp_path):
    path = tmp_path / "memory.db"
    with TranslationMemory(path) as store:
        store.add(*SERVED, "fr", "en", origin="reviewer", status="accepted")
        store.add(*FUZZY, "fr", "en", origin="reviewer", status="accepted")
        store.add(*TWO, "fr", "en", origin="reviewer", status="accepted")
        store.add(*PENDING, "fr", "en", status="pending")
        store.add(*REJECTED, "fr", "en", status="rejected")
        store.add(*OTHER_PAIR, "fr", "de", status="accepted")
    return path


@pytest.fixture
def ids(memory_path):
    with TranslationMemory(memory_path) as store:
        return {e.source: e.id for e in store.entries(status=None)}


def client_of(translator, path, **options):
    memory = ServerMemory(TranslationMemory(path), thresholds=options.pop("thresholds", LENIENT), **options)
    app = create_app(translator, src_lang="fr", tgt_lang="en", memory=memory)
    return TestClient(app), memory


@pytest.fixture
def served(pair_translators, memory_path):
    client, memory = client_of(pair_translators["fr", "en"], memory_path)
    with client:
        yield client
    memory.close()


def native(client, text, **fields):
    answer = client.post("/v1/translate", json={"text": text, **fields})
    assert answer.status_code == 200, answer.text
    return answer.json()["translations"][0]


def test_an_accepted_entry_is_the_translation_on_the_native_api(served, ids, model_calls):
    result = native(served, SERVED[0])
    assert result["translation"] == SERVED[1]
    assert result["sentences"][0]["memory"] == {"id": ids[SERVED[0]], "similarity": 1.0}
    assert result["sentences"][0]["score"] == 0.0
    assert model_calls == []  # the memory had every sentence: the model did not run


def test_the_other_sentences_of_a_text_go_to_the_model(served, model_calls):
    result = native(served, f"{SERVED[0]} {PENDING[0]}")
    assert result["translation"].startswith(SERVED[1] + " ")
    assert "memory" in result["sentences"][0] and "memory" not in result["sentences"][1]
    assert [texts for texts in model_calls if PENDING[0] in texts] and \
        not [texts for texts in model_calls if SERVED[0] in texts]


def test_an_entry_of_several_sentences_comes_back_whole_on_every_route(served, ids, model_calls):
    result = native(served, TWO[0])
    assert result["translation"] == TWO[1] and len(result["sentences"]) == 1
    assert result["sentences"][0]["memory"] == {"id": ids[TWO[0]], "similarity": 1.0}
    one = served.post("/translate", json={"q": TWO[0], "source": "fr", "target": "en"}).json()
    assert one["translatedText"] == TWO[1] and one["memory"][0]["memory"]["id"] == ids[TWO[0]]
    answer = served.post("/translate_file", data={"source": "fr", "target": "en"},
                         files={"file": ("a.txt", f"{TWO[0]}\n".encode(), "text/plain")})
    url = answer.json()["translatedFileUrl"]
    assert served.get(url[url.index("/download_file"):]).text == f"{TWO[1]}\n"
    assert model_calls == []
    longer = native(served, f"{TWO[0]} Demain aussi.")  # not the entry: cut into its sentences as ever
    assert len(longer["sentences"]) == 3 and TWO[1] not in longer["translation"]


@pytest.mark.parametrize("source, unused", [PENDING, REJECTED, (OTHER_PAIR[0], OTHER_PAIR[1])],
                         ids=["pending", "rejected", "another pair"])
def test_pending_rejected_and_other_pairs_entries_are_not_used(served, source, unused):
    result = native(served, source)
    assert unused not in result["translation"]
    assert "memory" not in result["sentences"][0]


def test_fuzzy_matches_come_back_as_alternatives(served, ids):
    sentence = native(served, NEAR_FUZZY)["sentences"][0]
    assert "memory" not in sentence
    found = sentence["memory_alternatives"][0]
    assert found["id"] == ids[FUZZY[0]] and found["text"] == FUZZY[1] and found["source"] == FUZZY[0]
    assert 0.75 <= found["similarity"] < 1


def test_html_pages_use_the_memory(served):
    result = native(served, f"<p>{SERVED[0]}</p>", format="html")
    assert result["translation"] == f"<p>{SERVED[1]}</p>"
    assert result["sentences"][0]["memory"]["similarity"] == 1.0


def test_libretranslate_answers_carry_a_memory_field(served, ids):
    one = served.post("/translate", json={"q": SERVED[0], "source": "fr", "target": "en"}).json()
    assert one["translatedText"] == SERVED[1]
    assert one["memory"] == [{"sentence": 0, "memory": {"id": ids[SERVED[0]], "similarity": 1.0}}]
    many = served.post("/translate", json={"q": [NEAR_FUZZY, "", SERVED[0]], "source": "fr", "target": "en"}).json()
    assert many["translatedText"][2] == SERVED[1]
    assert many["memory"][0][0]["memory_alternatives"][0]["id"] == ids[FUZZY[0]]
    assert many["memory"][1] == []  # a blank text comes back as it is


def test_translated_files_use_the_memory(served):
    answer = served.post("/translate_file", data={"source": "fr", "target": "en"},
                         files={"file": ("a.txt", f"{SERVED[0]}\n".encode(), "text/plain")})
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert served.get(url[url.index("/download_file"):]).text == f"{SERVED[1]}\n"


def test_through_the_pivot_each_step_looks_up_its_own_pair(pair_translators, memory_path, model_calls):
    with TranslationMemory(memory_path) as store:
        store.add("The cat is asleep.", "Die Katze schläft.", "en", "de", status="accepted")
        store.add(SERVED[0], "The cat is asleep.", "fr", "en", status="accepted")  # the newer of the two fr-en
    memory = ServerMemory(TranslationMemory(memory_path))
    app = create_app([pair_translators["fr", "en"], pair_translators["en", "de"]], memory=memory)
    with TestClient(app) as client:
        result = native(client, SERVED[0], source="fr", target="de")
        assert result["via"] == {"language": "en", "translation": "The cat is asleep."}
        assert result["translation"] == "Die Katze schläft." and "memory" in result["sentences"][0]
        # fr-de's own entry is not used for a pair no model translates: the steps' entries are
        other = client.post("/translate", json={"q": OTHER_PAIR[0], "source": "fr", "target": "de"}).json()
        assert other["translatedText"] != OTHER_PAIR[1]
    memory.close()
    assert not [texts for texts in model_calls if SERVED[0] in texts or "The cat is asleep." in texts]


def test_without_a_memory_answers_have_no_memory_fields(pair_translators):
    with TestClient(create_app(pair_translators["fr", "en"], src_lang="fr", tgt_lang="en")) as client:
        assert "memory" not in native(client, NEAR_FUZZY)["sentences"][0]
        assert "memory_alternatives" not in native(client, NEAR_FUZZY)["sentences"][0]
        assert "memory" not in client.post("/translate", json={"q": SERVED[0], "source": "fr", "target": "en"}).json()
        assert client.post("/suggest", json={"q": SOURCE, "s": SUGGESTION, "source": "fr",
                                             "target": "en"}).status_code == 403


def suggest(client, q=SOURCE, s=SUGGESTION, **fields):
    return client.post("/suggest", json={"q": q, "s": s, "source": "fr", "target": "en", **fields})


@pytest.mark.parametrize("s, reason", [(SOURCE, "copy_of_source"), ("The", "implausible_length"),
                                       (SUGGESTION * 4, "implausible_length"),
                                       ("Die Kinder spielen im Garten.", "wrong_language")])
def test_bad_suggestions_are_refused_with_their_reason(served, memory_path, s, reason):
    answer = suggest(served, s=s)
    assert answer.status_code == 400
    assert answer.json()["reason"] == reason and answer.json()["error"].startswith("Invalid request: ")
    with TranslationMemory(memory_path) as store:
        assert not [e for e in store.entries(status=None) if e.source == SOURCE]  # nothing written


def test_the_model_checks_wait_their_turn_on_the_batcher(served):
    before = served.get("/health").json()["batching"]["requests"]
    assert suggest(served).status_code == 200
    # the model's own translation, then the forced-decoding scores: two calls through the batcher
    assert served.get("/health").json()["batching"]["requests"] == before + 2


def test_the_absurd_check_runs_on_the_model(pair_translators, memory_path):
    client, memory = client_of(pair_translators["fr", "en"], memory_path,
                               thresholds=Thresholds(absurd_margin=0.0, min_end_log_prob=-math.inf))
    with client:
        answer = suggest(client)
    memory.close()
    assert answer.status_code == 400 and answer.json()["reason"] == "absurd"


def test_a_suggestion_that_passes_is_pending_until_accepted_then_the_translation(served, memory_path):
    answer = suggest(served)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["success"] is True and body["status"] == "pending"
    with TranslationMemory(memory_path) as store:
        entry = store.get(body["id"])
        assert (entry.source, entry.target, entry.origin, entry.who) == (SOURCE, SUGGESTION, "suggestion",
                                                                         "client:testclient")
    assert native(served, SOURCE)["translation"] != SUGGESTION  # pending: not used
    again = suggest(served)
    assert again.status_code == 400 and again.json()["reason"] == "near_duplicate_pending"
    with TranslationMemory(memory_path) as store:  # the reviewer's decision, from another process's connection
        store.accept(body["id"])
    result = native(served, SOURCE)
    assert result["translation"] == SUGGESTION and result["sentences"][0]["memory"]["id"] == body["id"]


def test_a_suggestion_reviewed_on_the_command_line_is_the_translation_on_both_apis(served, memory_path, capsys):
    entry_id = suggest(served).json()["id"]
    assert main(["tm", "review", "--tm", str(memory_path), "--accept", str(entry_id)]) == 0
    capsys.readouterr()
    assert native(served, SOURCE)["sentences"][0]["memory"] == {"id": entry_id, "similarity": 1.0}
    answer = served.post("/translate", data={"q": SOURCE, "source": "fr", "target": "en"}).json()
    assert answer["translatedText"] == SUGGESTION


def test_a_suggestion_from_auto_is_kept_in_the_detected_pair(served, memory_path):
    answer = suggest(served, source="auto")  # as LibreTranslate's page sends it by default
    assert answer.status_code == 200, answer.text
    with TranslationMemory(memory_path) as store:
        entry = store.get(answer.json()["id"])
    assert (entry.source_lang, entry.target_lang) == ("fr", "en")


def test_health_counts_what_the_memory_served_and_kept(served):
    assert served.get("/health").json()["memory"] == {
        "sentences_looked_up": 0, "sentences_from_memory": 0, "lookups_busy": 0, "suggestions_kept": 0,
        "suggestions_refused": 0}
    native(served, f"{SERVED[0]} {PENDING[0]}")
    assert suggest(served).status_code == 200 and suggest(served, s=SOURCE).status_code == 400
    counts = served.get("/health").json()["memory"]
    assert counts["sentences_looked_up"] >= 2 and counts["sentences_from_memory"] == 1
    assert (counts["suggestions_kept"], counts["suggestions_refused"], counts["lookups_busy"]) == (1, 1, 0)


def test_a_memory_locked_past_its_timeout_is_counted_and_logged_and_the_model_translates(
        served, monkeypatch, caplog):
    def locked(*args, **kwargs):
        raise TMBusyError("translation memory memory.db is busy: another process kept it locked")

    monkeypatch.setattr(TranslationMemory, "lookup", locked)
    with caplog.at_level("WARNING", logger="uvicorn.error"):
        first, second = native(served, SERVED[0]), native(served, SERVED[0])
    assert first["translation"] != SERVED[1] and "memory" not in first["sentences"][0] and second == first
    assert served.get("/health").json()["memory"]["lookups_busy"] == 2
    warnings = [r.getMessage() for r in caplog.records if "locked past its timeout" in r.getMessage()]
    assert len(warnings) == 1  # once a minute at most, not a line a request


def test_auto_accept_makes_a_suggestion_the_translation_at_once(pair_translators, memory_path):
    client, memory = client_of(pair_translators["fr", "en"], memory_path, auto_accept=True)
    with client:
        assert suggest(client).json()["status"] == "accepted"
        assert client.post("/translate", json={"q": SOURCE, "source": "fr",
                                               "target": "en"}).json()["translatedText"] == SUGGESTION
    memory.close()


def test_suggestions_are_rate_limited_per_sender(pair_translators, memory_path):
    client, memory = client_of(pair_translators["fr", "en"], memory_path, suggestions_per_minute=2)
    with client:
        codes = [suggest(client, s="x").status_code for _ in range(3)]  # refused by a check, counted all the same
    memory.close()
    assert codes == [400, 400, 429]


def test_suggestions_need_a_served_pair(served):
    assert suggest(served, target="de").status_code == 400
    assert suggest(served, q="").json()["error"] == "Invalid request: missing q parameter"


def test_the_sender_is_the_hashed_key_where_the_server_has_keys():
    with_keys = KeyRing({"secret": KeyLimits()})
    assert sender("secret", "1.2.3.4", with_keys).startswith("key:") and "secret" not in sender("secret", None,
                                                                                                with_keys)
    assert sender("secret", "1.2.3.4", KeyRing()) == "client:1.2.3.4"  # keys off: a key is no one's


def test_the_page_settings_say_suggestions_are_on(served):
    assert served.get("/frontend/settings").json()["suggestions"] is True


def test_the_page_marks_the_sentences_from_the_memory(browser, pair_translators, memory_path):
    app = create_app(pair_translators["fr", "en"], src_lang="fr", tgt_lang="en",
                     memory=ServerMemory(TranslationMemory(memory_path)))
    with live_server(app) as server:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server + "/")
        page.wait_for_selector("body[data-ready=true]")
        page.fill("#source", f"{PENDING[0]} {SERVED[0]}")
        page.click("#translate")
        page.wait_for_selector("#result[data-state=done]", timeout=60_000)
        spans = page.locator("#translation .sentence")
        assert spans.evaluate_all("els => els.map(e => e.classList.contains('from-memory'))") == [False, True]
        assert spans.nth(1).inner_text() == SERVED[1]
        assert page.inner_text("#memory-note").startswith("Sentence 2 from the translation memory")
        assert "from the translation memory" in page.locator("#sentence-select option").nth(1).inner_text()
        page.fill("#source", PENDING[0])  # a translation without one clears the note
        page.click("#translate")
        page.wait_for_selector("#result[data-state=done]", timeout=60_000)
        assert page.is_hidden("#memory-note") and errors == []
    app.state.service.memory.close()


def serve_args(*argv):
    return build_parser().parse_args(["serve", "runs/x", *argv])


def test_the_command_line_refuses_what_cannot_work(tmp_path, memory_path):
    for option in ("--tm-auto-accept", "--tm-constraints"):
        with pytest.raises(UserError, match="are for --tm PATH"):
            server_memory(serve_args(option))
    with pytest.raises(UserError, match="no translation memory at"):
        server_memory(serve_args("--tm", str(tmp_path / "missing.db")))
    with pytest.raises(UserError, match="give one"):
        server_memory(serve_args("--tm", str(memory_path), "--suggestions", str(tmp_path / "s.jsonl")))
    with pytest.raises(UserError, match="--tm-threshold"):
        server_memory(serve_args("--tm", str(memory_path), "--tm-threshold", "0"))
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    with pytest.raises(UserError, match="not a translation memory"):
        server_memory(serve_args("--tm", str(tmp_path / "junk.db")))
    opened = server_memory(serve_args("--tm", str(memory_path), "--tm-auto-accept", "--tm-suggest-limit", "3"))
    assert opened.auto_accept and opened.suggestions_per_minute == 3 and not opened.constraints
    opened.close()
    opened = server_memory(serve_args("--tm", str(memory_path), "--tm-constraints"))
    assert opened.constraints
    opened.close()
