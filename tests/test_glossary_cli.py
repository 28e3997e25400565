"""``transformer translate --glossary`` and ``evaluate --glossary``: terms placed, bad files named
by their line, terms that cannot be placed reported on standard error and in --json."""

import json
import subprocess
import sys
from functools import partial

import pytest
import torch

from transformer.config import preset
from transformer.corpus.builtin import generate_pairs as generate_written_pairs
from transformer.model import Transformer
from transformer.run.model import save_model
from transformer.text import Vocabularies

generate_pairs = partial(generate_written_pairs, written_share=0)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("run")
    pairs = generate_pairs(400, seed=1)
    vocab = Vocabularies.train(pairs, vocab_size=400)
    torch.manual_seed(0)
    save_model(Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size)), directory)
    vocab.save(directory)
    return directory


def cli(*args):
    return subprocess.run([sys.executable, "-m", "transformer.cli", *map(str, args)], capture_output=True, text=True)


def test_translate_places_the_terms_of_the_glossary(run_dir, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("# our terms\nchat\tkitty cat\npomme\tapple\n", encoding="utf-8")
    done = cli("translate", run_dir, "le chat noir dort. il pleut.", "nous mangeons une pomme", "--glossary", terms,
               "--threads", 1)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert "kitty cat" in first and "apple" in second
    lines = cli("translate", run_dir, "le chat noir dort", "--segment", "lines", "--glossary", terms, "--threads", 1)
    assert lines.returncode == 0 and "kitty cat" in lines.stdout


def test_a_bad_glossary_file_is_refused_naming_its_line(run_dir, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("chat\tkitty cat\npomme\tapple\tfruit\n", encoding="utf-8")
    done = cli("translate", run_dir, "le chat", "--glossary", terms)
    assert done.returncode != 0 and "terms.tsv:2" in done.stderr and "Traceback" not in done.stderr
    missing = cli("evaluate", run_dir, "--src", terms, "--ref", terms, "--glossary", tmp_path / "none.tsv")
    assert missing.returncode != 0 and "none.tsv" in missing.stderr and "Traceback" not in missing.stderr


def test_a_term_that_cannot_be_placed_is_named_on_stderr_and_in_json(run_dir, tmp_path):
    terms = tmp_path / "terms.tsv"
    long = "the very small and quite black kitty cat of the old house"  # more tokens than the sentence
    terms.write_text(f"chat\t{long}\n", encoding="utf-8")
    done = cli("translate", run_dir, "il pleut. le chat noir dort.", "--glossary", terms, "--json", "--max-len-b", 0,
               "--threads", 1)
    assert done.returncode == 0, done.stderr
    assert f"line 1: the glossary's 'chat' -> '{long}' could not be placed" in done.stderr
    record = json.loads(done.stdout)
    assert "missing_terms" not in record["sentences"][0]
    assert record["sentences"][1]["missing_terms"] == [{"source": "chat", "target": long}]


def test_greedy_with_a_glossary_is_refused_in_one_line(run_dir, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("chat\tkitty cat\n", encoding="utf-8")
    done = cli("translate", run_dir, "le chat noir dort", "--glossary", terms, "--greedy")
    assert done.returncode != 0 and "need beam search" in done.stderr and "Traceback" not in done.stderr


def test_scores_need_a_calibrated_run(run_dir):
    done = cli("translate", run_dir, "il pleut", "--scores")
    assert done.returncode != 0 and "transformer calibrate" in done.stderr and "Traceback" not in done.stderr


def test_evaluate_takes_a_glossary(run_dir, tmp_path):
    (tmp_path / "src").write_text("le chat noir dort\nil pleut\n", encoding="utf-8")
    (tmp_path / "ref").write_text("the black cat sleeps\nit rains\n", encoding="utf-8")
    terms = tmp_path / "terms.tsv"
    terms.write_text("chat\tkitty cat\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    done = cli("evaluate", run_dir, "--src", tmp_path / "src", "--ref", tmp_path / "ref", "--glossary", terms,
               "--output", out, "--threads", 1)
    assert done.returncode == 0, done.stderr
    assert "kitty cat" in out.read_text(encoding="utf-8").splitlines()[0]
