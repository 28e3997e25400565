"""Fuzzing the translation API from its own OpenAPI schema (schemathesis): no request gives a 5xx.

Schemathesis generates valid and invalid requests for every operation of ``/openapi.json`` and
checks each answer: never a server error, and every answer (errors included) matches the status
codes, content types and bodies the schema declares. The limits are small so each example
decodes at most a few tokens; the number of examples is bounded to keep the test well under a
minute.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.translate.translator import Translator

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


OPERATIONS = [("POST", "/v1/translate"), ("POST", "/v1/attention"), ("GET", "/health"), ("GET", "/v1/model"),
              ("GET", "/v1/models")]


@pytest.fixture(scope="module")
def api_schema(tiny_run):
    translator = Translator.from_run_dir(tiny_run())
    limits = ServeLimits(max_chars=80, max_texts=3, max_input_tokens=32, max_output_tokens=6, max_beam_size=3,
                         max_body_bytes=2048, batch_wait_ms=0)
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(translator, limits))


def test_the_schema_lists_every_operation(api_schema):
    assert sorted((op.method.upper(), op.path) for op in (r.ok() for r in api_schema.get_all_operations())) \
        == sorted(OPERATIONS)


# Valid and invalid requests for the POST operations; the GET operations take no input.
CASES = [(m, p, mode) for m, p in OPERATIONS for mode in
         ([GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if m == "POST" else [GenerationMode.POSITIVE])]


def rejected(ctx, response, case):
    """``negative_data_rejection``, counting 413 as a rejection too: a body past ``max_body_bytes``
    is refused before its content is read, whatever it holds."""
    if response.status_code == 413:
        return None
    return negative_data_rejection(ctx, response, case)


@pytest.mark.parametrize("method, path, mode", CASES)
def test_no_server_errors(api_schema, method, path, mode):
    operation = api_schema[path][method]
    examples = 60 if method == "POST" else 3

    checks = CHECKS + ([rejected] if mode == GenerationMode.NEGATIVE else [])
    statuses: list[int] = []

    @settings(max_examples=examples, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), database=None)
    @given(data=st.data())
    def run(data):
        case = data.draw(operation.as_strategy(generation_mode=mode))
        statuses.append(case.call_and_validate(checks=checks).status_code)

    run()
    if mode == GenerationMode.POSITIVE:
        assert 200 in statuses  # the generated requests reach the model, not only the validation
    else:
        assert statuses and all(400 <= s < 500 for s in statuses)
