"""API keys and request limits (transformer/serve/access.py): keys files, LibreTranslate's refusals,
the sliding windows on an injected clock, memory bounds, threads."""

from __future__ import annotations

import threading

import pytest

from transformer.serve.access import (
    UNLIMITED,
    AccessDenied,
    AccessPolicy,
    Banned,
    InvalidKey,
    KeyLimits,
    KeyRequired,
    KeyRing,
    KeysFileError,
    RateLimited,
    TextTooLong,
    parse_keys,
    read_keys,
)

KEY = "3f1c9a0e-7b2d-4a8e-9c1f-2b6d8e4a5c71"
OTHER = "partner-key-2f9d"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ring(keys=None, clock=None, **policy) -> KeyRing:
    return KeyRing(keys, AccessPolicy(**policy), clock=clock or Clock())


# --- the keys file -------------------------------------------------------------------------------

def test_keys_file_format(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text(
        "# key                                 limits\n"
        f"{KEY}  req_limit=120 char_limit=5000\n"
        "\n"
        "ops-dashboard-key   req_limit=unlimited   # the dashboard\n"
        f"{OTHER} daily_limit=5000\n", encoding="utf-8")
    assert read_keys(path) == {
        KEY: KeyLimits(req_limit=120, char_limit=5000),
        "ops-dashboard-key": KeyLimits(req_limit=UNLIMITED),
        OTHER: KeyLimits(daily_limit=5000),
    }


@pytest.mark.parametrize("line, problem", [
    ("short", "'short' is not a key"),
    ("has#hash-in-it", "'has' is not a key"),
    ("key-with-é-letter", "is not a key"),
    (f"{KEY} req_limit=0", "req_limit: '0' is not a positive integer or 'unlimited'"),
    (f"{KEY} req_limit=-1", "req_limit: '-1' is not a positive integer"),
    (f"{KEY} char_limit=lots", "char_limit: 'lots' is not a positive integer"),
    (f"{KEY} rate=5", "'rate=5' is not a limit"),
    (f"{KEY} 120", "'120' is not a limit"),
    (f"{KEY} req_limit=5 req_limit=6", "req_limit is given twice"),
])
def test_keys_file_errors_name_the_line(line, problem):
    with pytest.raises(KeysFileError) as caught:
        parse_keys(f"# keys\n\n{line}\n", "keys.txt")
    assert str(caught.value).startswith("keys.txt:3: ")
    assert problem in str(caught.value)


def test_keys_file_duplicate_key_names_both_lines():
    with pytest.raises(KeysFileError, match=r"^keys.txt:3: the key is already given on line 1$"):
        parse_keys(f"{KEY}\n{OTHER}\n{KEY} req_limit=5\n", "keys.txt")


def test_keys_file_unreadable(tmp_path):
    with pytest.raises(KeysFileError, match="cannot read the keys file"):
        read_keys(tmp_path / "missing.txt")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9-key-12345\n")
    with pytest.raises(KeysFileError, match="not UTF-8"):
        read_keys(tmp_path / "latin1.txt")


def test_bad_policy_is_refused():
    with pytest.raises(ValueError, match="req_limit must be a positive integer or -1"):
        AccessPolicy(req_limit=0)
    with pytest.raises(ValueError, match="key_origin is not a regular expression"):
        AccessPolicy(key_origin="(")
    with pytest.raises(ValueError, match="no keys were given"):
        KeyRing(None, AccessPolicy(require_key=True))


# --- keys ----------------------------------------------------------------------------------------

def test_without_keys_any_api_key_is_ignored():
    keys = ring()
    assert not keys.api_keys and not keys.key_required
    keys.check("anything", client="10.0.0.1")
    keys.check(None, client="10.0.0.1")


def test_unknown_key_is_refused_with_403():
    keys = ring({KEY: KeyLimits()})
    keys.check(KEY, client="10.0.0.1")
    keys.check(None, client="10.0.0.1")  # keys are optional here
    keys.check("", client="10.0.0.1")
    with pytest.raises(InvalidKey) as caught:
        keys.check("bogus-key-123", client="10.0.0.1")
    assert (caught.value.status, caught.value.message, caught.value.headers) == (403, "Invalid API key", {})
    assert isinstance(caught.value, AccessDenied)


def test_required_key_messages():
    keys = ring({KEY: KeyLimits()}, require_key=True)
    with pytest.raises(KeyRequired) as caught:
        keys.check(None, client="10.0.0.1")
    assert (caught.value.status, caught.value.message) == (
        400, "Please contact the server operator to get an API key")
    keys.check(KEY, client="10.0.0.1")
    linked = ring({KEY: KeyLimits()}, require_key=True, get_key_link="https://keys.example.com")
    with pytest.raises(KeyRequired, match=r"^Visit https://keys.example.com to get an API key$"):
        linked.check("", client="10.0.0.1")


def test_origin_exempts_from_the_key():
    keys = ring({KEY: KeyLimits()}, key_origin=r"^https://allowed\.example\.com$")
    assert keys.key_required
    keys.check(None, client="10.0.0.1", origin="https://allowed.example.com")
    for origin in (None, "", "https://evil.example.com", "https://allowed.example.com.evil.net"):
        with pytest.raises(KeyRequired):
            keys.check(None, client="10.0.0.1", origin=origin)
    keys.check(KEY, client="10.0.0.1", origin="https://evil.example.com")
    with pytest.raises(InvalidKey):  # an allowed origin does not excuse a wrong key
        keys.check("bogus-key-123", client="10.0.0.1", origin="https://allowed.example.com")


# --- character limits ----------------------------------------------------------------------------

def test_char_limits_default_and_per_key():
    keys = ring({KEY: KeyLimits(char_limit=3), OTHER: KeyLimits(char_limit=UNLIMITED)}, char_limit=10)
    keys.check(None, client="a", chars=10)
    with pytest.raises(TextTooLong) as caught:
        keys.check(None, client="a", chars=11)
    assert (caught.value.status, caught.value.message) == (
        400, "Invalid request: request (11) exceeds text limit (10)")
    keys.check(KEY, client="a", chars=3)
    with pytest.raises(TextTooLong, match=r"request \(4\) exceeds text limit \(3\)"):
        keys.check(KEY, client="a", chars=4)
    keys.check(OTHER, client="a", chars=1_000_000)
    assert keys.limits(KEY) == KeyLimits(req_limit=UNLIMITED, char_limit=3, daily_limit=UNLIMITED)
    assert keys.limits("bogus-key-123").char_limit == 10


# --- request limits ------------------------------------------------------------------------------

def test_per_minute_limit_per_address():
    clock = Clock()
    keys = ring(clock=clock, req_limit=3)
    for _ in range(3):
        keys.check(None, client="10.0.0.1")
    with pytest.raises(RateLimited) as caught:
        keys.check(None, client="10.0.0.1")
    assert (caught.value.status, caught.value.message) == (429, "Slowdown: 3 per 1 minute")
    assert caught.value.retry_after == 60
    assert caught.value.headers == {"Retry-After": "60"}
    keys.check(None, client="10.0.0.2")  # another address has its own count
    clock.now += 59
    with pytest.raises(RateLimited) as caught:
        keys.check(None, client="10.0.0.1")
    assert caught.value.retry_after == 1
    clock.now += 1  # the first three leave the window
    for _ in range(3):
        keys.check(None, client="10.0.0.1")
    with pytest.raises(RateLimited):
        keys.check(None, client="10.0.0.1")


def test_window_slides():
    clock = Clock(0.0)
    keys = ring(clock=clock, req_limit=2)
    keys.check(None, client="a")
    clock.now = 30
    keys.check(None, client="a")
    with pytest.raises(RateLimited) as caught:
        keys.check(None, client="a")
    assert caught.value.retry_after == 30
    clock.now = 60  # the first request has left, the second has not
    keys.check(None, client="a")
    with pytest.raises(RateLimited):
        keys.check(None, client="a")


def test_refused_requests_are_not_counted():
    clock = Clock(0.0)
    keys = ring(clock=clock, req_limit=1)
    keys.check(None, client="a")
    for _ in range(100):
        with pytest.raises(RateLimited):
            keys.check(None, client="a")
    clock.now = 60
    keys.check(None, client="a")


def test_key_limits_override_and_count_per_key():
    clock = Clock()
    keys = ring({KEY: KeyLimits(req_limit=5), OTHER: KeyLimits(req_limit=UNLIMITED)}, clock=clock, req_limit=1)
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"):
        keys.check(KEY, client=address)  # one key's requests are counted together
    with pytest.raises(RateLimited, match=r"^Slowdown: 5 per 1 minute$"):
        keys.check(KEY, client="10.0.0.6")
    for _ in range(50):
        keys.check(OTHER, client="10.0.0.1")
    keys.check(None, client="10.0.0.1")  # the address's own count is untouched by the keys
    with pytest.raises(RateLimited, match=r"^Slowdown: 1 per 1 minute$"):
        keys.check(None, client="10.0.0.1")


def test_guessing_keys_spends_the_address_quota():
    keys = ring({KEY: KeyLimits()}, req_limit=2)
    for _ in range(2):
        with pytest.raises(InvalidKey):
            keys.check("guess-number-1", client="10.0.0.9")
    with pytest.raises(RateLimited):
        keys.check("guess-number-2", client="10.0.0.9")


def test_daily_limit():
    clock = Clock(0.0)
    keys = ring({KEY: KeyLimits(daily_limit=2)}, clock=clock, req_limit=100, daily_req_limit=4)
    for minute in range(4):
        clock.now = minute * 60
        keys.check(None, client="a")
    clock.now = 3600
    with pytest.raises(RateLimited) as caught:
        keys.check(None, client="a")
    assert caught.value.message == "Slowdown: 4 per 1 day"
    assert caught.value.retry_after == 86400 - 3600
    keys.check(KEY, client="a")
    keys.check(KEY, client="a")
    with pytest.raises(RateLimited, match="2 per 1 day"):
        keys.check(KEY, client="a")
    clock.now = 86400
    keys.check(None, client="a")


def test_batch_cost():
    keys = ring(req_limit=10)
    keys.check(None, client="a", cost=4)
    keys.check(None, client="a", cost=4)
    keys.check(None, client="a", cost=4)  # passes with 8 counted, then counts 12 (deducted after)
    with pytest.raises(RateLimited):
        keys.check(None, client="a")
    big = ring(req_limit=10)
    big.check(None, client="a", cost=64)  # a batch over the whole limit passes in an empty window
    with pytest.raises(RateLimited):
        big.check(None, client="a")
    with pytest.raises(ValueError, match="cost must be >= 1"):
        big.check(None, client="b", cost=0)


def test_ban_after_repeated_violations():
    clock = Clock(0.0)
    keys = ring(clock=clock, req_limit=1, ban_threshold=3, ban_window_s=600)
    keys.check(None, client="a")
    for _ in range(3):
        with pytest.raises(RateLimited):
            keys.check(None, client="a")
    with pytest.raises(Banned) as caught:
        keys.check(None, client="a")
    assert (caught.value.status, caught.value.message) == (403, "Too many request limits violations")
    assert caught.value.retry_after == 600
    clock.now = 120  # the minute window is free, the ban is not over
    with pytest.raises(Banned):
        keys.check(None, client="a")
    clock.now = 600
    keys.check(None, client="a")


def test_memory_is_bounded_by_max_clients():
    clock = Clock(0.0)
    keys = ring(clock=clock, req_limit=1, max_clients=100)
    for i in range(5000):
        keys.check(None, client=f"10.{i // 256}.{i % 256}.1")
    assert keys.clients == 100
    with pytest.raises(RateLimited):  # the last one seen is still counted...
        keys.check(None, client="10.19.135.1")
    keys.check(None, client="10.0.0.1")  # ...the first ones are forgotten


def test_window_state_stays_small():
    """Many requests over a long time keep at most one slot per sixtieth of a window."""
    clock = Clock(0.0)
    keys = ring(clock=clock, req_limit=UNLIMITED, daily_req_limit=1_000_000)
    for i in range(20_000):
        clock.now = i * 7.3
        keys.check(None, client="a")
    state = next(iter(keys._clients.values()))
    assert len(state.day.slots) <= 60


def test_threads_count_exactly():
    keys = ring(req_limit=500)
    passed, refused = [], []
    lock = threading.Lock()

    def hammer():
        for _ in range(100):
            try:
                keys.check(None, client="10.0.0.1")
                outcome = passed
            except RateLimited:
                outcome = refused
            with lock:
                outcome.append(1)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(passed), len(refused)) == (500, 300)
