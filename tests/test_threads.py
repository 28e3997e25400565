"""The default thread count: the CPUs other processes leave idle, read from the kernel's idle time."""

from __future__ import annotations

import pytest

import transformer.threads as threads


class Clock:
    """Stands in for the kernel's counters and the clock: the test says how the window went."""

    def __init__(self, monkeypatch, *, cpus=2, idle_ticks: int | None = 10_000):
        self.wall, self.idle, self.own = 100.0, idle_ticks, 5.0
        self.slept = 0.0
        monkeypatch.setattr(threads, "_allowed_cpus", lambda: set(range(cpus)))
        monkeypatch.setattr(threads, "_idle_ticks", lambda cpus: self.idle)
        monkeypatch.setattr(threads, "_own_cpu_seconds", lambda: self.own)
        monkeypatch.setattr(threads.time, "monotonic", lambda: self.wall)
        monkeypatch.setattr(threads.time, "sleep", self.sleep)
        monkeypatch.setattr(threads.os, "sysconf", lambda name: 100)
        self.start = threads._Snapshot()
        monkeypatch.setattr(threads, "_START", self.start)

    def sleep(self, seconds):
        self.slept += seconds
        self.wall += seconds

    def run(self, seconds, *, idle_cpus, own_cpus):
        """``seconds`` pass with ``idle_cpus`` CPUs idle while this process keeps ``own_cpus`` busy."""
        self.wall += seconds
        if self.idle is not None:
            self.idle += round(idle_cpus * seconds * 100)
        self.own += own_cpus * seconds


def test_alone_every_cpu_is_free(monkeypatch):
    clock = Clock(monkeypatch)
    clock.run(1.5, idle_cpus=1, own_cpus=1)  # importing torch on one core, the other idle
    assert threads.free_cpus() == pytest.approx(2.0)
    assert threads.default_threads() == 2


def test_beside_a_busy_process_one_thread(monkeypatch):
    clock = Clock(monkeypatch)
    clock.run(1.5, idle_cpus=0, own_cpus=1)  # the other core runs someone else's loop
    assert threads.free_cpus() == pytest.approx(1.0)
    assert threads.default_threads() == 1


def test_a_light_neighbour_costs_no_thread_a_heavier_one_does(monkeypatch):
    clock = Clock(monkeypatch)
    clock.run(2.0, idle_cpus=0.85, own_cpus=1)
    assert threads.default_threads() == 2
    clock = Clock(monkeypatch)
    clock.run(2.0, idle_cpus=0.6, own_cpus=1)
    assert threads.default_threads() == 1


def test_all_cores_busy_still_one_thread(monkeypatch):
    clock = Clock(monkeypatch, cpus=8)
    clock.run(1.0, idle_cpus=0, own_cpus=0.2)
    assert threads.default_threads() == 1


def test_a_short_window_is_waited_out(monkeypatch):
    clock = Clock(monkeypatch)
    clock.run(0.05, idle_cpus=2, own_cpus=0)
    threads.free_cpus()
    assert clock.slept == pytest.approx(threads.MIN_WINDOW - 0.05)


def test_without_proc_stat_every_allowed_cpu(monkeypatch):
    clock = Clock(monkeypatch, cpus=3, idle_ticks=None)
    clock.run(1.0, idle_cpus=0, own_cpus=1)
    assert threads.default_threads() == 3 and clock.slept == 0


def test_the_real_counters_are_read():
    cpus = threads._allowed_cpus()
    ticks = threads._idle_ticks(cpus)
    assert cpus and (ticks is None or ticks >= 0)
    assert 1 <= threads.default_threads() <= len(cpus)
