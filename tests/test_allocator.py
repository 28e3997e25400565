"""retain_freed_memory: glibc keeps freed memory; the environment can turn it off."""

import subprocess
import sys

import pytest

CHECK = "from transformer.cpu.allocator import retain_freed_memory as r; print(r(), r())"


def run(env_value=None):
    import os

    env = dict(os.environ)
    env.pop("TRANSFORMER_RETAIN_MEMORY", None)
    if env_value is not None:
        env["TRANSFORMER_RETAIN_MEMORY"] = env_value
    return subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, check=True).stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_settings_take_effect_once_and_can_be_turned_off():
    assert run() == ["True", "True"]  # the second call answers from the first
    assert run("0") == ["False", "False"]


def test_large_buffers_still_allocate_and_free_after_it():
    import torch

    from transformer.cpu.allocator import retain_freed_memory

    retain_freed_memory()
    for _ in range(3):
        x = torch.ones(64, 1024, 1024)  # 256 MB, past any mmap threshold
        assert float(x[-1, -1, -1]) == 1.0
        del x
