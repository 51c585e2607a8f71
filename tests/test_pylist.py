"""``sigma_ref._pylist``: the pointer readers against ``id()``, element by element, and the switch.

The ctypes reader of a list's ``ob_item`` reads CPython's ``PyListObject`` at fixed word offsets;
these tests compare what it reads with ``id()`` of every element (not only the sample that
:func:`~sigma_ref._pylist.addresses` checks) on lists of ints, floats, strings, mixed objects,
an empty list and a large list, and check that ``READ_POINTERS = False`` (the environment's
``SIGMA_REF_READ_POINTERS=0``) gives the same numbers through ``id()`` alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from sigma_ref import _pylist
from sigma_ref._factorize import factorize

CPYTHON_64 = sys.implementation.name == "cpython" and sys.maxsize > 2**32


def _lists() -> dict[str, list[Any]]:
    uid = [f"uid-{i}" for i in range(300)]
    return {
        "ints": [0, 1, -5, 2**70, 7, 7, 1 << 40],
        "floats": [0.0, -0.0, 1.5, float("inf"), float("nan"), 1e300],
        "strings": ["a", "b", "a", "", "long string " * 10],
        "mixed": [1, "1", 1.0, (1, "a"), None, b"x", object(), True],
        "empty": [],
        "large": [uid[i % 300] for i in range(1 << 17)],
    }


LISTS = _lists()


def _ids(seq: list[Any] | np.ndarray) -> np.ndarray:
    return np.array([id(x) for x in seq], dtype=np.uint64)


@pytest.mark.skipif(not CPYTHON_64, reason="the ctypes reader reads CPython's 64-bit PyListObject")
@pytest.mark.parametrize("kind", sorted(LISTS))
def test_ctypes_list_reader_equals_id(kind: str) -> None:
    """Every pointer the ctypes reader reads from ``ob_item`` is the element's ``id()``."""
    seq = LISTS[kind]
    read = _pylist.list_item_pointers(seq)
    assert read is not None, f"the list header of {kind} did not read as PyListObject"
    assert read.dtype == np.uint64
    np.testing.assert_array_equal(read, _ids(seq))


@pytest.mark.skipif(not CPYTHON_64, reason="the ctypes reader reads CPython's 64-bit PyListObject")
def test_ctypes_list_reader_after_growth_and_on_a_subclass() -> None:
    """A list grown by appends (``allocated > ob_size``) and a list subclass read the same."""
    grown: list[Any] = []
    for i in range(1000):
        grown.append(str(i % 37))
    np.testing.assert_array_equal(_pylist.list_item_pointers(grown), _ids(grown))

    class Sub(list):  # type: ignore[type-arg]
        pass

    sub = Sub(["x", "y", 3])
    np.testing.assert_array_equal(_pylist.list_item_pointers(sub), _ids(sub))


@pytest.mark.skipif(not CPYTHON_64, reason="numpy's object buffer holds 64-bit pointers on CPython")
@pytest.mark.parametrize("kind", sorted(LISTS))
def test_object_array_reader_equals_id(kind: str) -> None:
    """An object array's buffer read as ``uint64`` is its elements' ``id()``, strided views too."""
    arr = np.empty(len(LISTS[kind]), dtype=object)
    arr[:] = LISTS[kind]
    for view in (arr, arr[::3], arr[::-1]):
        read = _pylist.array_item_pointers(view)
        assert read is not None
        np.testing.assert_array_equal(read, _ids(view))


@pytest.mark.parametrize("kind", sorted(LISTS))
@pytest.mark.parametrize("read_pointers", [True, False])
def test_addresses_equal_id_with_the_switch_on_and_off(
    kind: str, read_pointers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:func:`addresses` gives ``id()`` of every element whichever way the switch is set."""
    monkeypatch.setattr(_pylist, "READ_POINTERS", read_pointers)
    seq = LISTS[kind]
    np.testing.assert_array_equal(_pylist.addresses(seq), _ids(seq))
    arr = np.empty(len(seq), dtype=object)
    arr[:] = seq
    np.testing.assert_array_equal(_pylist.addresses(arr), _ids(arr))


def test_switch_off_reads_no_pointers(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the switch off neither reader is called (``id()`` per element only)."""

    def refuse(seq: Any) -> None:
        raise AssertionError("a pointer reader ran with READ_POINTERS = False")

    monkeypatch.setattr(_pylist, "READ_POINTERS", False)
    monkeypatch.setattr(_pylist, "list_item_pointers", refuse)
    monkeypatch.setattr(_pylist, "array_item_pointers", refuse)
    seq = LISTS["large"]
    np.testing.assert_array_equal(_pylist.addresses(seq), _ids(seq))


def test_factorize_is_the_same_with_the_switch_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Group numbers of a large batch of repeated string ids do not depend on the switch."""
    seq = LISTS["large"]
    on = factorize(seq, len(seq), sort=False)
    monkeypatch.setattr(_pylist, "READ_POINTERS", False)
    off = factorize(seq, len(seq), sort=False)
    for a, b in zip(on, off, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("value", "expected"), [("0", False), ("off", False), ("1", True), ("", True)])
def test_environment_variable_sets_the_switch(value: str, expected: bool) -> None:
    """``SIGMA_REF_READ_POINTERS`` read at import: ``0``/``false``/``no``/``off`` turn it off."""
    env = {**os.environ, "SIGMA_REF_READ_POINTERS": value}
    out = subprocess.run(
        [sys.executable, "-c", "from sigma_ref import _pylist; print(_pylist.READ_POINTERS)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(expected)


def test_list_reader_refuses_a_non_list() -> None:
    with pytest.raises(TypeError, match="pass a list"):
        _pylist.list_item_pointers((1, 2))  # type: ignore[arg-type]
