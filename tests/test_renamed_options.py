"""An option has one name in every command: each old spelling is refused in one line that names the
new one (exit status 2), and no command's help shows it."""

import re

import pytest

from transformer.cli import build_parser, main

RENAMED = [
    *[(command, "--int8", "--precision int8") for command in ("translate", "evaluate", "calibrate", "serve")],
    *[(command, "--bf16", "--precision bf16") for command in ("translate", "evaluate", "calibrate", "serve", "info")],
    ("export", "--quantization", "--precision"),
    ("train", "--src", "--src-lang"), ("train", "--tgt", "--tgt-lang"),
    ("export", "--from-code", "--src-lang"), ("export", "--to-code", "--tgt-lang"),
    ("serve", "--beam-size", "--beam"), ("attend", "--beam", "--beam-search"),
    ("average", "--out", "--output"),
]


@pytest.mark.parametrize("command, old, new", RENAMED, ids=[f"{c} {o}" for c, o, _ in RENAMED])
def test_an_old_spelling_is_refused_with_its_new_name(command, old, new, capsys):
    assert main([command, old]) == 2
    assert main([command, f"{old}=4"]) == 2  # with a value too (--beam-size=4, --out=FILE)
    out, err = capsys.readouterr()
    line = f"transformer {command}: error: {old} was renamed: use {new}\n"
    assert out == "" and err == line * 2
    help_text = build_parser()._subparsers._group_actions[0].choices[command].format_help()
    assert not re.search(re.escape(old) + r"(?![\w-])", help_text)
    assert re.search(re.escape(new.split()[0]) + r"(?![\w-])", help_text)  # the new name is there instead


def test_the_new_names_agree_across_commands():
    """A language is --src-lang/--tgt-lang, a beam size --beam, an output file --output."""
    parser = build_parser()
    train = parser.parse_args(["train", "--src-lang", "de", "--tgt-lang", "en"])
    assert (train.src_lang, train.tgt_lang) == ("de", "en")
    export = parser.parse_args(["export", "RUN", "--format", "argos", "OUT", "--src-lang", "de", "--tgt-lang", "en"])
    assert (export.src_lang, export.tgt_lang) == ("de", "en")
    assert parser.parse_args(["serve", "RUN", "--beam", "2"]).beam == 2
    assert parser.parse_args(["translate", "RUN", "--beam", "2"]).beam == 2
    assert parser.parse_args(["attend", "RUN", "x", "--beam-search"]).beam_search
    assert parser.parse_args(["average", "RUN", "--output", "f"]).output == "f"
