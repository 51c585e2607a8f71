"""Files the command line reads and writes, made safe against hostile paths.

Outputs (``audit --plot``, ``reproduce --plot``, ``check --report``): :func:`check_output` runs
*before* the work starts and refuses, with one line naming the option, the path and the fix,

* a path whose directory is missing or not writable, a directory, a special file
  (``/dev/full``, ``/proc/...``, a FIFO);
* one of the run's own inputs (by identity of the file, through any symlink);
* an existing file that is not a previous output of the same kind (a PNG, an SVG, a
  sigma-ref JSON report), unless ``force=True`` (``--force``).

:func:`write_atomic` then writes through a temporary file in the same directory and renames it
over the path: a symlink at the path is replaced, its target never written, and an
interrupted run leaves the old file whole.

Inputs (``audit --file``, ``audit --rollouts``): :func:`read_input` reads at most
``limit`` bytes, refuses devices (``/dev/zero``, ``/dev/urandom``, a terminal) and waits
at most ``PIPE_WAIT`` seconds for a FIFO's writer (a pipe from ``<(zcat log.csv.gz)`` or
``/dev/stdin`` is read; ``-`` is standard input).

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> out = os.path.join(d, "fig.png")
>>> check_output(out, option="--plot", kind="png")
>>> write_atomic(out, lambda fh: fh.write(b"\\x89PNG\\r\\n\\x1a\\n..."))
>>> check_output(out, option="--plot", kind="png")  # a previous figure: replaced
>>> check_output(out, option="--plot", kind="svg")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: --plot ...fig.png: the file exists and is not a previous svg output; pass --force to replace it
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import stat
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import IO, Any

__all__ = [
    "OUTPUT_KINDS",
    "MAX_INPUT_BYTES",
    "PIPE_WAIT",
    "check_output",
    "write_atomic",
    "read_input",
    "quote",
    "check_stdout",
]

#: What a previous output of each kind looks like (its first bytes).
OUTPUT_KINDS: tuple[str, ...] = ("png", "svg", "report")
#: The most bytes an input is read to (a pass-rate file of 100 million rates is about 1 GB).
MAX_INPUT_BYTES = 1 << 30
#: Seconds to wait for the writer of a FIFO before giving up.
PIPE_WAIT = 10.0
#: The most characters of a foreign file an error message quotes.
QUOTE_CHARS = 12


def quote(text: str | bytes, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of at most ``limit`` characters of ``text`` (``...`` marks a cut): error messages
    quote what locates a bad token, never whole lines of a file they were given.

    >>> quote("root:x:0:0:root:/root:/bin/bash")
    "'root:x:0:0:r'..."
    >>> quote(b"0.5x")
    "'0.5x'"
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _looks_like(head: bytes, kind: str) -> bool:
    if kind == "png":
        return head.startswith(b"\x89PNG\r\n\x1a\n")
    if kind == "svg":
        text = head.lstrip()
        return (text.startswith(b"<?xml") or text.startswith(b"<svg")) and b"<svg" in head
    if kind == "report":
        try:
            data = json.loads(head.decode("utf-8"))
        except ValueError:
            return False
        return isinstance(data, dict) and {"implementation", "properties", "conformant"} <= data.keys()
    raise ValueError(f"kind={kind!r} must be one of {OUTPUT_KINDS}")


def _same_file(path: str, other: str) -> bool:
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


def check_output(
    path: str, *, option: str, kind: str, inputs: Sequence[str] = (), force: bool = False
) -> None:
    """Refuse an output ``path`` that cannot or must not be written (module doc); ``None`` if fine.

    ``option``: the option's name for the message (``--plot``); ``kind``: ``png``, ``svg`` or
    ``report``, what a previous output looks like; ``inputs``: the run's input files (never
    overwritten, even with ``force``); ``force``: replace any existing regular file.
    """
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"kind={kind!r} must be one of {OUTPUT_KINDS}")
    if not isinstance(path, str) or not path:
        raise ValueError(f"{option} {path!r}: give a file name")
    where = f"{option} {path}"
    for source in inputs:
        if source != "-" and _same_file(path, source):
            raise ValueError(f"{where}: is an input of this run; write the output to another file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"{where}: the directory {parent} does not exist; create it or pick another path")
    try:
        info: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ValueError(f"{where}: cannot inspect it ({exc.strerror})") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{where}: is a directory; give a file name inside it")
    link = info is not None and stat.S_ISLNK(info.st_mode)
    if link and not force:
        raise ValueError(f"{where}: is a symbolic link; pass --force to replace the link (not its target)")
    if info is not None and not link and not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{where}: is not a regular file (a device, FIFO or socket); write to a file")
    try:  # the output is written as a temporary file there, then renamed: try that now
        fd, probe = tempfile.mkstemp(prefix=".sigma-ref-", suffix=".tmp", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(
            f"{where}: cannot create a file in {parent} ({exc.strerror}); pick another path"
        ) from None
    if info is None or link or force:
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16 if kind == "report" else 512)
    except OSError as exc:
        raise ValueError(f"{where}: exists and cannot be read ({exc.strerror}); pass --force") from None
    if kind == "report" and len(head) == 1 << 16:
        head = b""  # larger than any report's head: read the whole file only if small
        with contextlib.suppress(OSError), open(path, "rb") as fh:
            head = fh.read(1 << 24)
    if not _looks_like(head, kind):
        raise ValueError(
            f"{where}: the file exists and is not a previous {kind} output; pass --force to replace it"
        )


def write_atomic(path: str, write: Callable[[IO[bytes]], Any]) -> None:
    """Call ``write(fh)`` on a temporary file next to ``path``, then rename it to ``path``.

    The rename replaces a symlink at ``path`` (never its target); on any error the temporary
    file is removed and ``path`` is as it was. The new file gets the mode a plain ``open``
    would give it (``0o666`` less the umask).
    """
    parent = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".sigma-ref-", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _wait_for_writer(fd: int, where: str, wait: float) -> None:
    ready, _, _ = select.select([fd], [], [], wait)
    if not ready:
        raise ValueError(f"{where}: a FIFO with no data within {wait:g} s (is anything writing to it?)")


def read_input(path: str, *, option: str, limit: int = MAX_INPUT_BYTES, wait: float | None = None) -> bytes:
    """The bytes of an input file, ``-`` for standard input; ``ValueError`` in one line for a
    missing file, a directory, a device, a FIFO nobody writes to within ``wait`` seconds
    (default ``PIPE_WAIT``), or more than ``limit`` bytes.

    >>> read_input("/dev/zero", option="--file")
    Traceback (most recent call last):
    ...
    ValueError: --file /dev/zero: is a device, not a file; pass a file, or '-' for standard input
    """
    where = f"{option} {path}"
    wait = PIPE_WAIT if wait is None else wait
    if path == "-":
        stream: Any = getattr(sys.stdin, "buffer", sys.stdin)
        if sys.stdin is None or stream is None:
            raise ValueError(f"{option} -: standard input is closed; pipe the data in or pass a file")
        try:
            data = stream.read(limit + 1)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{option} -: cannot read standard input ({exc})") from None
        if isinstance(data, str):
            data = data.encode("utf-8")
        return _bounded(data, where, limit)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{where}: is a directory; pass a file")
    pipe = stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode)
    if not (stat.S_ISREG(info.st_mode) or pipe):
        raise ValueError(f"{where}: is a device, not a file; pass a file, or '-' for standard input")
    if stat.S_ISREG(info.st_mode) and info.st_size > limit:
        raise ValueError(f"{where}: {info.st_size:,} bytes, more than the {limit:,} read; split the file")
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_NONBLOCK if pipe else 0))
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror})") from None
    try:
        if pipe:
            _wait_for_writer(fd, where, wait)
            os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror})") from None
    finally:
        os.close(fd)
    return _bounded(b"".join(chunks), where, limit)


def _bounded(data: bytes, where: str, limit: int) -> bytes:
    if len(data) > limit:
        raise ValueError(f"{where}: more than {limit:,} bytes; split the input")
    return data


def check_stdout(command: str) -> None:
    """Refuse to start when standard output is ``/dev/full`` (every write fails: the result
    would be lost after the run)."""
    try:
        out = os.fstat(sys.stdout.fileno())
        full = os.stat("/dev/full")
    except (OSError, AttributeError, ValueError):
        return
    if stat.S_ISCHR(out.st_mode) and out.st_rdev == full.st_rdev:
        raise ValueError(f"standard output is /dev/full; every write would fail. Redirect {command}'s output")
