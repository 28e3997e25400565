"""The tokenized-data cache: each corpus read and tokenized once, then memory-mapped by every later run.

Layout, under :func:`cache_root` (``$TRANSFORMER_DATA_CACHE``, else ``binarized/`` in the download
cache: ``$TRANSFORMER_CACHE``, else ``~/.cache/transformer``)::

    sources/<source key>/            one corpus, as a DataConfig reads it
        source.json                  what the key covers, and the reading statistics
        text.json                    its validation and test pairs (text; small)
        ids-<vocab key>/             its training pairs tokenized by one tokenizer (transformer.data.indexed)
    vocab/<key>/                     a tokenizer trained on the training pairs of some sources

The **source key** hashes everything that decides a corpus's pairs and splits: the corpus name,
languages and split settings (sizes, ``data.seed`` where it shuffles, ``data.valid_fraction``), the
data files (registry corpora: their registered sha256; ``files`` / ``tsv``: size, modification
time and content hash of each file, see :func:`~transformer.data.binary.file_fingerprint`), the
sacreBLEU test sets of ``data.valid_set`` / ``data.test_set`` (by name and language pair) and the
source code that reads and splits them. The **vocab key** of a tokenized directory hashes the
tokenizer files, the code that applies them and the libraries' versions
(:func:`~transformer.data.binary.vocab_fingerprint`); that of a trained tokenizer, the source keys
it was trained on, ``data.vocab_size``, ``data.joint_vocab`` and the training code. A change to any
of these gives another key, so a stale entry is never read; it stays on disk until removed
(``rm -r`` the cache directory, or part of it, whenever no run is using it).

Every file and directory is written under a temporary name and renamed into place when complete,
and a builder holds an exclusive lock on its entry (:func:`~transformer.data.binary.build_lock`),
so runs and DDP ranks that start together share one build. Length filtering is not cached: it
reads the lengths from the offsets at each start, so changing ``data.max_len`` rebuilds nothing.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from transformer.corpus.files import CorpusError
from transformer.corpus.registry import REGISTRY, WMT14_PARTS, default_cache_dir
from transformer.data.binary import (
    build_lock, encode_to_indexed, file_fingerprint, publish, remove_temporaries, vocab_fingerprint)
from transformer.data.indexed import IndexedFormatError, IndexedPairs, open_indexed
from transformer.text import Vocabularies
from transformer.text.tokenizer import BPETokenizer
from transformer.run.config import DataConfig
from transformer.run_files import write_atomic

__all__ = ["DATA_CACHE_ENV", "CachedCorpus", "cache_root", "open_cache", "source_description", "source_key"]

DATA_CACHE_ENV = "TRANSFORMER_DATA_CACHE"
CACHE_VERSION = 1
ENTRY_LOCK = ".lock"  # in each cache entry's directory, held while it is built
Pair = tuple[str, str]
Splits = dict[str, list[Pair]]
ReadSplits = Callable[[DataConfig], tuple[Splits, dict[str, Any]]]
_CORPUS_CODE = Path(__file__).resolve().parents[1] / "corpus"  # the readers and the built-in generator


def cache_root() -> Path:
    """``$TRANSFORMER_DATA_CACHE``, else ``binarized/`` in the download cache."""
    env = os.environ.get(DATA_CACHE_ENV)
    return Path(env).expanduser() if env else default_cache_dir() / "binarized"


def _hash(obj: Any) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode("utf-8"), digest_size=12).hexdigest()


def _code_hash(read_splits: ReadSplits) -> str:
    """The source of the corpus package and of the function that splits its output."""
    parts = [p.read_text(encoding="utf-8") for p in sorted(_CORPUS_CODE.glob("*.py"))]
    return _hash(parts + [inspect.getsource(read_splits)])


def _fingerprint(path: str) -> dict[str, Any]:
    try:
        return file_fingerprint(path)
    except OSError as err:
        raise CorpusError(f"{path}: {err.strerror or err} (check the path; it is resolved against {Path.cwd()})") from None


def source_description(cfg: DataConfig, read_splits: ReadSplits) -> dict[str, Any]:
    """What decides the pairs and splits of ``cfg``'s corpus (see the module docstring)."""
    d: dict[str, Any] = {"cache_version": CACHE_VERSION, "corpus": cfg.corpus, "code": _code_hash(read_splits)}
    if cfg.corpus == "builtin":
        d.update(sizes=[cfg.builtin_train, cfg.builtin_valid, cfg.builtin_test], seed=cfg.seed)
    elif cfg.corpus in REGISTRY:
        d.update(src=cfg.src_lang, tgt=cfg.tgt_lang, files={f.name: f.local_sha256 for f in REGISTRY[cfg.corpus].files})
        if cfg.corpus == "tatoeba":
            d["seed"] = cfg.seed  # its split is a seeded shuffle
        elif cfg.corpus in WMT14_PARTS and not cfg.valid_set:
            d.update(valid_fraction=cfg.valid_fraction, seed=cfg.seed)  # validation held out of the training pairs
    else:
        d["train"] = [_fingerprint(p) for p in ((cfg.train_src, cfg.train_tgt) if cfg.corpus == "files" else (cfg.tsv,))
                      if p]
        if cfg.valid_src and cfg.valid_tgt:
            d["valid"] = [_fingerprint(cfg.valid_src), _fingerprint(cfg.valid_tgt)]
        else:
            d.update(valid_fraction=cfg.valid_fraction, seed=cfg.seed)  # a seeded hold-out
    for key in ("valid_set", "test_set"):  # sacreBLEU test sets: fixed by name and language pair
        if getattr(cfg, key):
            d[key] = [getattr(cfg, key), cfg.src_lang, cfg.tgt_lang]
    return d


def source_key(cfg: DataConfig, read_splits: ReadSplits) -> str:
    return _hash(source_description(cfg, read_splits))


@dataclass
class CachedCorpus:
    """One corpus from the cache: its training pairs tokenized (all of them, unfiltered, in reading order)."""

    key: str
    directory: Path
    train: IndexedPairs
    valid_text: list[Pair]
    test_text: list[Pair]
    stats: dict[str, Any]  # the reading statistics of load_text_splits


class _Session:
    """One look at the cache for a run's sources: finds entries, builds the missing ones (when allowed),
    reading each corpus's text at most once."""

    def __init__(self, sources: list[DataConfig], read_splits: ReadSplits, *, build: bool,
                 progress: TextIO | None, workers: int | None) -> None:
        self.sources, self.read_splits, self.build = sources, read_splits, build
        self.progress, self.workers = progress, workers
        self.root = cache_root()
        self.keys = [source_key(cfg, read_splits) for cfg in sources]
        self.dirs = [self.root / "sources" / key for key in self.keys]
        self._text: dict[int, Splits] = {}
        self.built = False  # whether this session made anything

    def text(self, i: int) -> Splits:
        if i not in self._text:
            self.built = True
            self._text[i], stats = self.read_splits(self.sources[i])
            entry = self.dirs[i]
            _write_json(entry / "text.json", {"valid": self._text[i].get("valid", []), "test": self._text[i].get("test", [])})
            _write_json(entry / "source.json", {"description": source_description(self.sources[i], self.read_splits),
                                                "stats": stats})  # last: its presence marks the entry complete
        return self._text[i]

    def entry(self, i: int) -> tuple[list[Pair], list[Pair], dict[str, Any]] | None:
        directory = self.dirs[i]
        if not (directory / "source.json").is_file():
            if not self.build:
                return None
            with build_lock(directory / ENTRY_LOCK, stream=self.progress):
                remove_temporaries(directory)
                if not (directory / "source.json").is_file():
                    try:
                        self.text(i)
                    except BaseException:
                        if {p.name for p in directory.iterdir()} <= {ENTRY_LOCK}:
                            shutil.rmtree(directory, ignore_errors=True)  # bad data leaves no empty entry behind
                        raise
        try:
            text = json.loads((directory / "text.json").read_text(encoding="utf-8"))
            stats = json.loads((directory / "source.json").read_text(encoding="utf-8"))["stats"]
            return [tuple(p) for p in text["valid"]], [tuple(p) for p in text["test"]], stats
        except (ValueError, KeyError, TypeError) as err:  # not JSON (or not UTF-8), or not what this code writes
            raise CorpusError(f"{directory}: a damaged data cache entry ({err!r}); delete that directory and "
                              "run again") from None

    def vocab(self, cfg: DataConfig) -> Vocabularies | None:
        """The tokenizer trained on the sources' training pairs with ``cfg``'s vocabulary settings."""
        code = [inspect.getsource(Vocabularies.train), inspect.getsource(BPETokenizer)]
        key = _hash({"sources": self.keys, "size": cfg.vocab_size, "joint": cfg.joint_vocab, "code": _hash(code)})
        directory = self.root / "vocab" / key
        if directory.is_dir():
            return Vocabularies.load(directory)
        if not self.build:
            return None
        with build_lock(self.root / "vocab" / f"{key}.lock", stream=self.progress):
            remove_temporaries(directory.parent)
            if not directory.is_dir():
                if self.progress:
                    print("training the tokenizer ...", file=self.progress, flush=True)
                pairs = [p for i in range(len(self.sources)) for p in self.text(i)["train"]]
                vocab = Vocabularies.train(pairs, vocab_size=cfg.vocab_size, joint=cfg.joint_vocab)
                tmp = directory.parent / f".{key}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
                vocab.save(tmp)
                publish(tmp, directory)
        return Vocabularies.load(directory)

    def train_ids(self, i: int, vocab: Vocabularies, vkey: str) -> IndexedPairs | None:
        directory = self.dirs[i] / f"ids-{vkey}"
        if directory.is_dir():
            try:
                return open_indexed(directory)
            except IndexedFormatError as err:
                if not self.build:
                    return None
                with build_lock(self.dirs[i] / ENTRY_LOCK, stream=self.progress):
                    if self.progress:
                        print(f"rebuilding a damaged cache entry: {err}", file=self.progress, flush=True)
                    shutil.rmtree(directory, ignore_errors=True)
        if not self.build:
            return None
        with build_lock(self.dirs[i] / ENTRY_LOCK, stream=self.progress):
            remove_temporaries(self.dirs[i])
            if not directory.is_dir():
                train = self.text(i)["train"]
                meta = {"vocab": vkey, "source": self.keys[i]}
                encode_to_indexed([s for s, _ in train], [t for _, t in train], vocab, directory, meta=meta,
                                  workers=self.workers, progress=self.progress,
                                  what=f"tokenizing {self.sources[i].corpus}")
        return open_indexed(directory)


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(obj, ensure_ascii=False))


def open_cache(sources: list[DataConfig], read_splits: ReadSplits, *, vocab: Vocabularies | None = None,
               cfg: DataConfig | None = None, build: bool = True, progress: TextIO | None = None,
               workers: int | None = None, poll: float = 1.0) -> tuple[Vocabularies, list[CachedCorpus]]:
    """The sources' training pairs tokenized with ``vocab`` (trained on them with ``cfg``'s settings
    when None, and cached too), building what the cache lacks.

    ``read_splits`` reads a corpus (``load_text_splits``). With ``build=False`` (DDP ranks other than
    the first of their machine) nothing is built: it waits, checking every ``poll`` seconds, until
    the builder has published everything.

    Raises:
        CorpusError: a data file missing or unreadable (or what ``read_splits`` raises);
            a cache directory that cannot be written (the message names it and the fix).
    """
    cfg = cfg or sources[0]
    session = _Session(sources, read_splits, build=build, progress=progress, workers=workers)
    announced = False
    while True:
        try:
            found = _look(session, vocab, cfg)
        except PermissionError as err:
            raise CorpusError(f"cannot write the data cache {session.root} ({err.strerror}: {err.filename}); set "
                              f"{DATA_CACHE_ENV} to a writable directory, or data.binarize=false") from None
        if found is not None:
            if progress:
                dirs = ", ".join(str(c.train.path) for c in found[1])
                print(f"tokenized training data {'made' if session.built else 'reused'}: {dirs}", file=progress,
                      flush=True)
            return found
        if progress and not announced:
            print(f"waiting for the first process of this machine to build the data cache {session.root} ...",
                  file=progress, flush=True)
            announced = True
        time.sleep(poll)


def _look(session: _Session, vocab: Vocabularies | None, cfg: DataConfig) -> tuple[Vocabularies, list[CachedCorpus]] | None:
    entries = [session.entry(i) for i in range(len(session.sources))]
    if any(e is None for e in entries):
        return None
    vocab = vocab or session.vocab(cfg)
    if vocab is None:
        return None
    vkey = vocab_fingerprint(vocab)
    corpora = []
    for i, entry in enumerate(entries):
        train = session.train_ids(i, vocab, vkey)
        if train is None:
            return None
        valid_text, test_text, stats = entry  # type: ignore[misc]
        corpora.append(CachedCorpus(session.keys[i], session.dirs[i], train, valid_text, test_text, dict(stats)))
    return vocab, corpora

