"""LibreTranslate's /spec and /frontend/settings documents (transformer/serve/libretranslate/spec.py): the Swagger 2.0
document validated by openapi-spec-validator, the settings key for key LibreTranslate's."""

from __future__ import annotations

import json

import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from referencing.exceptions import Unresolvable

from transformer.serve.libretranslate.spec import frontend_settings, spec

LANGUAGES = [{"code": "de", "name": "German", "targets": ["en"]},
             {"code": "en", "name": "English", "targets": []}]
MANY = [{"code": "de", "name": "German", "targets": ["en", "fr"]},
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "fr", "name": "French", "targets": []}]
ALL_PATHS = {"/translate", "/languages", "/frontend/settings", "/detect", "/translate_file",
             "/download_file/{filename}", "/suggest"}


@pytest.mark.parametrize("options", [
    {},
    {"host": "translate.example.com:8443", "base_path": "/lt", "max_alternatives": 3},
    {"detect": False, "files": False, "suggestions": False},
])
def test_spec_is_valid_swagger_2(options):
    document = spec(MANY, version="1.2.3", **options)
    validate(document)  # raises on an invalid document
    assert document["swagger"] == "2.0"
    assert document["info"]["version"] == "1.2.3"
    assert json.loads(json.dumps(document)) == document


def test_the_validator_catches_a_broken_document():
    document = spec(LANGUAGES, version="1")
    document["paths"]["/translate"]["post"]["responses"]["200"]["schema"] = {"$ref": "#/definitions/nowhere"}
    with pytest.raises(Unresolvable):
        validate(document)
    document = spec(LANGUAGES, version="1")
    document["paths"]["/translate"]["post"]["parameters"][0]["in"] = "header-ish"
    with pytest.raises(OpenAPIValidationError):
        validate(document)


def test_spec_lists_the_routes_offered():
    assert set(spec(LANGUAGES, version="1")["paths"]) == ALL_PATHS
    assert set(spec(LANGUAGES, version="1", detect=False, files=False, suggestions=False)["paths"]) == {
        "/translate", "/languages", "/frontend/settings"}
    only_files = spec(LANGUAGES, version="1", detect=False, suggestions=False)["paths"]
    assert set(only_files) == {"/translate", "/languages", "/frontend/settings", "/translate_file",
                               "/download_file/{filename}"}


def test_spec_parameters_are_libretranslates():
    document = spec(MANY, version="1", max_alternatives=3)
    translate = document["paths"]["/translate"]["post"]
    params = {p["name"]: p for p in translate["parameters"]}
    assert list(params) == ["q", "source", "target", "format", "alternatives", "api_key"]
    assert [n for n, p in params.items() if p["required"]] == ["q", "source", "target"]
    assert params["source"]["enum"] == ["auto", "de", "en", "fr"]
    assert params["target"]["enum"] == ["de", "en", "fr"]
    assert params["format"]["enum"] == ["text", "html"]
    assert params["alternatives"]["maximum"] == 3
    assert set(translate["responses"]) == {"200", "400", "403", "413", "429", "500", "503"}
    assert translate["responses"]["429"]["schema"] == {"$ref": "#/definitions/error-slow-down"}
    upload = {p["name"]: p for p in document["paths"]["/translate_file"]["post"]["parameters"]}
    assert upload["file"]["type"] == "file" and upload["file"]["required"]
    suggest = [p["name"] for p in document["paths"]["/suggest"]["post"]["parameters"]]
    assert suggest == ["q", "s", "source", "target"]
    assert set(document["definitions"]) == {"translate", "languages", "detections", "translate-file",
                                            "frontend-settings", "suggest-response", "error-response",
                                            "error-slow-down"}
    assert "host" not in document and "basePath" not in document


def test_spec_documents_are_independent():
    first = spec(LANGUAGES, version="1")
    first["definitions"]["translate"]["properties"].clear()
    first["paths"]["/translate"]["post"]["parameters"][1]["enum"].append("xx")
    second = spec(LANGUAGES, version="1")
    assert second["definitions"]["translate"]["properties"]
    assert "xx" not in second["paths"]["/translate"]["post"]["parameters"][1]["enum"]


def test_spec_refuses_bad_host_and_base_path():
    with pytest.raises(ValueError, match="base_path must start with '/'"):
        spec(LANGUAGES, version="1", base_path="lt")
    with pytest.raises(ValueError, match="without a scheme or path"):
        spec(LANGUAGES, version="1", host="https://translate.example.com")


# --- /frontend/settings --------------------------------------------------------------------------

def test_frontend_settings_defaults_are_libretranslates():
    assert frontend_settings(LANGUAGES) == {
        "charLimit": -1,
        "frontendTimeout": 500,
        "apiKeys": False,
        "keyRequired": False,
        "suggestions": False,
        "filesTranslation": False,
        "supportedFilesFormat": [],
        "language": {"source": {"code": "auto", "name": "Auto Detect"},
                     "target": {"code": "en", "name": "English"}},
    }


def test_frontend_settings_from_options():
    settings = frontend_settings(MANY, char_limit=5000, frontend_timeout_ms=300, api_keys=True, key_required=True,
                                 suggestions=True, file_formats=["txt", ".SRT", ".txt", "po"], source="en")
    assert settings["charLimit"] == 5000 and settings["frontendTimeout"] == 300
    assert settings["apiKeys"] is settings["keyRequired"] is settings["suggestions"] is True
    assert settings["filesTranslation"] is True
    assert settings["supportedFilesFormat"] == [".txt", ".srt", ".po"]
    assert settings["language"] == {"source": {"code": "en", "name": "English"},
                                    "target": {"code": "de", "name": "German"}}  # en's first target
    assert frontend_settings(MANY, file_formats=[])["filesTranslation"] is True
    assert frontend_settings(MANY, source="de", target="fr")["language"]["target"] == {"code": "fr", "name": "French"}
    assert frontend_settings(MANY[2:])["language"]["target"]["code"] == "fr"  # one language: itself


@pytest.mark.parametrize("kwargs, message", [
    ({"source": "xx"}, "the frontend's source language 'xx' is not served (languages: de, en)"),
    ({"target": "auto"}, "the frontend's target language 'auto' is not served"),
    ({"file_formats": ["../etc"]}, "'../etc' is not a file extension"),
])
def test_frontend_settings_refusals(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        frontend_settings(LANGUAGES, **kwargs)
    with pytest.raises(ValueError, match="at least one language"):
        frontend_settings([])
