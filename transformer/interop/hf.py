"""``import_hf`` (a Marian model directory -> our run directory) and ``export_hf`` (the reverse).

A Marian directory saved by ``transformers`` holds ``config.json``, the weights
(``model.safetensors``, ``pytorch_model.bin`` or their sharded ``*.index.json`` forms) and the
tokenizer: ``source.spm``, ``target.spm``, ``vocab.json`` (and ``target_vocab.json`` with
separate vocabularies); a directory ``export_hf`` wrote for a BPE run holds our tokenizer file(s)
instead, and our config under ``OUR_CONFIG_KEY`` (the run's ``run_config.json``, with its
languages, under ``OUR_RUN_KEY``), so importing it gives the exported run back. A model name
instead of a directory is fetched from the Hugging Face
Hub (``transformer.interop.hub``). ``.bin`` weights are read with ``torch.load(weights_only=True)``, which
never runs pickled code (a pickle holding anything but tensors is refused in one line); a sharded
index may name only files inside the model directory (no absolute path, no ``..``). Both
directions write into a temporary directory beside the target and rename it at the end, so a
failure leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import warnings
from pathlib import Path, PurePosixPath, PureWindowsPath

import torch
from torch import Tensor

from transformer.run_files import MAX_TOKENIZER_BYTES, read_json
from transformer.run.model import CheckpointError, expected_tensors, load_model, save_model
from transformer.run.config import RunConfig
from transformer.run.layout import RUN_CONFIG_FILE
from transformer.interop._common import (
    MARIAN_TOKENIZER_FILES as TOKENIZER_FILES, InteropError, refuse_existing, require, staged_output,
)
from transformer.interop.hub import locate_model
from transformer.interop.marian import (
    OUR_CONFIG_KEY, OUR_RUN_KEY, as_original, config_from_marian, marian_config_kwargs, original_config, state_from_marian,
    state_to_marian, to_concat_layout,
)
from transformer.model import Transformer
from transformer.text import JOINT_FILE, SRC_FILE, TGT_FILE, Tokenizer, Vocabularies

RUN_TOKENIZER_FILES = (JOINT_FILE, SRC_FILE, TGT_FILE)  # a BPE run's tokenizer, as export_hf writes it


# ------------------------------------------------------------------------------------------------
# Reading a Marian directory.


def read_hf_weights(directory: str | os.PathLike[str]) -> dict[str, Tensor]:
    """All tensors of a ``transformers`` model directory (safetensors preferred, then ``.bin``)."""
    directory = Path(directory)
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (directory / single).is_file():
            return _read_weight_file(directory / single)
        if (directory / index).is_file():
            state: dict[str, Tensor] = {}
            for shard in _shard_names(directory / index):
                state.update(_read_weight_file(directory / shard))
            return state
    raise InteropError(f"no weights in {directory}: expected model.safetensors or pytorch_model.bin")


def _shard_names(index: Path) -> list[str]:
    """The shard files a ``*.index.json`` names, each checked to be a plain relative path inside
    the model directory: an absolute path or a ``..`` component is refused before anything is read
    (an index naming ``/etc/passwd`` was followed). Symbolic links inside the directory (the
    Hugging Face cache's snapshots) are fine: only what the index says is checked."""
    try:
        weight_map = read_json(index)["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError(f"weight_map is a {type(weight_map).__name__}, not an object")
    except (ValueError, KeyError, TypeError) as err:
        raise InteropError(f"{index} is not a valid weight index: {err!r}") from None
    shards = []
    for entry in weight_map.values():
        if not isinstance(entry, str) or not entry:
            raise InteropError(f"{index} names the shard {entry!r}, which is not a file name")
        as_windows = PureWindowsPath(entry)  # splits on both "/" and "\\"
        if PurePosixPath(entry).is_absolute() or as_windows.drive or as_windows.root or ".." in as_windows.parts:
            raise InteropError(f"{index} names the shard {entry!r}, outside the model directory; shards must be "
                               "files in that directory (a path relative to it, without '..')")
        shards.append(entry)
    return sorted(set(shards))


def _read_weight_file(path: Path) -> dict[str, Tensor]:
    if not path.is_file():
        raise InteropError(f"weights file not found: {path}")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        with path.open("rb") as f:
            header = f.read(4)
        if not header.startswith((b"PK\x03\x04", b"\x80")):  # torch.save writes a zip archive or a pickle
            raise InteropError(f"cannot read weights {path}: not a PyTorch weights file (neither the zip archive "
                               "nor the pickle torch.save writes)")
        with warnings.catch_warnings():  # torch's note on the pickle protocol: noise on top of the refusal
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # weights_only refused what the pickle holds; its advice is to load it anyway
        raise InteropError(f"refused {path}: not a weights-only file (its pickle holds objects other than tensors, "
                           "which could run code, so it is never loaded); use the model's safetensors weights "
                           "(model.safetensors) instead") from None
    except InteropError:
        raise
    except Exception as err:  # truncated files, ...
        raise InteropError(f"cannot read weights {path}: {' '.join(str(err).split())}") from None
    if not isinstance(state, dict) or not all(isinstance(t, Tensor) for t in state.values()):
        raise InteropError(f"{path} does not hold a state dict of tensors")
    return state


def read_tokenizers(directory: Path, hf_config, sizes: tuple[int, int]) -> Vocabularies:
    """The source and target tokenizers of a model directory, checked against the config.

    Marian's files (``source.spm``, ...) give SentencePiece tokenizers; without them, the run
    tokenizer files that ``export --format hf`` writes for a BPE run (``tokenizer.json``, or
    ``tokenizer.src.json`` + ``tokenizer.tgt.json``) are read as they are.
    """
    marian = any((directory / name).is_file() for name in TOKENIZER_FILES)
    ours = any((directory / name).is_file() for name in RUN_TOKENIZER_FILES)
    if not marian and not ours:
        raise InteropError(f"{directory} holds no tokenizer: expected the Marian files {list(TOKENIZER_FILES)}, or "
                           f"the {JOINT_FILE} (or {SRC_FILE} + {TGT_FILE}) that transformer export --format hf writes")
    if marian:
        vocab = read_marian_tokenizers(directory, hf_config.decoder_start_token_id)
    else:
        try:
            vocab = Vocabularies.load(directory)
        except (ValueError, FileNotFoundError) as err:
            raise InteropError(f"cannot read the tokenizer in {directory}: {err}") from None
        if vocab.tgt.bos_id != hf_config.decoder_start_token_id:
            raise InteropError(f"config.json says decoder_start_token_id={hf_config.decoder_start_token_id} but the "
                               f"tokenizer's start token is {vocab.tgt.bos_id}")
    for side, tok, size, name in (("source", vocab.src, sizes[0], "vocab_size"),
                                  ("target", vocab.tgt, sizes[1], "decoder_vocab_size")):
        if tok.vocab_size != size:
            raise InteropError(f"vocabulary size mismatch: the {side} vocabulary has {tok.vocab_size} entries but "
                               f"config.json says {name}={size}")
    if vocab.tgt.eos_id != hf_config.eos_token_id:
        raise InteropError(f"config.json says eos_token_id={hf_config.eos_token_id} but the tokenizer's </s> "
                           f"is {vocab.tgt.eos_id}")
    return vocab


def read_marian_tokenizers(directory: Path, start_id: int) -> Vocabularies:
    """Source and target :class:`SentencePieceTokenizer` of a Marian directory."""
    from transformer.text.sentencepiece import SentencePieceTokenizer

    settings = {}
    if (directory / "tokenizer_config.json").is_file():
        settings = read_json(directory / "tokenizer_config.json")
        if not isinstance(settings, dict):
            raise InteropError(f"{directory / 'tokenizer_config.json'} is not a JSON object")
    separate = bool(settings.get("separate_vocabs", False))
    needed = TOKENIZER_FILES + (("target_vocab.json",) if separate else ())
    missing = [name for name in needed if not (directory / name).is_file()]
    if missing:
        raise InteropError(f"{directory} lacks the Marian tokenizer files {missing} (a MarianTokenizer needs "
                           f"{list(needed)})")
    specials = {f"{k}_token": str(settings.get(f"{k}_token") or default)
                for k, default in (("pad", "<pad>"), ("eos", "</s>"), ("unk", "<unk>"))}
    tgt_vocab_file = directory / ("target_vocab.json" if separate else "vocab.json")
    try:
        target_vocab = read_json(tgt_vocab_file, limit=MAX_TOKENIZER_BYTES)
        start = {i: piece for piece, i in target_vocab.items()}.get(start_id)
        if start is None:
            raise InteropError(f"decoder_start_token_id {start_id} is not in {tgt_vocab_file.name}")
        src = SentencePieceTokenizer.from_files(directory / "source.spm", directory / "vocab.json",
                                                start_token=start, append_eos=True, **specials)
        tgt = SentencePieceTokenizer.from_files(directory / "target.spm", tgt_vocab_file,
                                                start_token=start, append_eos=False, **specials)
    except (ValueError, AttributeError) as err:
        raise InteropError(f"cannot read the Marian tokenizer in {directory}: {err}") from None
    return Vocabularies(src, tgt)


def import_hf(source: str | os.PathLike[str], out: str | os.PathLike[str], *, revision: str | None = None) -> Path:
    """Convert a Marian model into one of our run directories ``out`` (which must not exist).

    ``source`` is a model directory, or a model name on the Hugging Face Hub
    (``Helsinki-NLP/opus-mt-fr-en``), fetched at ``revision`` (a branch, tag or commit; default
    main) into the Hub cache; the run's config then records the name and the commit
    (``extra["hf_hub"]``). A directory ``export_hf`` wrote gives back the exported run: its
    config, weights and tokenizer.

    Raises:
        InteropError: not a Marian directory, an unsupported architecture or variant, missing
            tokenizer files, mismatched vocabulary sizes, weights that do not fit the config, or
            a model name that cannot be fetched (no network and no cached copy, unknown name).
        MissingExtraError: ``transformers``, ``sentencepiece`` or ``huggingface_hub`` is not installed.
    """
    refuse_existing(out)  # before a download, not after it
    directory, origin = locate_model(source, revision)
    if not (directory / "config.json").is_file():
        raise InteropError(f"{directory} is not a Hugging Face model directory (no config.json)")
    read_json(directory / "config.json")  # a regular file under a size cap, before transformers reads it
    transformers = require("transformers", "import-hf")
    require("sentencepiece", "import-hf")
    try:
        hf_config = transformers.AutoConfig.from_pretrained(str(directory))
    except (ValueError, OSError, KeyError) as err:
        raise InteropError(f"{directory}/config.json is not a config transformers can read: {err}") from None
    cfg = config_from_marian(hf_config)
    vocab = read_tokenizers(directory, hf_config, (cfg.src_vocab_size, cfg.tgt_vocab_size))
    try:  # the shapes the config implies, found without allocating them
        expected = expected_tensors(cfg, source=directory / "config.json", unique=False)
    except CheckpointError as err:
        raise InteropError(str(err)) from None
    state = state_from_marian(read_hf_weights(directory), cfg)
    for name, tensor in state.items():
        if name not in expected or tuple(tensor.shape) != expected[name][0]:
            raise InteropError(f"weights do not fit config.json: {name} has shape {tuple(tensor.shape)}, the "
                               f"config needs {expected[name][0] if name in expected else 'no such tensor'}")
    model = Transformer(cfg)  # only now: its sizes are those of the weights read
    model.load_state_dict({k: v.float() for k, v in state.items()})
    original = original_config(hf_config, cfg)
    if original is not None:  # our own export: back to the run's layout and config
        model = as_original(model, original) or model
    if origin is not None:  # a note for the run's config.json; the model never reads extra
        model.config = model.config.replace(extra={**model.config.extra, "hf_hub": origin})
    run_config = _exported_run_config(hf_config, directory) if original is not None else None
    with staged_output(out) as tmp:
        save_model(model, tmp)
        vocab.save(tmp)
        if run_config is not None:
            run_config.save(tmp / RUN_CONFIG_FILE)
    return Path(out)


def _exported_run_config(hf_config, directory: Path) -> RunConfig | None:
    """The run configuration our export recorded in ``config.json`` (``OUR_RUN_KEY``), or None."""
    stored = getattr(hf_config, OUR_RUN_KEY, None)
    if stored is None:
        return None
    try:
        return RunConfig.from_dict(stored)
    except (TypeError, ValueError, RecursionError) as err:
        raise InteropError(f"{directory}/config.json: {OUR_RUN_KEY} is not a run configuration ({err})") from None


def _run_config(run_dir: Path) -> dict | None:
    """The run's ``run_config.json`` as a mapping (checked), or None for a run without one (an imported model)."""
    path = run_dir / RUN_CONFIG_FILE
    if not path.exists():
        return None
    try:
        return RunConfig.from_dict(read_json(path)).to_dict()
    except (OSError, UnicodeDecodeError, ValueError, TypeError, RecursionError) as err:
        raise InteropError(f"cannot export {run_dir}: {path} is not a readable run configuration ({err})") from None


# ------------------------------------------------------------------------------------------------
# Writing a Marian directory.


def load_run(run_dir: str | os.PathLike[str]) -> tuple[Transformer, Vocabularies]:
    """The Transformer and vocabularies of a run directory; InteropError if it holds something else."""
    try:
        model = load_model(run_dir)
        vocab = Vocabularies.load(run_dir)
    except (CheckpointError, FileNotFoundError) as err:
        raise InteropError(f"cannot load the run directory {run_dir}: {err}") from None
    if not isinstance(model, Transformer):
        raise InteropError(f"{run_dir} holds a {type(model).__name__}; only Transformer models can be exported")
    if model.config.src_vocab_size != vocab.src.vocab_size or model.config.tgt_vocab_size != vocab.tgt.vocab_size:
        raise InteropError(f"{run_dir}: the model's vocabulary sizes ({model.config.src_vocab_size}, "
                           f"{model.config.tgt_vocab_size}) do not match its tokenizer's")
    return model.float().eval(), vocab


def export_hf(run_dir: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write ``out``, a directory ``transformers`` loads as a ``MarianMTModel`` computing our model's logits.

    A SentencePiece run directory (an imported Marian model) also gets the ``MarianTokenizer``
    files; a BPE one gets ``tokenizer.json`` + ``tokenizer_config.json`` for
    ``PreTrainedTokenizerFast`` (joint vocabulary) or our two tokenizer files (separate).
    ``config.json`` also records the run's own model config and its ``run_config.json`` (the languages
    among them), which :func:`import_hf` restores.
    """
    transformers = require("transformers", "export --format hf")
    model, vocab = load_run(run_dir)
    original = model.config
    model = to_concat_layout(model)
    kwargs = marian_config_kwargs(model.config, pad_id=vocab.tgt.pad_id, eos_id=vocab.tgt.eos_id,
                                  start_id=vocab.tgt.bos_id)
    kwargs[OUR_CONFIG_KEY] = original.to_dict()  # import_hf restores the run from it
    if (run_config := _run_config(Path(run_dir))) is not None:
        kwargs[OUR_RUN_KEY] = run_config  # and its languages and recipe from this
    hf_model = transformers.MarianMTModel(transformers.MarianConfig(**kwargs)).eval()
    state = hf_model.state_dict()
    for name, tensor in state_to_marian(model).items():
        state[name] = tensor
    hf_model.load_state_dict(state)
    with staged_output(out) as tmp:
        hf_model.save_pretrained(str(tmp))
        _write_hf_tokenizer(vocab, tmp, transformers)
    return Path(out)


def _write_hf_tokenizer(vocab: Vocabularies, out: Path, transformers) -> None:
    from transformer.text.sentencepiece import SentencePieceTokenizer

    if isinstance(vocab.src, SentencePieceTokenizer) and isinstance(vocab.tgt, SentencePieceTokenizer):
        separate = vocab.src.vocab != vocab.tgt.vocab
        (out / "source.spm").write_bytes(vocab.src.model_proto)
        (out / "target.spm").write_bytes(vocab.tgt.model_proto)
        (out / "vocab.json").write_text(json.dumps(vocab.src.vocab, ensure_ascii=False), encoding="utf-8")
        if separate:
            (out / "target_vocab.json").write_text(json.dumps(vocab.tgt.vocab, ensure_ascii=False), encoding="utf-8")
        tokenizer = transformers.MarianTokenizer(
            str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"),
            target_vocab_file=str(out / "target_vocab.json") if separate else None, separate_vocabs=separate,
            pad_token=vocab.tgt.pieces([vocab.tgt.pad_id])[0], eos_token=vocab.tgt.pieces([vocab.tgt.eos_id])[0],
            unk_token=vocab.tgt.pieces([vocab.tgt.unk_id])[0], model_max_length=512)
        tokenizer.save_pretrained(str(out))
        return
    if vocab.joint:
        vocab.save(out)
        specials = {f"{k}_token": vocab.src.pieces([getattr(vocab.src, f"{k}_id")])[0] for k in ("pad", "bos", "eos", "unk")}
        config = {"tokenizer_class": "PreTrainedTokenizerFast", **specials}
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    else:
        vocab.save(out)  # tokenizer.src.json + tokenizer.tgt.json, readable with tokenizers.Tokenizer.from_file


def copy_tokenizer_files(run_dir: Path, out: Path) -> list[str]:
    """Copy the run directory's tokenizer file(s) into ``out``; returns the names copied."""
    names = [n for n in RUN_TOKENIZER_FILES if (run_dir / n).is_file()]
    for name in names:
        shutil.copyfile(run_dir / name, out / name)
    return names


def piece_list(tokenizer: Tokenizer) -> list[str]:
    """Every token string of ``tokenizer`` in id order (``pieces(range(vocab_size))``)."""
    return tokenizer.pieces(range(tokenizer.vocab_size))
