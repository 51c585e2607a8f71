"""Hostile implementations: code under test that attacks the process running the suite.

Each is a plain advantage function in the ``contiguous`` layout, ``fn(rewards, group_size)``,
that computes a correct TRL-style advantage on the first few calls (so the run gets past the
probes and into the properties) and then does one hostile thing. ``sigma-ref check`` must
end every one of them with a FAIL verdict, a readable summary and a non-zero exit code
(``tests/test_spec_robust.py``). ``hostile_import.py`` raises while it is imported.

Set ``SIGMA_REF_HOSTILE_AFTER=n`` to misbehave from the n-th call on (default 0: at once,
during the convention probes).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

import torch

_calls = [0]


def _after() -> bool:
    """Whether to misbehave on this call (``SIGMA_REF_HOSTILE_AFTER`` calls go well first)."""
    _calls[0] += 1
    return _calls[0] > int(os.environ.get("SIGMA_REF_HOSTILE_AFTER", "0"))


def _trl(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    r = rewards.view(-1, group_size)
    return ((r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-4)).view(-1)


def exits(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Calls ``sys.exit()``: a SystemExit with no code (pytest would take it for a clean exit)."""
    if _after():
        sys.exit()
    return _trl(rewards, group_size)


def exits_zero(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Calls ``sys.exit(0)``."""
    if _after():
        sys.exit(0)
    return _trl(rewards, group_size)


def hard_exit(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Calls ``os._exit(0)``: the process ends at once, with exit code 0 and no report."""
    if _after():
        sys.stdout.flush()
        os._exit(0)
    return _trl(rewards, group_size)


def segfault(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Reads address 0: SIGSEGV."""
    if _after():
        ctypes.string_at(0)
    return _trl(rewards, group_size)


def aborts(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Calls ``os.abort()``: SIGABRT, as a failed C assertion does."""
    if _after():
        os.abort()
    return _trl(rewards, group_size)


def interrupts(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Raises ``KeyboardInterrupt`` itself (pytest would stop the whole run)."""
    if _after():
        raise KeyboardInterrupt
    return _trl(rewards, group_size)


def hangs(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Never returns (a busy Python loop)."""
    if _after():
        while True:
            time.sleep(0.01)
    return _trl(rewards, group_size)


def hangs_stubbornly(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Never returns and swallows every exception the time limit raises in it."""
    if _after():
        while True:
            try:
                time.sleep(0.01)
            except BaseException:  # the point: it eats the time-limit exception
                pass
    return _trl(rewards, group_size)


def wrong_length(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Returns one advantage per group instead of one per response."""
    return _trl(rewards, group_size).view(-1, group_size)[:, 0].contiguous()


def raises_type_error(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Raises TypeError on every call."""
    raise TypeError("unsupported operand type(s) for /: 'Tensor' and 'NoneType'")


def returns_list(rewards: torch.Tensor, group_size: int) -> list[float]:
    """Returns a Python list, not a tensor."""
    return _trl(rewards, group_size).tolist()


def leaves_thread(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Correct, but its first call starts a non-daemon thread that never ends (a logger's
    flusher, a prefetcher): Python would wait for it at exit."""
    import threading

    if not _calls[0]:
        threading.Thread(target=lambda: time.sleep(10**6), name="forever-flusher").start()
    _calls[0] += 1
    return _trl(rewards, group_size)


def prints_megabytes(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Correct, but prints a megabyte on every call (a debug print left in)."""
    print("x" * (1 << 20))
    return _trl(rewards, group_size)


def returns_huge(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Returns 4096 values per reward (an outer product left in): far larger than the input."""
    a = _trl(rewards, group_size)
    return a.repeat(4096)
