"""A registry of real parallel corpora with sha256-verified downloads.

Four corpora are registered (for Multi30k and Tatoeba, ``../shared/data/*/SOURCE.md`` says where
the hashes come from; for WMT14, the comment above :data:`_WMT_ARCHIVES`):

* ``multi30k``: image captions in en / de / fr (Elliott et al. 2016, 2017), splits ``train``
  (29,000), ``val`` (1,014) and ``test_2016_flickr`` (1,000); research and education use only.
* ``tatoeba``: 167,130 English<TAB>French pairs (manythings.org export 2019-04-07), CC BY 2.0 FR;
  one file, split ``all``: split it with :func:`tatoeba_splits`.
* ``wmt14-en-de`` and ``wmt14-en-fr``: the training data of the WMT14 translation task that the
  paper trains on (about 4.5 million and 36 million pairs), split ``train``, kept as the published
  ``.tgz`` / ``.tar`` archives (the members are read straight out of them). Their validation and
  test sets are newstest2013 and newstest2014, through sacreBLEU's names
  (:mod:`transformer.corpus.testsets`: ``wmt13``, ``wmt14/full``).

:func:`fetch` returns a directory holding a corpus's files under their original names. It uses
an existing local copy when given one (``local_dir``, ``--from DIR`` or ``$TRANSFORMER_DATA``,
laid out as ``<root>/<corpus>/<file>``), verifying every file's sha256, and otherwise downloads
the missing files into ``<cache>/<corpus>/`` (verified before they get their final name, see
:mod:`transformer.corpus.download`). :func:`corpus_pairs` then reads sentence pairs from it
(:func:`read_corpus`: with the reading statistics). :func:`data_command` runs ``transformer data``,
whose parser is in :mod:`transformer.corpus.cli_args`.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from transformer.corpus.download import download_verified, verify_file
from transformer.corpus.files import CorpusError, ReadStats, read_archive_parallel, read_parallel, read_tsv
from transformer.errors import UserError

__all__ = [
    "DATA_ENV", "CACHE_ENV", "REGISTRY", "WMT14_PARTS", "CorpusInfo", "RemoteFile", "corpus_pairs", "data_command",
    "default_cache_dir", "fetch", "get_corpus", "read_corpus", "tatoeba_splits",
]

DATA_ENV = "TRANSFORMER_DATA"
"""Environment variable naming a local directory laid out like ``../shared/data``."""
CACHE_ENV = "TRANSFORMER_CACHE"
"""Environment variable naming the download cache (default ``~/.cache/transformer``)."""

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class RemoteFile:
    """One file of a corpus, as stored locally under ``name`` and published at ``url``.

    Attributes:
        name: the local file name (``train.de.gz``, ``eng-fra.txt``).
        url: the original public address of the download.
        sha256: the sha256 of the bytes at ``url``.
        member: if the download is a zip or tar archive, the member to extract into ``name``
            (without one, an archive is kept whole under ``name``).
        member_sha256: the sha256 of that member (required with ``member``).
    """

    name: str
    url: str
    sha256: str
    member: str | None = None
    member_sha256: str | None = None

    def __post_init__(self) -> None:
        for digest in (self.sha256, self.member_sha256):
            if digest is not None and not _SHA256.fullmatch(digest):
                raise ValueError(f"{self.name}: not a lowercase sha256 hex digest: {digest!r}")
        if (self.member is None) != (self.member_sha256 is None):
            raise ValueError(f"{self.name}: member and member_sha256 go together")

    @property
    def local_sha256(self) -> str:
        """The sha256 of the file as stored locally (the member's, for a zip member)."""
        return self.member_sha256 if self.member_sha256 is not None else self.sha256


@dataclass(frozen=True)
class CorpusInfo:
    """A registered corpus: what it is, its terms, and its files."""

    name: str
    description: str
    citation: str
    license: str
    attribution: str
    languages: tuple[str, ...]
    splits: tuple[str, ...]
    files: tuple[RemoteFile, ...]


_M30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
_M30K_SHA256 = {
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}
_TATOEBA_COMMIT = "adddaf33ac35572bcfeb421efec29435e7ea9332"

# The WMT14 training archives as statmt.org publishes them: (url, byte count, sha256). The sha256
# digests and byte counts are TensorFlow Datasets' recorded checksums of these URLs
# (github.com/tensorflow/datasets, tensorflow_datasets/url_checksums/wmt14_translate.txt at commit
# 333639b37af6c6fedf3610a4a2d42f1c6ef6f7d5 for Europarl v7, Common Crawl and News Commentary v9;
# wmt13_translate.txt at commit 90b66237ad09c9e5b9b1bc61b646db7b1fb0713c, and wmt15_translate.txt at
# 333639b3..., for the UN corpus and Giga-FrEn). The first three also match Hugging Face datasets'
# wmt14 dataset_infos.json "download_checksums" (github.com/huggingface/datasets,
# datasets/wmt14/dataset_infos.json at commit 22d3b80586cab756b70d6c939ceace94bb356a8c). No digest
# is published for the members inside the archives, so the archives are kept whole and verified
# (see read_corpus for the members read from each).
_WMT_ARCHIVES: dict[str, tuple[str, int, str]] = {
    "training-parallel-europarl-v7.tgz": (
        "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz", 657_632_379,
        "0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7"),
    "training-parallel-commoncrawl.tgz": (
        "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz", 918_311_367,
        "c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5"),
    "training-parallel-nc-v9.tgz": (
        "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz", 80_418_416,
        "cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485"),
    "training-parallel-un.tgz": (
        "http://www.statmt.org/wmt13/training-parallel-un.tgz", 2_365_634_246,
        "29141b5c1eba149a94f7a59d3b1a834b2e47fe0f8758d68dcd77a3d3f497ee47"),
    "training-giga-fren.tar": (
        "http://www.statmt.org/wmt10/training-giga-fren.tar", 2_595_102_720,
        "3ff8319f6919393520559bfbc7ad6a747ec81b3abc7be9993b338d4b017b4d9a"),
}
# The parallel members of each archive, per language pair ({x} is the non-English language, {lang}
# the side): the layout fairseq's prepare-wmt14en2de.sh / prepare-wmt14en2fr.sh and Hugging Face's
# wmt14 builder read. In this order the parts are concatenated.
WMT14_PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "wmt14-en-de": (
        ("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en.{lang}"),
        ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en.{lang}"),
        ("training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en.{lang}"),
    ),
    "wmt14-en-fr": (
        ("training-parallel-europarl-v7.tgz", "training/europarl-v7.fr-en.{lang}"),
        ("training-parallel-commoncrawl.tgz", "commoncrawl.fr-en.{lang}"),
        ("training-parallel-un.tgz", "un/undoc.2000.fr-en.{lang}"),
        ("training-parallel-nc-v9.tgz", "training/news-commentary-v9.fr-en.{lang}"),
        ("training-giga-fren.tar", "giga-fren.release2.fixed.{lang}.gz"),
    ),
}
_WMT_CITATION = (
    "Bojar et al. (2014). Findings of the 2014 Workshop on Statistical Machine Translation. WMT 2014 (W14-3302); "
    "Koehn (2005), Europarl; Smith et al. (2013), Common Crawl; Callison-Burch et al. (2009), 10^9 French-English")
_WMT_LICENSE = "research use (WMT14 shared task; each part under its own terms: see statmt.org/wmt14)"


def _wmt14(pair: str, pairs: str) -> CorpusInfo:
    x = pair.split("-")[1]
    archives = sorted({archive for archive, _ in WMT14_PARTS[f"wmt14-{pair}"]})
    sizes = f"{pairs}, {sum(_WMT_ARCHIVES[a][1] for a in archives) / 1e9:.2f} GB to download"
    names = ", ".join(member.split("/")[-1].replace(".{lang}", "").replace(".gz", "")
                      for _, member in WMT14_PARTS[f"wmt14-{pair}"])
    return CorpusInfo(
        name=f"wmt14-{pair}",
        description=f"WMT14 English-{'German' if x == 'de' else 'French'} training data ({sizes}): {names}; "
        "raw text, kept as the published archives",
        citation=_WMT_CITATION,
        license=_WMT_LICENSE,
        attribution=f"WMT14 {pair} training data (statmt.org/wmt14/translation-task.html): {names}",
        languages=("en", x),
        splits=("train",),
        files=tuple(RemoteFile(name=a, url=_WMT_ARCHIVES[a][0], sha256=_WMT_ARCHIVES[a][2]) for a in archives),
    )


REGISTRY: dict[str, CorpusInfo] = {
    "multi30k": CorpusInfo(
        name="multi30k",
        description="Multi30k (WMT Multimodal Translation Task 1): Flickr30K image captions in English, "
        "German and French, line-aligned, raw (untokenised) text",
        citation="Elliott, Frank, Sima'an, Specia (2016). Multi30K: Multilingual English-German Image "
        "Descriptions. Workshop on Vision and Language (W16-3210). Elliott, Frank, Barrault, Bougares, "
        "Specia (2017). Findings of the Second Shared Task on Multimodal Machine Translation and "
        "Multilingual Image Description. WMT 2017 (W17-4718), for French.",
        license="research and education use only (no license file; derived from Flickr30K)",
        attribution="Multi30K (Elliott et al. 2016, 2017; github.com/multi30k/dataset), derived from "
        "Flickr30K; for non-commercial research and educational use",
        languages=("en", "de", "fr"),
        splits=("train", "val", "test_2016_flickr"),
        files=tuple(
            RemoteFile(
                name=f"{split}.{lang}.gz",
                url=f"https://raw.githubusercontent.com/multi30k/dataset/{_M30K_COMMIT}/data/task1/raw/{split}.{lang}.gz",
                sha256=_M30K_SHA256[f"{split}.{lang}.gz"],
            )
            for split in ("train", "val", "test_2016_flickr")
            for lang in ("en", "de", "fr")
        ),
    ),
    "tatoeba": CorpusInfo(
        name="tatoeba",
        description="Tatoeba English-French sentence pairs, manythings.org Anki export of 2019-04-07: "
        "167,130 'English<TAB>French' lines sorted by length (shuffle before splitting)",
        citation="Tatoeba (tatoeba.org), via the manythings.org/anki fra-eng export (2019-04-07)",
        license="CC BY 2.0 FR",
        attribution="Tatoeba sentence pairs (manythings.org/anki export, 2019-04-07), CC BY 2.0 FR. "
        "Attribution: www.manythings.org/anki and tatoeba.org",
        languages=("en", "fr"),
        splits=("all",),
        files=(
            RemoteFile(
                name="eng-fra.txt",
                url=f"https://raw.githubusercontent.com/modelexlab/data/{_TATOEBA_COMMIT}/fra-eng.zip",
                sha256="161c93f18da3a7e6df611ed961426613260de8af06ccf8c79c977afe5135ac44",
                member="fra-eng/fra.txt",
                member_sha256="0bb85dbaa1c896844649094d7eaf2e34bee34e84fe362b26ce7e8f2e12aae104",
            ),
        ),
    ),
    "wmt14-en-de": _wmt14("en-de", "4,508,785 pairs"),
    "wmt14-en-fr": _wmt14("en-fr", "40,836,715 pairs, the paper's 36 million after cleaning"),
}
"""The known corpora, by name."""

_TATOEBA_COLUMNS = {"en": 0, "fr": 1}


def get_corpus(name: str | CorpusInfo) -> CorpusInfo:
    """The registry entry called ``name`` (a :class:`CorpusInfo` is returned as is).

    Raises:
        CorpusError: unknown name; the message lists the known ones.
    """
    if isinstance(name, CorpusInfo):
        return name
    try:
        return REGISTRY[name]
    except KeyError:
        raise CorpusError(f"unknown corpus {name!r}; known corpora: {', '.join(sorted(REGISTRY))}") from None


def default_cache_dir() -> Path:
    """Where downloads go: ``$TRANSFORMER_CACHE``, or ``~/.cache/transformer``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "transformer"


def _offline_hint(info: CorpusInfo) -> str:
    example = "/".join(["DIR", info.name, info.files[0].name])
    return (
        f"without network access, get the files elsewhere and pass --from DIR (or set {DATA_ENV}=DIR), "
        f"laid out as {example}"
    )


def _use_local(info: CorpusInfo, root: Path, origin: str) -> Path:
    """Verify and return the directory under ``root`` holding all of ``info``'s files."""
    if not root.is_dir():
        raise CorpusError(f"{origin}: {root} is not a directory; it should hold {info.name}/{info.files[0].name} etc.")
    for directory in (root / info.name, root):  # DIR/<name>/ as documented, or DIR itself
        if all((directory / f.name).is_file() for f in info.files):
            for f in info.files:
                verify_file(directory / f.name, f.local_sha256, fix=f"replace it with the original from {f.url}")
            return directory
    missing = [f.name for f in info.files if not (root / info.name / f.name).is_file()]
    raise CorpusError(
        f"{origin}: {root / info.name} lacks {', '.join(missing)}; put the original files there "
        f"(or leave out --from / unset {DATA_ENV} to download them)"
    )


def fetch(
    name: str | CorpusInfo,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    local_dir: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    progress: bool = True,
    timeout: float = 60,
) -> Path:
    """Make the corpus ``name`` available locally and return the directory holding its files.

    The files keep their original names (``train.de.gz``, ..., ``eng-fra.txt``).

    Args:
        name: a registry name, or a :class:`CorpusInfo` (e.g. a test or mirror entry).
        cache_dir: download cache root; files go to ``cache_dir/<name>/``. Default
            :func:`default_cache_dir`.
        local_dir: a local copy laid out as ``local_dir/<name>/<file>`` (``local_dir`` itself
            holding the files is accepted too). If None, ``$TRANSFORMER_DATA`` is used when
            set. A local copy is never copied: its files are verified (sha256, hashed once
            per process) and its directory returned. A missing file there is an error.
        base_url: replaces each URL up to its file name (``base_url + "/" + file name``),
            for mirrors and tests.
        progress: show a tqdm bar per download on a terminal, else one line per file (stderr).
        timeout: seconds to wait on the network before giving up.

    Raises:
        CorpusError: unknown name; a local file missing or failing its sha256 (file and both
            digests named); a download failing (URL named), cut short or not matching its
            sha256. A failed download leaves nothing under its final name and no temp file.
    """
    info = get_corpus(name)
    origin = "local_dir (--from)"
    if local_dir is None and os.environ.get(DATA_ENV):
        local_dir, origin = os.environ[DATA_ENV], f"${DATA_ENV}"
    if local_dir is not None:
        return _use_local(info, Path(local_dir).expanduser(), origin)

    target = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = target / info.name
    for f in info.files:
        dest = target / f.name
        if dest.is_file():
            try:
                verify_file(dest, f.local_sha256)
                continue
            except CorpusError as exc:  # only verified files are renamed into place; someone changed it
                if progress:
                    print(f"{exc}; downloading it again", file=sys.stderr)
                dest.unlink()
        url = f.url if base_url is None else f"{base_url.rstrip('/')}/{f.url.rsplit('/', 1)[-1]}"
        download_verified(
            url, dest, f.sha256, member=f.member, member_sha256=f.member_sha256,
            progress=progress, timeout=timeout, hint=_offline_hint(info),
        )
    return target


def corpus_pairs(
    name: str | CorpusInfo, *, src: str, tgt: str, split: str, directory: str | os.PathLike[str]
) -> list[tuple[str, str]]:
    """Read the ``(src, tgt)`` sentence pairs of one split of a fetched corpus.

    ``directory`` is what :func:`fetch` returned. ``multi30k`` reads ``<split>.<src>.gz`` and
    ``<split>.<tgt>.gz`` with :func:`read_parallel`; ``tatoeba`` has the one split ``"all"``,
    read with :func:`read_tsv` (column 0 is ``en``, column 1 is ``fr``), in file order (sorted
    by length: split it with :func:`tatoeba_splits`). The WMT14 corpora have the one split
    ``"train"``: the members listed in :data:`WMT14_PARTS`, read out of their archives with
    :func:`read_archive_parallel`, concatenated in that order. Pairs with an empty side are skipped;
    :func:`read_corpus` also returns how many.

    Raises:
        CorpusError: unknown corpus, language or split (the known ones listed), ``src == tgt``,
            or a problem with the files (see :mod:`transformer.corpus.files`).
    """
    return read_corpus(name, src=src, tgt=tgt, split=split, directory=directory)[0]


def read_corpus(
    name: str | CorpusInfo, *, src: str, tgt: str, split: str, directory: str | os.PathLike[str]
) -> tuple[list[tuple[str, str]], ReadStats]:
    """:func:`corpus_pairs` with the reading statistics (lines read, pairs with an empty side skipped).

    Raises:
        CorpusError: unknown corpus, language or split (the known ones listed), ``src == tgt``,
            or a problem with the files (see :mod:`transformer.corpus.files`).
    """
    info = get_corpus(name)
    for side, lang in (("src", src), ("tgt", tgt)):
        if lang not in info.languages:
            raise CorpusError(f"{info.name} has no language {lang!r} ({side}); it has {', '.join(info.languages)}")
    if src == tgt:
        raise CorpusError(f"src and tgt are both {src!r}; pick two different languages of {', '.join(info.languages)}")
    if split not in info.splits:
        raise CorpusError(f"{info.name} has no split {split!r}; it has {', '.join(info.splits)}")
    directory = Path(directory)
    if info.name == "multi30k":
        return read_parallel(directory / f"{split}.{src}.gz", directory / f"{split}.{tgt}.gz")
    if info.name == "tatoeba":
        return read_tsv(directory / "eng-fra.txt", src_column=_TATOEBA_COLUMNS[src], tgt_column=_TATOEBA_COLUMNS[tgt])
    if info.name in WMT14_PARTS:
        return _read_parts(directory, WMT14_PARTS[info.name], src=src, tgt=tgt)
    raise CorpusError(f"no reader for corpus {info.name!r}; readable: {', '.join(REGISTRY)}")


def _read_parts(directory: Path, parts: tuple[tuple[str, str], ...], *, src: str,
                tgt: str) -> tuple[list[tuple[str, str]], ReadStats]:
    """The pairs of each (archive, member pattern) part, one after the other, with their statistics summed."""
    pairs: list[tuple[str, str]] = []
    total = ReadStats(n_read=0, n_kept=0, n_empty_skipped=0)
    for archive, member in parts:
        part, read = read_archive_parallel(directory / archive, member.format(lang=src), member.format(lang=tgt))
        pairs.extend(part)
        total = ReadStats(
            n_read=total.n_read + read.n_read, n_kept=total.n_kept + read.n_kept,
            n_empty_skipped=total.n_empty_skipped + read.n_empty_skipped,
            n_empty_src=total.n_empty_src + read.n_empty_src, n_empty_tgt=total.n_empty_tgt + read.n_empty_tgt,
            sources=total.sources + read.sources, gzipped=total.gzipped + read.gzipped)
        del part
    return pairs, total


def tatoeba_splits(
    pairs: list[tuple[str, str]], *, seed: int = 0, valid: int = 1000, test: int = 2000
) -> dict[str, list[tuple[str, str]]]:
    """Split pairs into ``train`` / ``valid`` / ``test`` with no source sentence in two splits.

    Tatoeba's file is sorted by length, and one English sentence often has several French
    translations (116,830 distinct English sides for 167,130 pairs). Splitting the pairs
    directly would put a test source sentence in train with another translation. So the pairs
    are grouped by their source side (``pair[0]``, the source of the chosen direction: English
    for en->fr, French for fr->en), the groups (in first-seen order) are shuffled with
    ``random.Random(seed)``, and whole groups go to ``test`` until it holds at least ``test``
    pairs, then to ``valid`` likewise, and the rest to ``train``. A split can thus exceed its
    size by less than one group (a few pairs); the pairs of a group stay together, in file
    order. The result depends only on ``pairs`` and ``seed``.

    Raises:
        UserError: negative sizes, or nothing left for train.
    """
    if valid < 0 or test < 0:
        raise UserError(f"valid and test must be >= 0, got valid={valid}, test={test}")
    groups: dict[str, list[tuple[str, str]]] = {}
    for pair in pairs:
        groups.setdefault(pair[0], []).append(pair)
    sources = list(groups)
    random.Random(seed).shuffle(sources)
    splits: dict[str, list[tuple[str, str]]] = {"train": [], "valid": [], "test": []}
    i = 0
    for split, size in (("test", test), ("valid", valid)):
        while len(splits[split]) < size and i < len(sources):
            splits[split].extend(groups[sources[i]])
            i += 1
    for source in sources[i:]:
        splits["train"].extend(groups[source])
    if not splits["train"]:
        raise UserError(f"no pairs left for train: {len(pairs)} pairs, valid={valid}, test={test}")
    return splits


def data_command(args: argparse.Namespace) -> int:
    """Run ``transformer data list`` or ``transformer data download NAME``.

    ``list`` prints one line per corpus (name, languages, splits, license). ``download`` prints
    the directory holding the files on stdout (progress and the attribution go to stderr).

    Raises:
        CorpusError: unknown corpus, or the fetch failed (the CLI prints it and exits 2).
    """
    if args.data_action == "list":
        width = max(len(n) for n in REGISTRY)
        for info in REGISTRY.values():
            langs, splits = "/".join(info.languages), ", ".join(info.splits)
            print(f"{info.name:<{width}}  {langs:<8}  splits: {splits:<30}  {info.license}")
        return 0
    if args.data_action == "download":
        info = get_corpus(args.name)
        directory = fetch(info, cache_dir=args.cache_dir, local_dir=args.from_dir)
        print(f"{info.name}: {info.license}. {info.attribution}", file=sys.stderr)
        print(directory)
        return 0
    raise CorpusError(f"unknown data action {args.data_action!r}; use list or download")
