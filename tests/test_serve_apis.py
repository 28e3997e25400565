"""A route declared on an API's router answers in that API's shape and carries its CORS, with no
other change: the native API's errors are ``{"error": code, "message", "details"}`` (422 for a
refused request), LibreTranslate's are ``{"error": message}`` (400) with CORS headers."""

import pytest

pytest.importorskip("fastapi")

from fastapi import APIRouter, FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from transformer.errors import UserError  # noqa: E402
from transformer.serve.access import KeyRequired  # noqa: E402
from transformer.serve.app import serve_apis  # noqa: E402
from transformer.serve.libretranslate import LIBRETRANSLATE  # noqa: E402
from transformer.serve.routes import NATIVE  # noqa: E402

ORIGIN = "access-control-allow-origin"


class Echo(BaseModel):
    text: str


def refuse(text: str) -> dict:
    """What both test routes do: refuse "no", deny "key", fail on "bug", echo the rest."""
    if text == "no":
        raise UserError("no is refused")
    if text == "key":
        raise KeyRequired("Please contact the server operator to get an API key")
    if text == "bug":
        raise RuntimeError("a bug")
    return {"text": text}


@pytest.fixture(scope="module")
def client():
    native = NATIVE.router()

    @native.post("/v1/echo")
    async def echo(body: Echo) -> dict:
        return refuse(body.text)

    libretranslate = LIBRETRANSLATE.router()

    @libretranslate.post("/echo")
    async def lt_echo(q: str) -> dict:
        return refuse(q)

    app = FastAPI()
    serve_apis(app, [native, libretranslate], max_body_bytes=1000)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_a_native_route_answers_in_the_native_shape_without_cors(client):
    assert client.post("/v1/echo", json={"text": "hi"}).json() == {"text": "hi"}
    answer = client.post("/v1/echo", json={"text": "no"})
    assert answer.status_code == 422
    assert answer.json() == {"error": "invalid_request", "message": "no is refused", "details": []}
    assert ORIGIN not in answer.headers
    answer = client.post("/v1/echo", json={"text": 3})
    assert answer.status_code == 422 and answer.json()["error"] == "invalid_request"
    assert answer.json()["details"][0]["loc"] == ["body", "text"]
    answer = client.post("/v1/echo", json={"text": "key"})
    assert answer.status_code == 400 and answer.json()["error"] == "api_key_required"
    assert client.post("/v1/echo", content=b"x" * 2000).json()["error"] == "payload_too_large"
    assert client.get("/v1/echo").json()["error"] == "method_not_allowed"
    answer = client.post("/v1/echo", json={"text": "bug"})
    assert answer.status_code == 500 and answer.json()["error"] == "internal_error" and answer.json()["error_id"]
    assert client.options("/v1/echo").status_code == 405


def test_a_libretranslate_route_answers_in_its_shape_with_cors(client):
    assert client.post("/echo?q=hi").json() == {"text": "hi"}
    answer = client.post("/echo?q=no")
    assert answer.status_code == 400
    assert answer.json() == {"error": "no is refused"}
    assert answer.headers[ORIGIN] == "*"
    answer = client.post("/echo?q=key")
    assert answer.status_code == 400 and answer.json() == {"error": "Please contact the server operator to get "
                                                                    "an API key"}
    answer = client.post("/echo?q=hi", content=b"x" * 2000)
    assert answer.status_code == 413 and list(answer.json()) == ["error"] and answer.headers[ORIGIN] == "*"
    assert client.get("/echo").json() == {"error": "Method Not Allowed"}
    answer = client.post("/echo?q=bug")
    assert answer.status_code == 500 and list(answer.json()) == ["error", "error_id"]
    preflight = client.options("/echo")
    assert preflight.status_code == 204 and preflight.headers[ORIGIN] == "*"


def test_an_unknown_path_answers_natively_under_the_native_paths_else_in_libretranslate_shape(client):
    answer = client.get("/v1/nothing")
    assert answer.status_code == 404 and answer.json()["error"] == "not_found"
    answer = client.get("/nothing")
    assert answer.status_code == 404 and answer.json() == {"error": "Not Found"}
    assert ORIGIN not in answer.headers


def test_a_route_on_no_apis_router_is_refused_when_the_app_is_built():
    plain = APIRouter()

    @plain.get("/v1/plain")
    async def nowhere() -> dict:
        return {}

    with pytest.raises(TypeError, match="/v1/plain is on no API's router"):
        serve_apis(FastAPI(), [NATIVE.router(), plain], max_body_bytes=1000)
