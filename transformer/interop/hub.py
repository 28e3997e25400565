"""Models by name: ``import-hf Helsinki-NLP/opus-mt-fr-en`` fetches the model with ``huggingface_hub``.

An argument that is a directory is used as it is; anything else must be a Hub model name
(``org/name``), fetched with ``snapshot_download`` into the Hub cache, so ``HF_HUB_CACHE`` /
``HF_HOME``, ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` and a logged-in token all work as in every
Hugging Face library, and a model fetched once imports again without network. Only the files
the importer reads are fetched (``allow_patterns``): the config, the tokenizer files and one
weights format, safetensors when the repository has it, else ``pytorch_model.bin`` (opus-mt
repositories also hold TensorFlow and Rust weights, which are never downloaded).
"""

from __future__ import annotations

import os
from pathlib import Path

from transformer.interop._common import MARIAN_TOKENIZER_FILES, InteropError, require
from transformer.text import JOINT_FILE, SRC_FILE, TGT_FILE

# config.json, then every tokenizer layout import_hf reads: Marian's, and the run tokenizer
# files export --format hf writes for a BPE run.
METADATA_FILES = ("config.json", "tokenizer_config.json", *MARIAN_TOKENIZER_FILES, "target_vocab.json",
                  JOINT_FILE, SRC_FILE, TGT_FILE)
SAFETENSORS_FILES = ("model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors")
BIN_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*-of-*.bin")
LOCAL_HINT = ("or pass a local model directory (one transformers' save_pretrained wrote, or a copy of the "
              "model's files): transformer import-hf path/to/model-dir OUT_RUN_DIR")


def locate_model(source: str | os.PathLike[str], revision: str | None = None) -> tuple[Path, dict[str, str] | None]:
    """The model directory ``source`` names, and where it came from (``None`` for a local directory).

    A directory is returned as it is; a Hub model name is fetched (or found in the Hub cache)
    and its snapshot directory returned with ``{"repo_id": ..., "commit": ...}``.

    Raises:
        InteropError: ``source`` is a file, neither a directory nor a valid model name, or the
            model cannot be fetched (no network and no cached copy, unknown model or revision).
    """
    path = Path(source).expanduser()
    if path.is_dir():
        if revision is not None:
            raise InteropError(f"--revision applies to a model name on the Hugging Face Hub, not to the local "
                               f"directory {source}")
        return path, None
    if path.exists():
        raise InteropError(f"{source} is a file, not a model directory")
    name = str(source)
    require("huggingface_hub", "import-hf with a model name")
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        raise InteropError(f"{name} is neither a directory nor a Hugging Face model name (org/name, e.g. "
                           "Helsinki-NLP/opus-mt-fr-en)") from None
    folder = fetch(name, revision)
    return folder, {"repo_id": name, "commit": folder.name}


def fetch(repo_id: str, revision: str | None = None) -> Path:
    """The snapshot directory of ``repo_id`` at ``revision`` (default: main), fetched into the Hub cache."""
    require("huggingface_hub", "import-hf with a model name")
    from huggingface_hub import constants, errors, snapshot_download

    at = f" at revision {revision!r}" if revision else ""
    try:
        patterns = [*METADATA_FILES, *SAFETENSORS_FILES]
        folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns))
        if not any((folder / name).is_file() for name in SAFETENSORS_FILES[:2]):
            # No safetensors weights in the repository: the older pickle format, fetched only now
            # so that a repository holding both formats is never downloaded twice.
            patterns = [*METADATA_FILES, *BIN_FILES]
            folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns))
    except errors.LocalEntryNotFoundError:  # the Hub cannot be reached and the cache lacks the model
        reason = ("HF_HUB_OFFLINE=1 is set" if constants.HF_HUB_OFFLINE
                  else f"the Hugging Face Hub ({constants.ENDPOINT}) cannot be reached")
        raise InteropError(f"cannot fetch {repo_id}{at}: {reason} and the Hub cache ({constants.HF_HUB_CACHE}) "
                           f"holds no complete copy of it; fetch it once with network, {LOCAL_HINT}") from None
    except errors.RevisionNotFoundError:
        raise InteropError(f"the model {repo_id} has no revision {revision!r} on the Hugging Face Hub (give a "
                           "branch, a tag or a commit hash)") from None
    except errors.GatedRepoError:
        raise InteropError(f"the model {repo_id} is gated on the Hugging Face Hub: accept its conditions on the "
                           "model's page, then log in (hf auth login)") from None
    except errors.RepositoryNotFoundError:
        raise InteropError(f"{repo_id} is neither a directory nor a model on the Hugging Face Hub (a private "
                           "model needs a login: hf auth login)") from None
    except (errors.HfHubHTTPError, errors.FileMetadataError, *_transport_errors()) as err:
        # The Hub answered with an error, or something that is not a Hub answered (a proxy, a
        # wrong HF_ENDPOINT); a full or read-only disk is left to the CLI's environment errors.
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InteropError(f"cannot fetch {repo_id}{at} from the Hugging Face Hub: {first}; {LOCAL_HINT}") from None
    return folder


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's own errors (a proxy refusing the connection), which huggingface_hub lets through."""
    try:
        import httpx2  # huggingface_hub's HTTP client
    except ImportError:
        return ()
    return (httpx2.HTTPError,)
