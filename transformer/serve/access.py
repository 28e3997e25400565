"""API keys and request limits of the LibreTranslate API, as LibreTranslate answers them.

A server may run open (no keys: every client limited by its address), with optional keys (a
key chooses its own limits, an unknown key is refused), or with keys required (a request
without a valid key is refused, unless it comes from a browser page whose ``Origin`` the
operator allows). :class:`KeyRing` holds the keys and the limits and decides each request;
its refusals are :class:`AccessDenied` exceptions carrying LibreTranslate's status and message:

=========================  ======  ====================================================
exception                  status  message
=========================  ======  ====================================================
:class:`InvalidKey`        403     ``Invalid API key``
:class:`KeyRequired`       400     ``Please contact the server operator to get an API
                                   key`` (or ``Visit URL to get an API key``)
:class:`TextTooLong`       400     ``Invalid request: request (N) exceeds text limit (L)``
:class:`RateLimited`       429     ``Slowdown: N per 1 minute`` (or ``per 1 day``)
:class:`Banned`            403     ``Too many request limits violations``
=========================  ======  ====================================================

The keys file is plain text, one key a line, each followed by the limits it sets (any it does
not set are the server's)::

    # key                                 limits (optional)
    3f1c9a0e-7b2d-4a8e-9c1f-2b6d8e4a5c71  req_limit=120 char_limit=5000
    ops-dashboard-key                     req_limit=unlimited
    partner-key-2f9d                      req_limit=30 daily_limit=5000   # a trial

``req_limit`` is requests per minute, ``daily_limit`` requests per day (both over a sliding
window), ``char_limit`` characters per text; each a positive integer or ``unlimited``. ``#``
starts a comment; blank lines are skipped. A key is 8 to 256 characters from ``A-Z a-z 0-9 . _
~ + / -``. :func:`read_keys` refuses a bad line with a :class:`KeysFileError` naming the file
and the line.

The counters live in memory, per client: a valid key's requests are counted together wherever
they come from (LibreTranslate counts them per address), any other request by its client
address. Each window is counted in 60 slots (a request leaves the count up to one slot early),
so a client's state is a few small numbers whatever the limit, and at most ``max_clients``
clients are remembered (the least recently seen forgotten first). A request passes while its
client's count is under the limit and then counts for its cost (a batch of n texts costs n), as
LibreTranslate deducts a batch after letting it through; so a batch larger than the limit
still passes once the window is empty. A request refused for a limit is not counted; one
refused for its key or its length is, so guessing keys spends the address's quota.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from transformer.errors import UserError
from transformer.run_files import RunFileError, read_bytes

# -1 is LibreTranslate's "no limit" (--char-limit -1, charLimit in /frontend/settings).
UNLIMITED = -1
LIMIT_NAMES = ("req_limit", "char_limit", "daily_limit")
_KEY = re.compile(r"[A-Za-z0-9._~+/-]{8,256}")
_MINUTE, _DAY = 60.0, 86400.0
_SLOTS = 60  # slots per window: the counting's resolution (a minute's slot is a second)


class AccessDenied(Exception):
    """A request refused by :meth:`KeyRing.check`: ``status`` and ``message`` are the HTTP
    answer (``{"error": message}``); ``retry_after`` the seconds to wait, when known."""

    status = 403

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        """The answer's headers: ``Retry-After`` when the wait is known."""
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


class InvalidKey(AccessDenied):
    """An ``api_key`` that is not in the keys file (403)."""

    status = 403


class KeyRequired(AccessDenied):
    """No valid key where the server requires one (400, as LibreTranslate answers it)."""

    status = 400


class TextTooLong(AccessDenied):
    """A text over the character limit of its key or of the server (400)."""

    status = 400


class RateLimited(AccessDenied):
    """Over a request limit (429); ``retry_after`` says when the window has room again."""

    status = 429


class Banned(AccessDenied):
    """A client refused for its repeated 429s (403), until they age out of the ban window."""

    status = 403


class KeysFileError(UserError):
    """A keys file that cannot be read, or a bad line in it (the message names the file and line)."""


@dataclass(frozen=True)
class KeyLimits:
    """The limits one key sets: each ``None`` (the server's), :data:`UNLIMITED` or a positive count."""

    req_limit: int | None = None
    char_limit: int | None = None
    daily_limit: int | None = None


def _limit_value(text: str) -> int:
    if text == "unlimited":
        return UNLIMITED
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"{text!r} is not a positive integer or 'unlimited'")
    return int(text)


def parse_keys(text: str, source: str = "<keys>") -> dict[str, KeyLimits]:
    """The keys of a keys file's text (format in the module doc), by key.

    Args:
        text: the file's content.
        source: the name errors give the file (its path).

    Raises:
        KeysFileError: on the first bad line: ``SOURCE:LINE: what is wrong``.
    """
    keys: dict[str, KeyLimits] = {}
    where: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        key, settings = fields[0], fields[1:]

        def bad(problem: str) -> KeysFileError:
            return KeysFileError(f"{source}:{number}: {problem}")

        if not _KEY.fullmatch(key):
            raise bad(f"{key[:40]!r} is not a key: 8 to 256 characters from A-Z a-z 0-9 . _ ~ + / -")
        if key in where:
            raise bad(f"the key is already given on line {where[key]}")
        limits: dict[str, int] = {}
        for setting in settings:
            name, equals, value = setting.partition("=")
            if not equals or name not in LIMIT_NAMES:
                raise bad(f"{setting!r} is not a limit: write {', '.join(n + '=N' for n in LIMIT_NAMES)} "
                          "(N a positive integer or 'unlimited')")
            if name in limits:
                raise bad(f"{name} is given twice")
            try:
                limits[name] = _limit_value(value)
            except UserError as err:
                raise bad(f"{name}: {err}") from None
        keys[key] = KeyLimits(**limits)
        where[key] = number
    return keys


MAX_KEYS_BYTES = 16 * 1024 * 1024  # a keys file's size: some 100,000 keys with their limits


def read_keys(path: str | Path) -> dict[str, KeyLimits]:
    """The keys of the keys file at ``path`` (:func:`parse_keys`).

    Read as a run's files are (:func:`transformer.run_files.read_bytes`): a regular file (a FIFO or
    a device is refused without being opened for long) of at most :data:`MAX_KEYS_BYTES`, UTF-8
    with or without a byte order mark.

    Raises:
        KeysFileError: the file cannot be read, is not a regular file, is too large, is not UTF-8,
            or has a bad line.
    """
    try:
        data = read_bytes(path, limit=MAX_KEYS_BYTES)
        text = data.decode("utf-8-sig")  # a BOM (Windows' editors write one) is not part of the first key
    except UnicodeDecodeError as err:
        raise KeysFileError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except (OSError, RunFileError) as err:
        message = str(err) if isinstance(err, RunFileError) else f"{path}: {err.strerror or err}"
        raise KeysFileError(f"cannot read the keys file: {message}") from None
    return parse_keys(text, str(path))


@dataclass(frozen=True)
class AccessPolicy:
    """The server's limits, for requests without a key and for keys that do not set their own.

    req_limit: requests per minute per client (:data:`UNLIMITED`: none; LibreTranslate's
        ``--req-limit``).
    daily_req_limit: requests per day per client (:data:`UNLIMITED`: none).
    char_limit: characters per text (:data:`UNLIMITED`: none; ``--char-limit``).
    require_key: every request needs a valid key (but see ``key_origin``).
    key_origin: a regular expression; a request whose ``Origin`` header matches it from its start
        (``re.match``, as LibreTranslate's ``--require-api-key-origin``) needs no key. Setting it
        requires keys from every other request.
    get_key_link: where users get a key, named in the :class:`KeyRequired` message.
    ban_threshold: this many 429s within ``ban_window_s`` and the client is :class:`Banned` until
        they age out (0: never; LibreTranslate's ``--req-flood-threshold``).
    ban_window_s: see ``ban_threshold``.
    max_clients: clients whose counters are kept (the least recently seen are forgotten).
    """

    req_limit: int = UNLIMITED
    daily_req_limit: int = UNLIMITED
    char_limit: int = UNLIMITED
    require_key: bool = False
    key_origin: str | None = None
    get_key_link: str | None = None
    ban_threshold: int = 0
    ban_window_s: float = 3600.0
    max_clients: int = 10_000

    def __post_init__(self) -> None:
        for name in ("req_limit", "daily_req_limit", "char_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != UNLIMITED):
                raise UserError(f"{name} must be a positive integer or {UNLIMITED} (no limit), got {value!r}")
        if self.ban_threshold < 0:
            raise UserError(f"ban_threshold must be >= 0, got {self.ban_threshold}")
        if not self.ban_window_s > 0:
            raise UserError(f"ban_window_s must be > 0, got {self.ban_window_s}")
        if self.max_clients < 1:
            raise UserError(f"max_clients must be >= 1, got {self.max_clients}")
        if self.key_origin is not None:
            try:
                re.compile(self.key_origin)
            except re.error as err:
                raise UserError(f"key_origin is not a regular expression: {err}") from None


class _Window:
    """Events of a sliding window counted in :data:`_SLOTS` slots: ``[slot, count]`` pairs, oldest first."""

    __slots__ = ("width", "slots", "total")

    def __init__(self, seconds: float) -> None:
        self.width = seconds / _SLOTS
        self.slots: deque[list[int]] = deque()
        self.total = 0

    def count(self, now: float) -> int:
        """Events in the window ending at ``now`` (the slots older than the window dropped)."""
        oldest = math.floor(now / self.width) - _SLOTS + 1
        while self.slots and self.slots[0][0] < oldest:
            self.total -= self.slots.popleft()[1]
        return self.total

    def add(self, now: float, cost: int) -> None:
        slot = math.floor(now / self.width)
        if self.slots and self.slots[-1][0] == slot:
            self.slots[-1][1] += cost
        else:
            self.slots.append([slot, cost])
        self.total += cost

    def wait(self, now: float, room: int) -> int:
        """Whole seconds until ``room`` events have left the window (at least 1)."""
        freed = 0
        for slot, count in self.slots:
            freed += count
            if freed >= room:
                return max(1, math.ceil((slot + _SLOTS) * self.width - now))
        return max(1, math.ceil(_SLOTS * self.width))


class _Client:
    __slots__ = ("minute", "day", "strikes")

    def __init__(self) -> None:
        self.minute = _Window(_MINUTE)
        self.day = _Window(_DAY)
        self.strikes: deque[float] = deque()


def _digest(api_key: str) -> bytes:
    # Keys are looked up and counted by their hash: a lookup's timing says nothing about a key's
    # characters, and the client table holds no key.
    return hashlib.sha256(api_key.encode("utf-8", "surrogatepass")).digest()


class KeyRing:
    """The keys and limits of a server, and the per-client counters that enforce them.

    Args:
        keys: the valid keys and their limits (:func:`read_keys`); ``None``: the server has no
            keys, and a request's ``api_key`` is ignored (as LibreTranslate without
            ``--api-keys``).
        policy: the server's limits.
        clock: seconds, monotonic (injected by tests).

    Thread-safe: one lock guards the counters, held for a few dictionary operations (no I/O),
    so an async server may call :meth:`check` directly.
    """

    def __init__(self, keys: Mapping[str, KeyLimits] | None = None, policy: AccessPolicy | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy or AccessPolicy()
        if keys is None and (self.policy.require_key or self.policy.key_origin is not None):
            raise UserError("keys are required (require_key or key_origin) but no keys were given")
        self._keys = None if keys is None else {_digest(k): v for k, v in keys.items()}
        self._origin = re.compile(self.policy.key_origin) if self.policy.key_origin is not None else None
        self._clock = clock
        self._clients: OrderedDict[object, _Client] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path | None, policy: AccessPolicy | None = None, **kwargs) -> KeyRing:
        """A key ring with the keys of the keys file at ``path`` (``None``: no keys).

        Raises:
            KeysFileError: see :func:`read_keys`.
        """
        return cls(None if path is None else read_keys(path), policy, **kwargs)

    @property
    def api_keys(self) -> bool:
        """Whether the server has keys (``apiKeys`` in ``/frontend/settings``)."""
        return self._keys is not None

    @property
    def key_required(self) -> bool:
        """Whether some requests need a key (``keyRequired`` in ``/frontend/settings``)."""
        return self.policy.require_key or self._origin is not None

    @property
    def clients(self) -> int:
        """Clients whose counters are kept now."""
        return len(self._clients)

    def limits(self, api_key: str | None) -> KeyLimits:
        """The limits that apply to a request with ``api_key`` (the server's where the key sets none,
        or the key is unknown or absent); every field an int, :data:`UNLIMITED` for none."""
        own = self._lookup(api_key) or KeyLimits()
        policy = self.policy
        return KeyLimits(
            req_limit=policy.req_limit if own.req_limit is None else own.req_limit,
            char_limit=policy.char_limit if own.char_limit is None else own.char_limit,
            daily_limit=policy.daily_req_limit if own.daily_limit is None else own.daily_limit,
        )

    def _lookup(self, api_key: str | None) -> KeyLimits | None:
        if self._keys is None or not api_key:
            return None
        return self._keys.get(_digest(api_key))

    def check(self, api_key: str | None, *, client: str | None, origin: str | None = None,
              chars: int = 0, cost: int = 1) -> None:
        """Let a request through, counting it, or refuse it with an :class:`AccessDenied`.

        The checks run in LibreTranslate's order: a banned client, the request limits (a valid
        key's own counters, else the client address's), the key, the character limit.

        Args:
            api_key: the request's ``api_key`` parameter (``None`` or ``""``: none).
            client: the client's address (the counters of requests without a valid key).
            origin: the request's ``Origin`` header, if any.
            chars: the length of the request's longest text (each text is held to the limit).
            cost: what the request counts for: 1, or the number of texts of a batch, as
                LibreTranslate counts them.

        Raises:
            Banned, RateLimited, InvalidKey, KeyRequired, TextTooLong: see the module doc.
        """
        if cost < 1:
            raise ValueError(f"cost must be >= 1, got {cost}")
        own = self._lookup(api_key)
        limits = self.limits(api_key)
        identity: object = ("key", _digest(api_key)) if own is not None else ("address", client or "")
        self._count(identity, limits, cost)
        if api_key and self._keys is not None and own is None:
            raise InvalidKey("Invalid API key")
        if own is None and self.key_required and not (
                self._origin is not None and origin and self._origin.match(origin)):
            link = self.policy.get_key_link
            raise KeyRequired(f"Visit {link} to get an API key" if link
                              else "Please contact the server operator to get an API key")
        if limits.char_limit != UNLIMITED and chars > limits.char_limit:
            raise TextTooLong(f"Invalid request: request ({chars}) exceeds text limit ({limits.char_limit})")

    def _count(self, identity: object, limits: KeyLimits, cost: int) -> None:
        """Count a request against its client's windows, or raise :class:`Banned` / :class:`RateLimited`."""
        with self._lock:
            now = self._clock()
            state = self._clients.get(identity)
            if state is None:
                state = self._clients[identity] = _Client()
                while len(self._clients) > self.policy.max_clients:
                    self._clients.popitem(last=False)
            else:
                self._clients.move_to_end(identity)
            strikes = state.strikes
            while strikes and strikes[0] <= now - self.policy.ban_window_s:
                strikes.popleft()
            if self.policy.ban_threshold and len(strikes) >= self.policy.ban_threshold:
                retry = strikes[len(strikes) - self.policy.ban_threshold] + self.policy.ban_window_s - now
                raise Banned("Too many request limits violations", retry_after=max(1, math.ceil(retry)))
            for window, limit, period in ((state.minute, limits.req_limit, "1 minute"),
                                          (state.day, limits.daily_limit, "1 day")):
                if limit == UNLIMITED:
                    continue
                used = window.count(now)
                if used >= limit:
                    if self.policy.ban_threshold:
                        strikes.append(now)
                    raise RateLimited(f"Slowdown: {limit} per {period}",
                                      retry_after=window.wait(now, used - limit + 1))
            for window, limit in ((state.minute, limits.req_limit), (state.day, limits.daily_limit)):
                if limit != UNLIMITED:
                    window.add(now, cost)
