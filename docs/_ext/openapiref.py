"""Sphinx extension: the HTTP API reference, generated from the server's OpenAPI schema.

At ``builder-inited`` it builds the FastAPI app of ``transformer serve``
(:func:`transformer.serve.app.create_app`) around a tiny random model with a small BPE tokenizer
(a second or two; the CPU kernels are left off, nothing is compiled), asks it for its OpenAPI
schema and writes into ``docs/_generated/``:

* ``openapi.json``: the schema, offered for download on the page;
* ``http-api-reference.md`` (included by ``http-api.md``): a table of the endpoints, then for each
  request and response model a table of its fields (type, required, default, valid values,
  meaning);
* ``serve-limits.md``: the server's limits (:class:`transformer.serve.limits.ServeLimits`) with
  their defaults and meanings.

The schema's limits (e.g. ``maxLength`` of a text) are those of the default ``ServeLimits``, as
``transformer serve`` starts without options.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

from configref import GENERATED, write_if_changed

REF = "#/components/schemas/"


def openapi_schema() -> dict[str, Any]:
    """The OpenAPI schema of the server's app, built around a tiny random model."""
    previous = os.environ.get("TRANSFORMER_FUSED_CPU")
    os.environ["TRANSFORMER_FUSED_CPU"] = "0"  # no kernel build for a model that never translates here
    try:
        import torch

        from transformer.config import preset
        from transformer.corpus.builtin import generate_pairs
        from transformer.model import Transformer
        from transformer.serve.app import create_app
        from transformer.text import Vocabularies
        from transformer.translate.translator import Translator

        vocab = Vocabularies.train(generate_pairs(200, seed=1), vocab_size=300)
        torch.manual_seed(0)
        model = Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size))
        translator = Translator(model, vocab, src_lang="fr", tgt_lang="en")
        try:
            return create_app(translator).openapi()
        finally:
            translator.close()
    finally:
        if previous is None:
            os.environ.pop("TRANSFORMER_FUSED_CPU", None)
        else:
            os.environ["TRANSFORMER_FUSED_CPU"] = previous


def _label(name: str) -> str:
    return "openapi-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _type(schema: dict[str, Any]) -> str:
    """A JSON schema's type in a few words, with links to the named models."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(REF)
        return f"[{name}](#{_label(name)})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type(option) for option in schema[key])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
        return f"object of {_type(schema['additionalProperties'])}"
    return "null" if kind == "null" else str(kind)


_BOUNDS = (("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"), ("exclusiveMaximum", "< {}"),
           ("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
           ("minItems", "at least {} items"), ("maxItems", "at most {} items"), ("pattern", "matches `{}`"))


def _bounds(schema: dict[str, Any]) -> list[str]:
    found = []
    for key, text in _BOUNDS:
        if key in schema:
            value = schema[key]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            found.append(text.format(value))
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key, []):
            found += [f"{_type(option)}: {b}" if len(schema[key]) > 1 else b for b in _bounds(option)]
    if schema.get("type") == "array":
        found += [f"each {b}" for b in _bounds(schema.get("items", {}))]
    return found


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fields_table(schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    if not properties:
        return []
    required = set(schema.get("required", []))
    lines = ["| field | type | required | default | valid values | meaning |", "|---|---|---|---|---|---|"]
    for name, prop in properties.items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        lines.append(f"| `{name}` | {_cell(_type(prop))} | {'yes' if name in required else ''} | {default} | "
                     f"{_cell('; '.join(_bounds(prop)))} | {_cell(prop.get('description', ''))} |")
    if schema.get("additionalProperties") is False:
        lines += ["", "Other fields are refused (422)."]
    return lines


def _body_schema(content: dict[str, Any]) -> dict[str, Any] | None:
    return content.get("application/json", {}).get("schema")


def http_api_reference(schema: dict[str, Any]) -> str:
    """The Markdown of the endpoint and model tables."""
    lines = ["<!-- generated by docs/_ext/openapiref.py from create_app(...).openapi(); do not edit -->", "",
             f"OpenAPI {schema.get('openapi', '')}, API version {schema.get('info', {}).get('version', '')}.", "",
             "| method | path | what | request body | answers |", "|---|---|---|---|---|"]
    operations = [(method.upper(), path, op) for path, item in schema.get("paths", {}).items()
                  for method, op in item.items()]
    for method, path, op in operations:
        body = _body_schema(op.get("requestBody", {}).get("content", {}))
        codes = ", ".join(op.get("responses", {}))
        lines.append(f"| `{method}` | `{path}` | {_cell(op.get('summary', ''))} | {_type(body) if body else ''} | "
                     f"{codes} |")
    for method, path, op in operations:
        lines += ["", f"### `{method} {path}`", "", op.get("summary", "") + ".", ""]
        if op.get("description"):
            lines += [op["description"].strip(), ""]
        body = _body_schema(op.get("requestBody", {}).get("content", {}))
        if body:
            lines += [f"Request body: {_type(body)}.", ""]
        lines += ["| status | meaning | body |", "|---|---|---|"]
        for code, response in op.get("responses", {}).items():
            answer = _body_schema(response.get("content", {}))
            shown = _type(answer) if answer and ("$ref" in answer or "properties" not in answer) else \
                ("the attention document (below)" if answer else "")
            lines.append(f"| {code} | {_cell(response.get('description', ''))} | {shown} |")
        inline = _body_schema(op.get("responses", {}).get("200", {}).get("content", {}))
        if inline and "properties" in inline:
            lines += ["", f"The attention document ({_cell(inline.get('title', 'schema'))}):", "",
                      *_fields_table(inline)]
    lines += ["", "### Models", ""]
    for name, model in schema.get("components", {}).get("schemas", {}).items():
        lines += [f"({_label(name)})=", f"#### {name}", ""]
        if model.get("description"):
            lines += [" ".join(model["description"].split()), ""]
        table = _fields_table(model)
        lines += table if table else [f"Type: {_type(model)}."]
        lines.append("")
    return "\n".join(lines)


def serve_limits() -> str:
    """The Markdown table of :class:`ServeLimits`: field, default, meaning (from its docstring)."""
    from transformer.serve.limits import ServeLimits

    meanings: dict[str, str] = {}
    current = None
    for line in (inspect.getdoc(ServeLimits) or "").splitlines():
        match = re.match(r"(\w+): (.*)", line.strip())
        if match and match.group(1) in {f.name for f in dataclasses.fields(ServeLimits)}:
            current = match.group(1)
            meanings[current] = match.group(2)
        elif current and line.startswith((" ", "\t")) and line.strip():
            meanings[current] += " " + line.strip()
        else:
            current = None
    from cliref import subcommand_parsers

    options = {action.dest: action.option_strings[0] for action in subcommand_parsers()["serve"]._actions
               if action.option_strings}
    lines = ["<!-- generated by docs/_ext/openapiref.py from ServeLimits; do not edit -->", "",
             "| limit | `transformer serve` option | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(ServeLimits):
        option = f"`{options[f.name]}`" if f.name in options else ""
        lines.append(f"| `{f.name}` | {option} | `{f.default}` | {_cell(meanings.get(f.name, ''))} |")
    return "\n".join(lines) + "\n"


def _generate(app: Any) -> None:
    out = Path(app.srcdir) / GENERATED
    schema = openapi_schema()
    write_if_changed(out / "openapi.json", json.dumps(schema, indent=2, sort_keys=False) + "\n")
    write_if_changed(out / "http-api-reference.md", http_api_reference(schema))
    write_if_changed(out / "serve-limits.md", serve_limits())


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _generate)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
