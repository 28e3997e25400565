"""The paper's experiment on a small stand-in: WMT14 archives, sacreBLEU test sets, the recipes.

A local HTTP server on 127.0.0.1 serves stand-in archives packed the way statmt.org's are (a few
thousand lines of generated parallel text); the registry entries' URLs and sha256 digests are
replaced by the stand-ins' for each test. sacreBLEU's cache is stood in for by a directory laid out
as sacreBLEU lays out its own. Nothing here touches the internet.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import random
import re
import socket
import tarfile
from pathlib import Path

import pytest
from file_server import server  # noqa: F401 (a fixture)
import torch
import yaml

from transformer.cli import main
from transformer.corpus import registry
from transformer.corpus.download import download_verified
from transformer.corpus.files import CorpusError, read_archive_parallel
from transformer.corpus.registry import DATA_ENV, REGISTRY, WMT14_PARTS, RemoteFile, corpus_pairs, fetch
from transformer.corpus.testsets import sacrebleu_pairs
from transformer.errors import UserError
from transformer.recipes import load_recipe, recipe_names

WORDS_EN = "the a house cat dog sees small big red green runs sleeps old new".split()
WORDS_DE = "das ein haus katze hund sieht klein gross rot gruen rennt schlaeft alt neu".split()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parallel_lines(n: int, seed: int) -> tuple[bytes, bytes]:
    """``n`` generated English / German lines, word for word translations of each other."""
    rng = random.Random(seed)
    en, de = [], []
    for _ in range(n):
        idx = [rng.randrange(len(WORDS_EN)) for _ in range(rng.randint(3, 9))]
        en.append(" ".join(WORDS_EN[i] for i in idx))
        de.append(" ".join(WORDS_DE[i] for i in idx))
    return ("\n".join(en) + "\n").encode(), ("\n".join(de) + "\n").encode()


def tar_bytes(members: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def en_de_archives(lines: tuple[int, int, int] = (1500, 1000, 500)) -> dict[str, bytes]:
    """Stand-ins for the three en-de archives, members named as in the published ones."""
    out = {}
    for (archive, member), n, seed in zip(WMT14_PARTS["wmt14-en-de"], lines, range(3)):
        en, de = parallel_lines(n, seed)
        others = {"training/europarl-v7.fr-en.fr": b"x\n"} if "europarl" in archive else {}
        out[archive] = tar_bytes({member.format(lang="de"): de, member.format(lang="en"): en, **others})
    return out


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.delenv(DATA_ENV, raising=False)
    monkeypatch.setenv("TRANSFORMER_CACHE", str(tmp_path / "cache"))


def stand_in_entry(monkeypatch, url: str, archives: dict[str, bytes], name: str = "wmt14-en-de") -> None:
    """Point the registry entry ``name`` at the stand-in archives served at ``url``."""
    info = REGISTRY[name]
    files = tuple(RemoteFile(f.name, f"{url}/wmt/{f.name}", sha(archives[f.name])) for f in info.files)
    monkeypatch.setitem(REGISTRY, name, dataclasses.replace(info, files=files))


# --- the registry entries ---------------------------------------------------------------------


def test_wmt14_entries_name_the_published_archives_and_their_sha256():
    de, fr = REGISTRY["wmt14-en-de"], REGISTRY["wmt14-en-fr"]
    assert de.languages == ("en", "de") and fr.languages == ("en", "fr")
    assert de.splits == fr.splits == ("train",)
    assert {f.name for f in de.files} == {
        "training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz", "training-parallel-nc-v9.tgz"}
    assert {f.name for f in fr.files} == {f.name for f in de.files} | {"training-parallel-un.tgz",
                                                                        "training-giga-fren.tar"}
    digests = {f.name: f.sha256 for f in fr.files}
    # TensorFlow Datasets' url_checksums (wmt13/14/15_translate.txt) and Hugging Face's wmt14 dataset_infos.json
    assert digests["training-parallel-europarl-v7.tgz"].startswith("0224c7c710c8a063")
    assert digests["training-parallel-commoncrawl.tgz"].startswith("c7a74e2ea01ac6c9")
    assert digests["training-parallel-nc-v9.tgz"].startswith("cb8953f292298e68")
    assert digests["training-parallel-un.tgz"].startswith("29141b5c1eba149a")
    assert digests["training-giga-fren.tar"].startswith("3ff8319f69193935")
    for f in fr.files:
        assert re.fullmatch(r"http://www\.statmt\.org/wmt1[034]/" + re.escape(f.name), f.url)
        assert f.member is None and f.local_sha256 == f.sha256  # kept whole: no member digests are published
    assert "Bojar" in de.citation


# --- tar members: download, verification, reading ---------------------------------------------


def test_tar_member_extracted_verified_and_atomic(server, tmp_path):
    handler, url = server
    text = b"Hallo Welt\n" * 100
    archive = tar_bytes({"./training/a.de": text, "training/a.en": b"hello world\n" * 100})
    handler.files["a.tgz"] = archive
    dest = download_verified(f"{url}/a.tgz", tmp_path / "d" / "a.de", sha(archive), member="training/a.de",
                             member_sha256=sha(text), progress=False)
    assert dest.read_bytes() == text and sorted(p.name for p in dest.parent.iterdir()) == ["a.de"]
    with pytest.raises(CorpusError, match=r"member 'training/a.de': sha256 mismatch: expected 0{64}"):
        download_verified(f"{url}/a.tgz", tmp_path / "e" / "a.de", sha(archive), member="training/a.de",
                          member_sha256="0" * 64, progress=False)
    with pytest.raises(CorpusError, match=r"the archive has no member 'training/b.de' \(it has: training/a.de, "):
        download_verified(f"{url}/a.tgz", tmp_path / "e" / "b.de", sha(archive), member="training/b.de",
                          member_sha256="0" * 64, progress=False)
    cut = archive[: len(archive) // 2]  # verified by its own (wrong) digest, so only the extraction can fail
    handler.files["cut.tgz"] = cut
    with pytest.raises(CorpusError, match=r"cannot extract 'training/a.en': not a zip or tar archive, or a truncated"):
        download_verified(f"{url}/cut.tgz", tmp_path / "e" / "a.en", sha(cut), member="training/a.en",
                          member_sha256="0" * 64, progress=False)
    assert list((tmp_path / "e").iterdir()) == []  # nothing left behind


def test_read_archive_parallel_gzip_members_and_misalignment(tmp_path):
    path = tmp_path / "giga.tar"
    path.write_bytes(tar_bytes({"giga.en.gz": gzip.compress(b"one\ntwo\n\n"), "giga.fr.gz": gzip.compress(b"un\ndeux\nx\n")},
                               mode="w"))
    pairs, stats = read_archive_parallel(path, "giga.en.gz", "giga.fr.gz")
    assert pairs == [("one", "un"), ("two", "deux")]
    assert (stats.n_read, stats.n_empty_skipped, stats.gzipped) == (3, 1, (True, True))
    path.write_bytes(tar_bytes({"a.en": b"one\ntwo\n", "a.fr": b"un\n"}))
    with pytest.raises(CorpusError, match=r"line counts differ: .*a\.en has 2 lines but .*a\.fr has 1"):
        read_archive_parallel(path, "a.en", "a.fr")
    en, fr = parallel_lines(3000, 5)
    whole = tar_bytes({"a.en": en, "a.fr": fr})
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CorpusError, match="cannot read the archive .*truncated or corrupt"):
        read_archive_parallel(path, "a.en", "a.fr")


def test_download_verify_and_read_the_stand_in(server, tmp_path, monkeypatch):
    handler, url = server
    archives = en_de_archives()
    handler.files.update(archives)
    stand_in_entry(monkeypatch, url, archives)
    directory = fetch("wmt14-en-de", progress=False)
    assert sorted(p.name for p in directory.iterdir()) == sorted(archives)
    pairs = corpus_pairs("wmt14-en-de", src="en", tgt="de", split="train", directory=directory)
    assert len(pairs) == 3000
    en, de = parallel_lines(1500, 0)
    assert pairs[0] == (en.decode().split("\n")[0], de.decode().split("\n")[0])
    assert pairs[1500] == tuple(s.decode().split("\n")[0] for s in parallel_lines(1000, 1))  # commoncrawl next
    de_en = corpus_pairs("wmt14-en-de", src="de", tgt="en", split="train", directory=directory)
    assert de_en[0] == pairs[0][::-1]
    # a local copy laid out as <root>/<corpus>/<file> is verified and used instead of downloading
    assert fetch("wmt14-en-de", local_dir=directory.parent, progress=False) == directory
    (directory / "training-parallel-nc-v9.tgz").write_bytes(b"not it")
    with pytest.raises(CorpusError, match=r"training-parallel-nc-v9\.tgz: sha256 mismatch"):
        fetch("wmt14-en-de", local_dir=directory.parent, progress=False)


def test_corrupted_and_truncated_archives_refused_nothing_left(server, tmp_path, monkeypatch):
    handler, url = server
    archives = en_de_archives((300, 200, 100))
    stand_in_entry(monkeypatch, url, archives)
    handler.files.update(archives)
    bad = bytearray(archives["training-parallel-nc-v9.tgz"])
    bad[len(bad) // 2] ^= 0xFF
    handler.files["training-parallel-nc-v9.tgz"] = bytes(bad)
    with pytest.raises(CorpusError, match=r"training-parallel-nc-v9\.tgz: sha256 mismatch: expected"):
        fetch("wmt14-en-de", progress=False)
    target = tmp_path / "cache" / "wmt14-en-de"
    assert "training-parallel-nc-v9.tgz" not in [p.name for p in target.iterdir()]
    assert not [p for p in target.iterdir() if p.name.endswith(".part")]
    handler.files["training-parallel-nc-v9.tgz"] = archives["training-parallel-nc-v9.tgz"]
    handler.truncate.add("training-parallel-nc-v9.tgz")
    with pytest.raises(CorpusError, match=r"was cut short: got \d+ of \d+ bytes"):
        fetch("wmt14-en-de", progress=False)
    assert sorted(p.name for p in target.iterdir()) == [  # the verified ones stay
        "training-parallel-commoncrawl.tgz", "training-parallel-europarl-v7.tgz"]


def test_data_download_command_with_the_stand_in(server, tmp_path, monkeypatch, capsys):
    handler, url = server
    archives = en_de_archives((30, 20, 10))
    handler.files.update(archives)
    stand_in_entry(monkeypatch, url, archives)
    assert main(["data", "download", "wmt14-en-de", "--cache-dir", str(tmp_path / "c")]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(tmp_path / "c" / "wmt14-en-de")
    assert "WMT14 en-de training data" in captured.err


# --- sacreBLEU test sets ----------------------------------------------------------------------


def sacrebleu_text_cache(root: Path, name: str, pair: str, n: int = 12, seed: int = 7) -> tuple[list[str], list[str]]:
    """sacreBLEU's cache layout of the plain text of ``name`` for ``pair`` (what --echo reads)."""
    en, de = (b.decode().splitlines()[:n] for b in parallel_lines(n, seed))
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{name.replace('/', '_')}.{pair}"
    (directory / f"{stem}.src").write_text("\n".join(en) + "\n")
    (directory / f"{stem}.ref").write_text("\n".join(de) + "\n")
    return en, de


def sgm(lines: list[str], kind: str) -> bytes:
    body = "".join(f'<seg id="{i + 1}">{line}</seg>\n' for i, line in enumerate(lines))
    return f'<{kind}set setid="newstest2014">\n<doc sysid="ref" docid="d1" genre="news" origlang="en">\n{body}</doc>\n</{kind}set>\n'.encode()


def test_sacrebleu_test_set_from_cached_text(tmp_path, monkeypatch):
    en, de = sacrebleu_text_cache(tmp_path, "wmt14/full", "en-de")
    monkeypatch.setenv("SACREBLEU", str(tmp_path))
    pairs = sacrebleu_pairs("wmt14/full", src="en", tgt="de", download=False)
    assert pairs == list(zip(en, de))
    with pytest.raises(CorpusError, match=r"has no language pair en-xx; it has .*en-de"):
        sacrebleu_pairs("wmt14/full", src="en", tgt="xx")
    with pytest.raises(CorpusError, match=r"unknown sacreBLEU test set 'wmt41'"):
        sacrebleu_pairs("wmt41", src="en", tgt="de")


def test_sacrebleu_test_set_from_unpacked_raw_files(tmp_path):
    en, de = (b.decode().splitlines() for b in parallel_lines(5, 3))
    raw = tmp_path / "wmt14" / "full" / "raw" / "test-full"
    raw.mkdir(parents=True)
    (raw / "newstest2014-deen-src.en.sgm").write_bytes(sgm(en, "src"))
    (raw / "newstest2014-deen-ref.de.sgm").write_bytes(sgm(de, "ref"))
    assert sacrebleu_pairs("wmt14/full", src="en", tgt="de", cache_dir=tmp_path, download=False) == list(zip(en, de))
    assert (tmp_path / "wmt14" / "full" / "wmt14_full.en-de.ref").is_file()  # as sacreBLEU itself writes it


def test_sacrebleu_test_set_neither_cached_nor_downloadable(tmp_path):
    with pytest.raises(CorpusError) as err:
        sacrebleu_pairs("wmt14/full", src="en", tgt="de", cache_dir=tmp_path, download=False)
    message = str(err.value)
    assert "\n" not in message and "is not in" in message and "$SACREBLEU" in message
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from sacrebleu.dataset import DATASETS
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

    dead = FakeSGMLDataset("wmt14/full", data=[f"http://127.0.0.1:{port}/test-full.tgz"], md5=["0" * 32],
                           langpairs=DATASETS["wmt14/full"].langpairs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(DATASETS, "wmt14/full", dead)
        with pytest.raises(CorpusError, match=r"could not download http://127\.0\.0\.1:\d+/test-full\.tgz: .*\$SACREBLEU"):
            sacrebleu_pairs("wmt14/full", src="en", tgt="de", cache_dir=tmp_path, timeout=5)
    assert [p.name for p in (tmp_path / "wmt14" / "full" / "raw").iterdir()] == []


def test_sacrebleu_test_set_downloaded_md5_checked(server, tmp_path, monkeypatch):
    from sacrebleu.dataset import DATASETS
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

    handler, url = server
    en, de = (b.decode().splitlines() for b in parallel_lines(6, 4))
    archive = tar_bytes({"test-full/newstest2014-deen-src.en.sgm": sgm(en, "src"),
                         "test-full/newstest2014-deen-ref.de.sgm": sgm(de, "ref")})
    handler.files["test-full.tgz"] = archive
    langpairs = DATASETS["wmt14/full"].langpairs
    wrong = FakeSGMLDataset("wmt14/full", data=[f"{url}/test-full.tgz"], md5=["0" * 32], langpairs=langpairs)
    monkeypatch.setitem(DATASETS, "wmt14/full", wrong)
    with pytest.raises(CorpusError, match=r"md5 mismatch: expected 0{32}, got [0-9a-f]{32}; nothing was saved"):
        sacrebleu_pairs("wmt14/full", src="en", tgt="de", cache_dir=tmp_path)
    assert list((tmp_path / "wmt14" / "full" / "raw").iterdir()) == []
    right = FakeSGMLDataset("wmt14/full", data=[f"{url}/test-full.tgz"], md5=[hashlib.md5(archive).hexdigest()],
                            langpairs=langpairs)
    monkeypatch.setitem(DATASETS, "wmt14/full", right)
    assert sacrebleu_pairs("wmt14/full", src="en", tgt="de", cache_dir=tmp_path) == list(zip(en, de))
    assert (tmp_path / "wmt14" / "full" / "raw" / "wmt14_full.test-full.tgz").is_file()  # sacreBLEU's name for it


# --- the recipes ------------------------------------------------------------------------------


PAPER = {  # Vaswani et al. 2017: sections 5.1-5.4, 6.1 and Table 3
    "wmt14-en-de-base": dict(preset="base", dropout=0.1, steps=100_000, vocab=37_000, last=5, tgt="de"),
    "wmt14-en-de-big": dict(preset="big", dropout=0.3, steps=300_000, vocab=37_000, last=20, tgt="de"),
    "wmt14-en-fr-base": dict(preset="base", dropout=0.1, steps=100_000, vocab=32_000, last=5, tgt="fr"),
    "wmt14-en-fr-big": dict(preset="big", dropout=0.1, steps=300_000, vocab=32_000, last=20, tgt="fr"),
}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_recipe_values_are_the_papers(name):
    paper = PAPER[name]
    for world in (1, 2, 8):
        cfg = load_recipe(name, world_size=world)
        d, t = cfg.data, cfg.train
        # 25,000 source + 25,000 target tokens a step across the processes
        assert d.max_tokens * t.accumulate * world == 50_000
        assert (d.corpus, d.src_lang, d.tgt_lang) == (f"wmt14-en-{paper['tgt']}", "en", paper["tgt"])
        assert (d.valid_set, d.test_set) == ("wmt13", "wmt14/full")
        assert d.vocab_size == paper["vocab"] and d.joint_vocab
        assert cfg.model["preset"] == paper["preset"] and cfg.model["dropout"] == paper["dropout"]
        assert t.effective_schedule() == ("noam", 4000) and t.lr_scale == 1.0
        assert (t.adam_beta1, t.adam_beta2, t.adam_eps) == (0.9, 0.98, 1e-9)
        assert t.label_smoothing == 0.1 and t.max_steps == paper["steps"]
        assert t.average_last == paper["last"] <= t.keep_last and t.save_every > 0
        assert t.max_steps / t.save_every >= t.average_last  # the averaged checkpoints are the run's last
    assert name in recipe_names()
    text = (Path(load_recipe.__code__.co_filename).parent / f"{name}.yaml").read_text()
    assert "recipe" in yaml.safe_load(text)


def test_recipe_processes_must_share_the_batches(tmp_path):
    with pytest.raises(ValueError, match=r"takes 8 batches per step, which 3 processes cannot share: use 1, 2, 4, 8"):
        load_recipe("wmt14-en-de-base", world_size=3)
    assert load_recipe("wmt14-en-de-base", ["train.accumulate=2"], world_size=3).train.accumulate == 2
    with pytest.raises(FileNotFoundError, match=r"no recipe 'wmt14-en-de-huge': give one of wmt14-en-de-base"):
        load_recipe("wmt14-en-de-huge")
    bad = tmp_path / "r.yaml"
    bad.write_text("recipe:\n  batches_per_step: 0\n")
    with pytest.raises(UserError, match="batches_per_step must be an integer >= 1"):
        load_recipe(bad)
    bad.write_text("recipe:\n  batches_per_step: 1\ntrain: [1, 2]\n")  # a section that is not a mapping
    with pytest.raises(UserError, match="config section 'train' must be a mapping, got list"):
        load_recipe(bad)
    bad.write_bytes(b"recipe:\n  batches_per_step: \xff\n")
    with pytest.raises(UserError, match="is not UTF-8 text"):
        load_recipe(bad)


def test_recipe_trains_and_averages_on_the_stand_in(server, tmp_path, monkeypatch, capsys):
    """One command, the base recipe scaled down (a tiny model, small batches): data downloaded and
    verified, newstest stand-ins from sacreBLEU's cache, 8 batches a step, checkpoints averaged."""
    handler, url = server
    archives = en_de_archives((300, 200, 100))
    handler.files.update(archives)
    stand_in_entry(monkeypatch, url, archives)
    sacrebleu_text_cache(tmp_path / "sacrebleu", "wmt13", "en-de", n=6, seed=11)
    sacrebleu_text_cache(tmp_path / "sacrebleu", "wmt14/full", "en-de", n=4, seed=12)
    monkeypatch.setenv("SACREBLEU", str(tmp_path / "sacrebleu"))
    run = tmp_path / "run"
    scaled = ["model.preset=tiny", "data.vocab_size=300", "data.max_tokens=200", "train.max_steps=3",
              "train.save_every=1", "train.keep_last=2", "train.average_last=2", "train.eval_every=3",
              "train.eval_sentences=2", "train.threads=1", "train.device=cpu", "train.precision=fp32", "train.tensorboard=false",
              "train.alignment_sentences=0", "train.warmup=2"]
    code = main(["train", "--recipe", "wmt14-en-de-base", "--run-dir", str(run), "--quiet", "--json", *scaled])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 3
    saved = json.loads((run / "run_config.json").read_text())
    assert saved["train"]["accumulate"] == 8 and saved["data"]["valid_set"] == "wmt13"
    assert saved["model"]["dropout"] == 0.1 and saved["train"]["label_smoothing"] == 0.1
    from safetensors.torch import load_file

    last = [load_file(run / "checkpoints" / f"step-{s:08d}" / "model.safetensors") for s in (2, 3)]
    model = load_file(run / "model.safetensors")
    for key, value in model.items():  # the run's model is the average of its last 2 checkpoints
        assert torch.allclose(value, (last[0][key] + last[1][key]) / 2, atol=1e-6), key
    assert any(not torch.equal(last[0][key], last[1][key]) for key in model)  # two different checkpoints
    assert main(["evaluate", str(run), "--greedy", "--device", "cpu", "--json"]) == 0  # the run's test_set
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scores["sentences"] == 4  # the wmt14/full stand-in's sentences


def test_registry_module_lists_wmt14():
    assert {"wmt14-en-de", "wmt14-en-fr"} <= set(registry.REGISTRY)
