"""Private: the addresses (``id()``) of a sequence's objects, read without touching the objects.

:func:`addresses` gives ``[id(x) for x in seq]`` as ``uint64``. Calling ``id()`` per element
reads every object (a cache miss per reward, ~0.2 s for 2**20 ids); on CPython the same numbers
lie in the container itself, as an array of ``PyObject *`` pointers:

* an object array's buffer (numpy's documented layout): :func:`array_item_pointers`;
* a list's ``ob_item`` array, found through the list's header with ctypes at fixed word offsets
  (``PyListObject``: ``ob_refcnt``, ``ob_type``, ``ob_size``, ``ob_item``, ``allocated``):
  :func:`list_item_pointers`, which checks the header first (``ob_size == len(seq)``,
  ``allocated >= ob_size``, a non-null ``ob_item``) and reads nothing where it does not hold.

:func:`addresses` checks sampled pointers against ``id()`` (the first, the last and 17 between)
and falls back to ``id()`` per element where a check fails or outside CPython.

The switch: :data:`READ_POINTERS` (from the environment variable ``SIGMA_REF_READ_POINTERS``:
``0`` turns it off; default on) makes :func:`addresses` use ``id()`` per element only, reading no
memory through ctypes or a raw buffer. Results are the same either way (only slower without:
``tests/test_pylist.py`` compares the readers with ``id()`` element by element).

>>> seq = ["a", "b", "a"]
>>> [int(v) for v in addresses(seq)] == [id(x) for x in seq]
True
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

import numpy as np

#: Read the containers' pointer arrays (``True``, the default) or call ``id()`` per element
#: (``False``; environment ``SIGMA_REF_READ_POINTERS=0``). Tests set it to compare the two.
_OFF = ("0", "false", "no", "off")
READ_POINTERS = os.environ.get("SIGMA_REF_READ_POINTERS", "1").strip().lower() not in _OFF

#: ``PyListObject``'s fields after ``PyObject_VAR_HEAD`` (``ob_refcnt``, ``ob_type``, ``ob_size``),
#: in pointer-sized words from the object's address: ``ob_size``, ``ob_item``, ``allocated``.
_OB_SIZE_WORD = 2
_OB_ITEM_WORD = 3
_ALLOCATED_WORD = 4

#: How many of the container's pointers :func:`addresses` compares with ``id()`` besides the ends.
_SAMPLES = 17


class _Pointers:
    """An object array's buffer seen as ``uint64`` (``np.array(_Pointers(a))`` copies it): numpy
    stores an object array's elements as ``PyObject *`` pointers, on CPython their ``id()``."""

    def __init__(self, objects: np.ndarray) -> None:
        self.__array_interface__ = {
            "shape": objects.shape,
            "strides": objects.strides,
            "typestr": "<u8",
            "data": (objects.__array_interface__["data"][0], True),
            "version": 3,
        }


def by_id(seq: list[Any] | np.ndarray) -> np.ndarray:
    """``[id(x) for x in seq]`` as ``uint64``, one ``id()`` call per element (the reference).

    >>> x = object()
    >>> int(by_id([x])[0]) == id(x)
    True
    """
    return np.fromiter(map(id, seq), dtype=np.uint64, count=len(seq))


def _on_cpython_64() -> bool:
    return sys.implementation.name == "cpython" and ctypes.sizeof(ctypes.c_void_p) == 8


def array_item_pointers(objects: np.ndarray) -> np.ndarray | None:
    """A copy of a one-dimensional object array's pointers as ``uint64`` (CPython, 64-bit), or
    ``None`` where that layout does not apply (another dtype or interpreter).

    >>> a = np.array(["x", 1], dtype=object)
    >>> [int(v) for v in array_item_pointers(a)] == [id(x) for x in a]
    True
    """
    if not _on_cpython_64() or objects.dtype != object or objects.itemsize != 8:
        return None
    pointers: np.ndarray = np.array(_Pointers(objects), dtype=np.uint64)
    return pointers


def list_item_pointers(seq: list[Any]) -> np.ndarray | None:
    """A copy of a list's ``ob_item`` pointers as ``uint64``, read through ctypes (CPython,
    64-bit), or ``None`` where the list's header does not read as ``PyListObject`` (``ob_size``
    equal to ``len(seq)``, ``allocated`` at least that, ``ob_item`` not null) or another
    interpreter runs. An empty list gives an empty array (nothing is read).

    >>> seq = [1.5, "a", None]
    >>> [int(v) for v in list_item_pointers(seq)] == [id(x) for x in seq]
    True
    """
    if not isinstance(seq, list):
        raise TypeError(
            f"seq is a {type(seq).__name__}; list_item_pointers reads a list's header: pass a list"
        )
    n = len(seq)
    if not _on_cpython_64():
        return None
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    word = ctypes.sizeof(ctypes.c_void_p)
    head = id(seq)
    size = ctypes.c_ssize_t.from_address(head + _OB_SIZE_WORD * word).value
    allocated = ctypes.c_ssize_t.from_address(head + _ALLOCATED_WORD * word).value
    if size != n or allocated < n:
        return None
    items = ctypes.c_void_p.from_address(head + _OB_ITEM_WORD * word).value
    if not items:
        return None
    view = memoryview((ctypes.c_uint64 * n).from_address(items))
    out: np.ndarray = np.frombuffer(view, dtype=np.uint64).copy()
    return out


def addresses(seq: list[Any] | np.ndarray) -> np.ndarray:
    """``[id(x) for x in seq]`` as ``uint64``, without touching the objects where it can: the
    container's own pointers (:func:`array_item_pointers`, :func:`list_item_pointers`) when
    :data:`READ_POINTERS` is on and sampled pointers equal ``id()``; else :func:`by_id` (~200
    times slower: ~0.2 s for 2**20 ids).

    >>> seq = ["a", "b"] * 3
    >>> bool((addresses(seq) == by_id(seq)).all())
    True
    """
    n = len(seq)
    if not READ_POINTERS or n == 0:
        return by_id(seq)
    pointers = array_item_pointers(seq) if isinstance(seq, np.ndarray) else list_item_pointers(seq)
    if pointers is None:
        return by_id(seq)
    probe = np.unique(np.r_[0, n - 1, np.linspace(0, n - 1, _SAMPLES).astype(np.int64)])
    if all(int(pointers[i]) == id(seq[i]) for i in probe):
        return pointers
    return by_id(seq)
