"""The checks every config runs on a dict read from JSON or YAML before building itself.

``ModelConfig.from_dict``, ``RNNConfig.from_dict`` and the run configuration
(``transformer.run.config``: its sections ``data``/``model``/``train``) check the same three
things with the same wording: the value is a mapping, it has no unknown keys (the error lists the
valid ones) and it has the required keys.

Every numeric field of those configs also declares its valid values once, as a :class:`Range` in
its dataclass field's metadata (``field(default=..., metadata=positive_int())``), and one function
checks them all: :func:`check_value` (one value), :func:`check_fields` (a config object) and
:func:`check_mapping` (a dict of settings, such as the run config's ``model`` section). Numbers must
be finite (no NaN, no infinity) and never booleans; a refusal names the key, the value and the
range, e.g. ``train.adam_beta1 must be in [0, 1), got 5.0``; every refusal is a
:class:`~transformer.errors.UserError`. :func:`describe_fields` lists the ranges for documentation.
Standard library only (and ``transformer.errors``, which imports nothing), so any config module can import it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

from transformer.errors import UserError

RANGE = "range"  # the dataclass field metadata key that holds a field's Range


def field_names(cls: type) -> list[str]:
    """The field names of a dataclass, in declaration order."""
    return [f.name for f in dataclasses.fields(cls)]


def check_keys(
    data: Any, valid: Collection[str], *, mapping: str, owner: str, noun: str = "keys",
    required: Sequence[str] = (), config: str = "config",
) -> dict[str, Any]:
    """Return ``data`` when it is a dict whose keys are all in ``valid`` and include ``required``.

    Otherwise raise ``UserError``: ``"{mapping}, got {type}"`` for a non-dict (``mapping``: e.g.
    ``"a model config must be a JSON object"``), ``"unknown {owner} {noun} [...]; valid {noun}: [...]"``
    (sorted) for unknown keys, ``"{config} is missing required keys [...]"`` (in ``required``'s order).
    """
    if not isinstance(data, dict):
        raise UserError(f"{mapping}, got {type(data).__name__}")
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise UserError(f"unknown {owner} {noun} {unknown}; valid {noun}: {sorted(valid)}")
    missing = [key for key in required if key not in data]
    if missing:
        raise UserError(f"{config} is missing required keys {missing}")
    return data


# ------------------------------------------------------------------------------------------------
# Ranges of numeric settings.
@dataclass(frozen=True)
class Range:
    """The valid values of one numeric setting.

    ``kind`` is ``int`` or ``float``; ``low``/``high`` bound it (``None``: unbounded), inclusive
    unless ``low_open``/``high_open``. A float must also be finite. ``null`` (``None``) is valid
    only when ``none_means`` says what it stands for (e.g. ``"no limit"``); ``note`` adds what
    particular values mean (e.g. ``"0 = off"``) to the description.
    """

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    none_means: str | None = None
    note: str = ""

    @property
    def optional(self) -> bool:
        return self.none_means is not None

    def describe(self) -> str:
        """The range in words: ``a positive integer``, ``in [0, 1)``, ``> 0 and finite`` ..."""
        low, high = _number(self.low), _number(self.high)
        if self.kind is int:
            if self.low == 0 and self.low_open and self.high is None:
                text = "a positive integer"
            elif self.high is None:
                text = f"an integer {'>' if self.low_open else '>='} {low}" if self.low is not None else "an integer"
            elif self.low is None:
                text = f"an integer {'<' if self.high_open else '<='} {high}"
            else:
                text = f"an integer in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        elif self.low is not None and self.high is not None:
            text = f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {low} and finite"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '<='} {high} and finite"
        else:
            text = "a finite number"
        if self.note:
            text += f" ({self.note})"
        if self.optional:
            text += f", or null ({self.none_means})"
        return text

    def contains(self, value: Any) -> bool:
        """Whether ``value`` (already of the right type) lies in the range."""
        if value is None:
            return self.optional
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True


def _number(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else repr(x)


def check_value(key: str, value: Any, valid: Range, *, parse_text: bool = False) -> Any:
    """``value`` if it is valid for the setting ``key``, ints turned into floats for a float setting
    (and, with ``parse_text``, number strings such as YAML 1.1's ``"1e-9"`` into numbers).
    Otherwise ``UserError("{key} must be {range}, got {value!r}")``: a number out of range, a
    value of another type (a string, a boolean, a float for an integer setting), NaN or infinity.
    """
    checked = _as_kind(value, valid, parse_text)
    if checked is _BAD or not valid.contains(checked):
        shown = value if checked is _BAD else checked
        raise UserError(f"{key} must be {valid.describe()}, got {shown!r}")
    return checked


def is_kind(value: Any, valid: Range, *, parse_text: bool = False) -> bool:
    """Whether ``value`` is a number of the range's kind (or null), in the range or not."""
    return _as_kind(value, valid, parse_text) is not _BAD


_BAD = object()


def _as_kind(value: Any, valid: Range, parse_text: bool) -> Any:
    if value is None or isinstance(value, bool):
        return None if value is None else _BAD
    if parse_text and isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if valid.kind is int else float(text)
        except ValueError:
            return _BAD
    if valid.kind is int:
        return value if isinstance(value, int) else _BAD
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # an int beyond the float range
            return _BAD
    return value if isinstance(value, float) else _BAD


def ranges(cls: type) -> dict[str, Range]:
    """The :class:`Range` of each numeric field of the dataclass ``cls`` (or of an instance's class)."""
    return {f.name: f.metadata[RANGE] for f in dataclasses.fields(cls) if RANGE in f.metadata}


def check_fields(config: Any, prefix: str) -> None:
    """Check every field of the dataclass instance ``config`` that has a :class:`Range`; the error
    names the field as ``{prefix}.{name}``."""
    for name, valid in ranges(config).items():
        check_value(f"{prefix}.{name}", getattr(config, name), valid)


def check_mapping(cls: type, values: Mapping[str, Any], prefix: str, *, parse_text: bool = False) -> dict[str, Any]:
    """``values`` (settings of the dataclass ``cls``) with each ranged one checked by
    :func:`check_value` (named ``{prefix}.{key}``) and normalised; other keys are left as they are."""
    valid = ranges(cls)
    return {key: check_value(f"{prefix}.{key}", value, valid[key], parse_text=parse_text) if key in valid else value
            for key, value in values.items()}


def describe_fields(cls: type, prefix: str) -> list[str]:
    """``"{prefix}.{name}: {range}"`` for each ranged field of ``cls``, for documentation and ``--help``."""
    return [f"{prefix}.{name}: {valid.describe()}" for name, valid in ranges(cls).items()]


# Field metadata for the common ranges: ``field(default=8, metadata=positive_int())``.
def valid(kind: type, low: float | None = None, high: float | None = None, *, low_open: bool = False,
          high_open: bool = False, none_means: str | None = None, note: str = "") -> dict[str, Range]:
    """Field metadata holding a :class:`Range` with these bounds."""
    return {RANGE: Range(kind, low, high, low_open, high_open, none_means, note)}


def positive_int(*, none_means: str | None = None, note: str = "") -> dict[str, Range]:
    """An integer > 0 ("a positive integer")."""
    return valid(int, 0, low_open=True, none_means=none_means, note=note)


def int_at_least(low: int, high: int | None = None, *, none_means: str | None = None,
                 note: str = "") -> dict[str, Range]:
    """An integer >= ``low`` (and <= ``high`` when given)."""
    return valid(int, low, high, none_means=none_means, note=note)


def probability() -> dict[str, Range]:
    """A float in [0, 1): dropout rates, label smoothing, Adam's betas."""
    return valid(float, 0.0, 1.0, high_open=True)


def positive(*, none_means: str | None = None, note: str = "") -> dict[str, Range]:
    """A finite float > 0."""
    return valid(float, 0.0, low_open=True, none_means=none_means, note=note)


def at_least(low: float, *, none_means: str | None = None, note: str = "") -> dict[str, Range]:
    """A finite float >= ``low``."""
    return valid(float, low, none_means=none_means, note=note)
