"""The check every config runs on a dict read from JSON or YAML before building itself.

``ModelConfig.from_dict``, ``RNNConfig.from_dict`` and the run configuration
(``transformer.training.config``: its sections ``data``/``model``/``train``) check the same three
things with the same wording: the value is a mapping, it has no unknown keys (the error lists the
valid ones) and it has the required keys. Standard library only, so any config module can import it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Collection, Sequence


def field_names(cls: type) -> list[str]:
    """The field names of a dataclass, in declaration order."""
    return [f.name for f in dataclasses.fields(cls)]


def check_keys(
    data: Any, valid: Collection[str], *, mapping: str, owner: str, noun: str = "keys",
    required: Sequence[str] = (), config: str = "config",
) -> dict[str, Any]:
    """Return ``data`` when it is a dict whose keys are all in ``valid`` and include ``required``.

    Otherwise raise ``ValueError``: ``"{mapping}, got {type}"`` for a non-dict (``mapping``: e.g.
    ``"a model config must be a JSON object"``), ``"unknown {owner} {noun} [...]; valid {noun}: [...]"``
    (sorted) for unknown keys, ``"{config} is missing required keys [...]"`` (in ``required``'s order).
    """
    if not isinstance(data, dict):
        raise ValueError(f"{mapping}, got {type(data).__name__}")
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise ValueError(f"unknown {owner} {noun} {unknown}; valid {noun}: {sorted(valid)}")
    missing = [key for key in required if key not in data]
    if missing:
        raise ValueError(f"{config} is missing required keys {missing}")
    return data
