"""Private: pass-rate files, the input of ``sigma-ref audit --file`` (:func:`read_pass_rates`).

Numbers in ``[0, 1]`` separated by white space, commas or new lines, ``#`` comments; parsed in
chunks through pyarrow, and every bad token listed with its line (:func:`parse_pass_rates`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

#: Bad lines listed in one error message before "... and N more".
MAX_BAD_LINES = 20


def parse_pass_rates(data: bytes, source: str = "<input>") -> np.ndarray:
    """Pass rates from the bytes of a pass-rate file (the format ``sigma-ref audit --file`` reads).

    Format: UTF-8 text (a leading byte-order mark is skipped); numbers separated by white
    space, commas or new lines (so ``0,1`` is two rates, 0 and 1: decimal commas are not
    read); ``#`` starts a comment to the end of the line; blank lines are ignored. Every
    number must be a pass rate in ``[0, 1]``. Otherwise ``ValueError`` lists each bad token
    as ``source:line: 'token' (why)``, up to ``MAX_BAD_LINES`` of them, then a count.

    >>> parse_pass_rates(b"\\xef\\xbb\\xbf# rates\\n0.5, 0.25  # two\\n1e-3\\n").tolist()
    [0.5, 0.25, 0.001]
    """
    import re

    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    clean = re.sub(rb"#[^\n]*", b"", data) if b"#" in data else data
    values = None
    try:
        parts = [_parse_chunk(chunk) for chunk in _chunks(clean)]
        values = np.concatenate(parts) if parts else np.zeros(0)
    except ValueError:  # a token that is not a number
        values = None
    if values is not None and values.size == 0:
        raise ValueError(
            f"{source} holds no pass rates (numbers in [0, 1], separated by spaces, commas or lines)"
        )
    if values is not None and np.all((values >= 0) & (values <= 1)):
        return values
    raise ValueError(_bad_tokens(data, source))


_CHUNK_BYTES = 1 << 25


def _chunks(data: bytes) -> Iterator[bytes]:
    """``data`` in pieces of about ``_CHUNK_BYTES``, each cut at a separator (a bounded token list)."""
    import re

    separator = re.compile(rb"[\s,]")
    start = 0
    while start < len(data):
        end = start + _CHUNK_BYTES
        found = separator.search(data, end) if end < len(data) else None
        end = found.start() if found else len(data)
        yield data[start:end]
        start = end + 1


def _parse_chunk(chunk: bytes) -> np.ndarray:
    """The numbers of one chunk; ``ValueError`` on a token that is not one."""
    tokens = chunk.replace(b",", b" ").split()
    if not tokens:
        return np.zeros(0)
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:  # pragma: no cover - the audit extra is installed in tests
        return np.array(tokens, dtype=np.float64)
    try:
        text = pa.array(tokens, type=pa.binary()).cast(pa.string())
        values: np.ndarray = pc.cast(text, pa.float64()).to_numpy()
        return values
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(str(exc)) from None


def _bad_tokens(data: bytes, source: str) -> str:
    """The error message listing every bad token with its line (the slow path, errors only);
    a token is quoted to at most ``sigma_ref._files.QUOTE_CHARS`` characters."""
    from ._files import quote

    bad: list[str] = []
    count = 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        for token in line.split(b"#", 1)[0].replace(b",", b" ").split():
            text = token.decode("utf-8", errors="replace")
            try:
                value = float(text)
            except ValueError:
                why = "not a number"
            else:
                if 0 <= value <= 1:
                    continue
                why = "outside [0, 1]; a pass rate is a share of correct rollouts"
            count += 1
            if len(bad) < MAX_BAD_LINES:
                bad.append(f"  {source}:{number}: {quote(text)} ({why})")
    more = [f"  ... and {count - MAX_BAD_LINES} more"] if count > MAX_BAD_LINES else []
    return "\n".join([f"{source}: {count} bad pass rate{'s' * (count != 1)}:", *bad, *more])


def read_pass_rates(path: str) -> np.ndarray:
    """Read a pass-rate file (``-``: standard input); the format is :func:`parse_pass_rates`'s.

    A missing file, a directory, a device (``/dev/zero``), a FIFO nobody writes to, more
    than ``sigma_ref._files.MAX_INPUT_BYTES``, an unreadable file or a closed standard input
    raise ``ValueError`` with a message saying which (``sigma_ref._files.read_input``).
    """
    from ._files import read_input

    data = read_input(path, option="--file")
    return parse_pass_rates(data, "<stdin>" if path == "-" else path)


# ---------------------------------------------------------------------------
