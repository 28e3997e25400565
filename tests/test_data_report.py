"""The data report printed when training starts: what reading and filtering dropped, for the
training and the validation pairs, for files and for registry corpora alike (issue 27)."""

from functools import partial
from pathlib import Path

import pytest

from transformer.corpus.builtin import generate_pairs as generate_written_pairs
from transformer.corpus.registry import corpus_pairs, read_corpus
from transformer.training import data_setup
from transformer.run.config import DataConfig
from transformer.training.data_setup import prepare_data
from transformer.training.data_setup import data_report

generate_pairs = partial(generate_written_pairs, written_share=0)  # the plain corpus: tiny models learn it in a few steps

PAIRS = generate_pairs(300, seed=0)
LONG = " ".join(["le chat noir mange une pomme"] * 30)


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_validation_pairs_dropped_when_read_or_filtered_are_reported(tmp_path):
    """Empty validation lines and over-long validation pairs were counted in the statistics but
    never printed: the report said nothing about validation."""
    valid = PAIRS[:20] + [("", "empty source"), ("empty target", "  "), (LONG, "a long one"), (LONG, LONG)]
    cfg = DataConfig(corpus="files", train_src=_write(tmp_path / "train.fr", [f for f, _ in PAIRS[20:]]),
                     train_tgt=_write(tmp_path / "train.en", [e for _, e in PAIRS[20:]]),
                     valid_src=_write(tmp_path / "valid.fr", [f for f, _ in valid]),
                     valid_tgt=_write(tmp_path / "valid.en", [e for _, e in valid]), vocab_size=400, max_len=40)
    data = prepare_data(cfg)
    assert len(data.valid) == 20
    report = data_report(data.stats)
    assert "\n" not in report
    assert "280 training lines read, 0 with an empty side skipped" in report
    assert "24 validation lines read, 2 with an empty side skipped" in report
    assert "20 validation pairs kept, dropped 2 too long, 0 empty after tokenization" in report


def _tatoeba_dir(tmp_path: Path, lines: list[str]) -> Path:
    directory = tmp_path / "tatoeba"
    directory.mkdir()
    _write(directory / "eng-fra.txt", lines)
    return directory


def test_read_corpus_returns_the_read_statistics_corpus_pairs_threw_away(tmp_path):
    directory = _tatoeba_dir(tmp_path, ["Go.\tVa !", "\tVide.", "Hi.\t", "Run!\tCours !"])
    pairs, read = read_corpus("tatoeba", src="en", tgt="fr", split="all", directory=directory)
    assert pairs == [("Go.", "Va !"), ("Run!", "Cours !")]
    assert (read.n_read, read.n_kept, read.n_empty_skipped, read.n_empty_src, read.n_empty_tgt) == (4, 2, 2, 1, 1)
    assert corpus_pairs("tatoeba", src="en", tgt="fr", split="all", directory=directory) == pairs


def test_registry_corpora_report_their_read_statistics(tmp_path, monkeypatch):
    """``corpus_pairs`` threw the read statistics of registry corpora away: a training on Tatoeba
    or Multi30k never said how many lines were skipped."""
    en = [e for _, e in PAIRS] * 12  # enough distinct sources for the 1000 + 2000 held out
    fr = [f"{f} {i}" for i, (f, _) in enumerate(PAIRS * 12)]
    lines = [f"{e}\t{f}" for e, f in zip(en, fr)] + ["\tsans anglais", "no French\t", "\t"]
    directory = _tatoeba_dir(tmp_path, lines)
    monkeypatch.setattr(data_setup, "fetch", lambda name, local_dir=None: directory)
    data = prepare_data(DataConfig(corpus="tatoeba", src_lang="en", tgt_lang="fr", vocab_size=400))
    report = data_report(data.stats)
    assert f"{len(lines):,} lines read from eng-fra.txt (all splits), 3 with an empty side skipped" in report
    assert "validation pairs kept" in report and "corpus tatoeba:" in report
