"""``deep-translator``'s ``LibreTranslator``, unchanged from the package index, against a real
``transformer serve`` process of three tiny runs (fr -> en, en -> de, de -> en; fr -> de through en).

What the client sends (deep_translator/libre.py, 1.11.4): ``POST {custom_url}translate`` with no
body, every parameter in the query string (``q``, ``source``, ``target``, ``format=text``,
``api_key``), one request per text (``translate_batch`` loops), and nothing for a text that is
empty or whose source and target are the same. ``translate_file`` reads a local file (text, or
.docx / .pdf through optional libraries), strips it and translates it as one text.
``get_supported_languages`` sends nothing: it answers the client's own table of LibreTranslate's
languages. A status of 403 raises ``AuthorizationException``, any other non-2xx
``ServerException`` named by the status alone (the server's message is dropped).
"""

from __future__ import annotations

import httpx
import pytest
from clients_helpers import ENGLISH, FRENCH, GERMAN, SAMPLES, expected, serve
from deep_translator import LibreTranslator
from deep_translator.exceptions import AuthorizationException, LanguageNotSupportedException, ServerException

from transformer.translate.translator import Translator

PAIRS = [("fr", "en"), ("en", "de"), ("de", "en")]
KEY = "client-test-key-1"
# a random model's translations run long; the server translates them in pieces just the same
pytestmark = pytest.mark.filterwarnings("ignore::transformer.translate.warning.TranslationWarning")


@pytest.fixture(scope="module")
def runs(pair_runs):
    return pair_runs


@pytest.fixture(scope="module")
def translators(pair_translators) -> dict[tuple[str, str], Translator]:
    return pair_translators


@pytest.fixture(scope="module")
def server(runs, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"{KEY}  req_limit=unlimited\n")
    with serve([runs[pair] for pair in PAIRS], "--api-keys", str(keys)) as url:
        yield url


def client(server: str, source: str, target: str, api_key: str = KEY) -> LibreTranslator:
    # the client appends "translate" to the URL as it is: it must end with a slash
    return LibreTranslator(source=source, target=target, api_key=api_key, custom_url=server + "/")


@pytest.mark.parametrize("source, target", [*PAIRS, ("fr", "de")])
def test_translate_each_pair_directly_or_through_english(server, translators, source, target):
    text = SAMPLES[source]
    assert client(server, source, target).translate(text) == expected(translators, source, target, text)


def test_language_names_and_query_string_escapes(server, translators):
    """Names map to codes in the client; ``+``, ``&``, newlines and accents survive the query string."""
    text = "Le chat & le chien + 2 € ?\n\nNous mangeons du pain."
    got = client(server, "French", "English").translate(text)
    assert got == expected(translators, "fr", "en", text)
    assert got.count("\n\n") == 1  # the paragraphs are kept


def test_auto_source_detects_each_text(server, translators):
    into_english = client(server, "auto", "en")
    assert into_english.translate(FRENCH) == expected(translators, "fr", "en", FRENCH)
    assert into_english.translate(GERMAN) == expected(translators, "de", "en", GERMAN)
    assert into_english.translate(ENGLISH) == ENGLISH  # already in the target language
    assert client(server, "auto", "de").translate(FRENCH) == expected(translators, "fr", "de", FRENCH)


def test_translate_batch_sends_one_request_per_text(server, translators):
    batch = [FRENCH, "Il pleut. Nous restons à la maison.", "Bonjour"]
    assert client(server, "fr", "en").translate_batch(batch) == [expected(translators, "fr", "en", t) for t in batch]


def test_translate_file_strips_and_translates_the_text(server, translators, tmp_path):
    text = "  Le chat dort. Il pleut.\n\nNous mangeons du pain.\n\n"
    path = tmp_path / "notes.txt"
    path.write_text(text, encoding="utf-8")
    got = client(server, "fr", "de").translate_file(str(path))
    assert got == expected(translators, "fr", "de", text.strip())


def test_supported_languages_are_the_clients_table(server):
    """``get_supported_languages`` asks the server nothing; every language served can be named."""
    table = client(server, "fr", "en").get_supported_languages(as_dict=True)
    served = [language["code"] for language in httpx.get(server + "/languages", timeout=10).json()]
    assert served == ["fr", "en", "de"]
    assert set(served) <= set(table.values())
    assert client(server, "fr", "en").get_supported_languages() == list(table)


def test_what_the_client_raises(server):
    with pytest.raises(ServerException, match="ERR_BAD_REQUEST"):  # a pair not served: 400
        client(server, "de", "fr").translate(GERMAN)
    with pytest.raises(ServerException, match="ERR_BAD_REQUEST"):  # a language the server lacks
        client(server, "es", "en").translate("El gato negro.")
    with pytest.raises(AuthorizationException):  # an unknown key: 403
        client(server, "fr", "en", api_key="unknown-key-999").translate(FRENCH)
    with pytest.raises(LanguageNotSupportedException):  # not in the client's table: no request at all
        client(server, "nl", "en")
    assert client(server, "fr", "en").translate("") == ""  # empty: no request
    assert client(server, "fr", "fr").translate(FRENCH) == FRENCH  # same language: no request


def test_a_text_under_the_character_limit_fits_the_url(server, translators):
    """The client sends the text in the URL: a text under --max-chars (5000) with accents is 16 KiB
    percent-encoded, within the default --max-header-bytes (64 KiB)."""
    text = "été à côté " * 450  # 4,950 characters, 16 KiB percent-encoded
    assert client(server, "fr", "en").translate(text) == expected(translators, "fr", "en", text)
