"""Sphinx extension: the configuration reference, generated from the config dataclasses.

At ``builder-inited`` it walks ``transformer.run.config.DataConfig`` / ``TrainConfig``,
``transformer.config.ModelConfig`` and ``transformer.model.rnn_config.RNNConfig`` and writes
``docs/_generated/config-reference.md`` (included by ``training.md``): for every key its default
(read from the dataclass), its valid values (the ``Range`` a numeric field declares in its
metadata, read with ``transformer.config_dict.ranges``; the allowed names of a text setting from
the module's constant; ``true or false``) and its meaning (the field's comment in the source:
on its line, or the comment lines right above it). It also writes the preset tables.

Nothing here is copied by hand from the code: a new field, default or range shows up at the next
build. ``config_rows()`` is what ``tests/test_docs.py`` checks (every key has a meaning).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
from dataclasses import MISSING
from pathlib import Path
from typing import Any

GENERATED = "_generated"

# Fields that are set for you (from the tokenizer, or the section key); not run-config keys.
NOT_SET = {"src_vocab_size", "tgt_vocab_size", "extra", "architecture"}


# The meaning of fields whose declaration has no comment yet. A comment on the field in the code
# takes precedence; tests/test_docs.py checks that every key has a meaning from one or the other.
FALLBACK_MEANINGS: dict[tuple[str, str], str] = {
    ("DataConfig", "train_tgt"): "corpus=files: the target side of train_src, line by line",
    ("DataConfig", "valid_src"): "validation source file (plain or gzip); without it a seeded valid_fraction is held out",
    ("DataConfig", "valid_tgt"): "validation target file, line-aligned with valid_src",
    ("DataConfig", "builtin_valid"): "corpus=builtin: validation sentence pairs",
    ("DataConfig", "builtin_test"): "corpus=builtin: held-out test sentence pairs",
    ("DataConfig", "src_lang"): "source language code (registry corpora, sentence splitting)",
    ("DataConfig", "tgt_lang"): "target language code",
    ("DataConfig", "seed"): "seed of the built-in corpus and of the held-out splits",
    ("TrainConfig", "epochs"): "passes over the training data",
    ("TrainConfig", "adam_beta1"): "Adam's beta1 (paper 5.3: 0.9)",
    ("TrainConfig", "adam_beta2"): "Adam's beta2 (paper 5.3: 0.98)",
    ("TrainConfig", "adam_eps"): "Adam's epsilon (paper 5.3: 1e-9)",
    ("TrainConfig", "weight_decay"): "weight decay: Adam's L2 term (train.optimizer=adam) or AdamW's decoupled "
                                      "decay of the weight matrices (adamw); the paper has none",
    ("TrainConfig", "label_smoothing"): "label smoothing epsilon_ls (paper 5.4: 0.1)",
    ("TrainConfig", "device"): "\"auto\" (CUDA when available, else CPU), \"cpu\" or \"cuda\"",
    ("TrainConfig", "seed"): "seed of the weights' initialisation, dropout and the batch order",
    ("ModelConfig", "d_model"): "width of the residual stream and the embeddings (paper: 512)",
    ("ModelConfig", "n_heads"): "attention heads h (3.2.2; paper: 8)",
    ("ModelConfig", "d_ff"): "inner width of the feed-forward network (3.3; paper: 2048)",
    ("ModelConfig", "n_encoder_layers"): "encoder layers N (3.1; paper: 6)",
    ("ModelConfig", "n_decoder_layers"): "decoder layers N (3.1; paper: 6)",
    ("ModelConfig", "layer_norm_eps"): "epsilon of every LayerNorm",
    ("RNNConfig", "embed_dim"): "width of the token embeddings and of the attentional vector",
    ("RNNConfig", "n_encoder_layers"): "layers of the bidirectional encoder LSTM",
    ("RNNConfig", "n_decoder_layers"): "layers of the decoder LSTM",
    ("RNNConfig", "input_feeding"): "feed the previous attentional vector to the decoder LSTM (Luong et al. 3.3)",
    ("RNNConfig", "output_bias"): "a bias on the pre-softmax projection",
}


def _choices() -> dict[tuple[str, str], tuple[str, ...]]:
    """The allowed names of the text settings, from the constants the code validates them with."""
    from transformer import config as model_config
    from transformer.cpu.training_precision import TRAIN_PRECISIONS
    from transformer.model import rnn_config
    from transformer.run import config as run_config

    return {
        ("ModelConfig", "activation"): model_config.ACTIVATIONS,
        ("ModelConfig", "positional"): model_config.POSITIONAL,
        ("ModelConfig", "sinusoid_layout"): model_config.SINUSOID_LAYOUTS,
        ("RNNConfig", "score"): tuple(rnn_config.RNN_SCORES),
        ("DataConfig", "corpus"): run_config.CORPORA,
        ("TrainConfig", "precision"): TRAIN_PRECISIONS,
        ("TrainConfig", "device"): run_config.DEVICES,
        ("TrainConfig", "schedule"): run_config.SCHEDULES,
        ("TrainConfig", "optimizer"): run_config.OPTIMIZERS,
    }


def field_comments(cls: type) -> dict[str, str]:
    """The comment of each field of the dataclass ``cls``: the comment on the field's line(s), else the
    block of comment lines directly above it."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}  # line -> comment text
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.add(tok.start[0])
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        own = [comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1) if n in comments]
        above: list[str] = []
        line = node.lineno - 1
        while line in comments and line not in code_lines:
            above.insert(0, comments[line])
            line -= 1
        found[node.target.id] = " ".join(own or above)
    return found


def _default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return MISSING


def _show(value: Any) -> str:
    """A default as it is written in a YAML run config."""
    if value is MISSING:
        return "(required)"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, float) and (abs(value) < 1e-3 and value != 0):
        return f"`{value:g}`"
    return f"`{value}`"


def _valid(cls: type, f: dataclasses.Field, ranges: dict[str, Any], choices: dict) -> str:
    if f.name in ranges:
        return ranges[f.name].describe()
    names = choices.get((cls.__name__, f.name))
    if names:
        return "one of " + ", ".join(f"`{n}`" for n in names)
    default = _default(f)
    if isinstance(default, bool):
        return "`true` or `false`"
    if (cls.__name__, f.name) in (("TrainConfig", "freeze"), ("DataConfig", "mix")):
        from transformer.data.mixing import NAMED_CORPORA
        from transformer.run import config as run_config

        if f.name == "freeze":
            return "`null`, or parts separated by commas: " + ", ".join(f"`{n}`" for n in run_config.FREEZABLE)
        return ("`null`, or `NAME:WEIGHT` items separated by commas; a name is "
                + ", ".join(f"`{n}`" for n in NAMED_CORPORA) + " or the path of a `.tsv` file")
    if default is None:
        return "text (a path or a name), or `null`"
    if isinstance(default, str):
        return "text"
    return ""


def config_rows(cls: type) -> list[dict[str, str]]:
    """One row per field of ``cls``: key, default, valid values, meaning, and whether it is a run key."""
    from transformer import config_dict

    ranges = config_dict.ranges(cls) if hasattr(config_dict, "ranges") else {}
    choices = _choices()
    comments = field_comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        rows.append({"key": f.name, "default": _show(_default(f)), "valid": _valid(cls, f, ranges, choices),
                     "meaning": comments.get(f.name) or FALLBACK_MEANINGS.get((cls.__name__, f.name), ""), "settable": f.name not in NOT_SET})
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(rows: list[dict[str, str]], prefix: str) -> list[str]:
    lines = ["| key | default | valid values | meaning |", "|---|---|---|---|"]
    for row in rows:
        if row["settable"]:
            lines.append(f"| `{prefix}{row['key']}` | {row['default']} | {_cell(row['valid'])} | "
                         f"{_cell(row['meaning'])} |")
    return lines


def _presets_table(presets: dict[str, dict[str, Any]], cls: type) -> list[str]:
    """One row per preset: the value it sets for each key, or the class default it leaves."""
    keys = sorted({key for values in presets.values() for key in values})
    defaults = {f.name: _default(f) for f in dataclasses.fields(cls)}
    lines = ["| preset | " + " | ".join(f"`{k}`" for k in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, values in presets.items():
        lines.append(f"| `{name}` | " + " | ".join(str(values.get(k, defaults.get(k, ""))) for k in keys) + " |")
    return lines


def _docstring(cls: type) -> str:
    return " ".join((inspect.getdoc(cls) or "").split())


def config_reference() -> str:
    """The Markdown of the configuration reference."""
    from transformer.config import PRESETS, ModelConfig
    from transformer.model.rnn_config import RNN_PRESETS, RNNConfig
    from transformer.run.config import DataConfig, TrainConfig

    parts = [
        "<!-- generated by docs/_ext/configref.py from the config dataclasses; do not edit -->",
        "",
        "(config-data)=",
        "### `data`: where the text comes from",
        "",
        f"`DataConfig` ({{py:class}}`transformer.run.config.DataConfig`): {_docstring(DataConfig)}",
        "",
        *_table(config_rows(DataConfig), "data."),
        "",
        "(config-train)=",
        "### `train`: the optimisation recipe",
        "",
        f"`TrainConfig` ({{py:class}}`transformer.run.config.TrainConfig`): {_docstring(TrainConfig)}",
        "",
        *_table(config_rows(TrainConfig), "train."),
        "",
        "(config-model)=",
        "### `model`: the Transformer",
        "",
        f"`ModelConfig` ({{py:class}}`transformer.config.ModelConfig`): {_docstring(ModelConfig)} "
        "`model.preset` (default `small`) picks the sizes below, and any key given overrides the preset. "
        "The defaults in this table are `ModelConfig`'s own (the paper's base model), which a preset replaces.",
        "",
        *_table(config_rows(ModelConfig), "model."),
        "",
        "Presets (`model.preset`; `base` and `big` are the paper's Table 3 rows, `small` trains on a CPU "
        "in minutes, `tiny` is for tests):",
        "",
        *_presets_table(PRESETS, ModelConfig),
        "",
        "(config-rnn)=",
        "### `model` with `model=rnn`: the recurrent baseline",
        "",
        f"`RNNConfig` ({{py:class}}`transformer.model.rnn_config.RNNConfig`): {_docstring(RNNConfig)}",
        "",
        *_table(config_rows(RNNConfig), "model."),
        "",
        "RNN presets (`model.preset` with `model=rnn`):",
        "",
        *_presets_table(RNN_PRESETS, RNNConfig),
        "",
    ]
    return "\n".join(parts)


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it already holds it (so Sphinx sees no change), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _generate(app: Any) -> None:
    write_if_changed(Path(app.srcdir) / GENERATED / "config-reference.md", config_reference())


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _generate)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
