"""Rollout logs in many shards: a directory or a glob of Parquet, CSV/TSV or JSON Lines files,
reduced batch by batch (issue 24, item 11, the pyarrow part).

:func:`read_rollout_shards` never holds the rows: each batch of at most ``_BATCH_ROWS`` rows is
reduced to per-prompt counts ``(n, k)`` and to its groups before the next is read, so memory is
proportional to prompts and groups (a group is three integers), not to rollouts. Prompt ids get
global codes from a growing pyarrow dictionary of the values seen (``pc.index_in``).

Groups: the rows sharing ``(prompt, group_col)`` (a group may span batches and shards), or runs of
consecutive rows with the same prompt, carried across batch and shard boundaries. A run of
``m G`` rows is ``m`` groups of ``G``, as in :func:`sigma_ref.rollouts.rollout_counts`, where the
logged ``G`` is the most common run length; here it is the most common run length of the first
batch that holds a complete run (the whole log is not kept to count them all).

Not done here: ``--engine ray`` (Ray Data) for logs beyond one machine.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from .rollouts import _BATCH_ROWS, _FORMATS, Rollouts, _check_columns, _correct, _format_of, _pyarrow

__all__ = ["shard_paths", "read_rollout_shards"]

_Ints = npt.NDArray[np.int64]


def shard_paths(path: str) -> list[str]:
    """The shard files of ``path``: a directory's files with a rollout-log suffix (not recursive),
    or the files a glob pattern matches, sorted by name. ``ValueError`` when there are none."""
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        files = [os.path.join(path, name) for name in names if name.lower().endswith(tuple(_FORMATS))]
    else:
        files = sorted(glob.glob(path))
    files = [f for f in files if os.path.isfile(f)]
    if not files:
        where = f"{path} is a directory with" if os.path.isdir(path) else f"{path}: the pattern matches"
        raise ValueError(
            f"{where} no rollout shards (files ending in {', '.join(_FORMATS)}); pass a directory "
            "of shards, a glob such as 'logs/*.parquet', or one rollout log file"
        )
    return files


def is_shards(path: str) -> bool:
    """Whether ``path`` names shards (a directory, or a glob pattern that is not itself the name of
    a file: ``log[1].parquet`` that exists is that file) rather than one file."""
    return os.path.isdir(path) or (glob.has_magic(path) and not os.path.lexists(path))


def _batches(path: str, fmt: str, columns: list[str]) -> Iterator[Any]:
    pa = _pyarrow()
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    try:
        if fmt == "parquet":
            file = pq.ParquetFile(path)
            _check_columns(path, file.schema_arrow.names, columns)
            yield from file.iter_batches(batch_size=_BATCH_ROWS, columns=columns)
        elif fmt in {"csv", "tsv"}:
            options = pacsv.ParseOptions(delimiter="\t" if fmt == "tsv" else ",")
            reader = pacsv.open_csv(path, parse_options=options)
            _check_columns(path, reader.schema.names, columns)
            for batch in reader:
                yield batch.select(columns)
        else:
            table = pajson.read_json(path)
            _check_columns(path, table.column_names, columns)
            yield from table.select(columns).to_batches(max_chunksize=_BATCH_ROWS)
    except pa.ArrowInvalid as exc:
        raise ValueError(f"{path}: cannot read it as {fmt} ({str(exc).splitlines()[0]})") from None


class _Dictionary:
    """Global integer codes for the values of a column, in order of first appearance."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.known: Any = None

    def codes(self, path: str, column: Any) -> _Ints:
        pa = _pyarrow()
        import pyarrow.compute as pc

        if column.null_count:
            raise ValueError(f"{path}: {column.null_count} rows have no {self.name!r}")
        fresh = pc.unique(column)
        if self.known is None:
            self.known = fresh
        else:
            if fresh.type != self.known.type:
                raise ValueError(
                    f"{path}: column {self.name!r} holds {fresh.type}, other shards {self.known.type}; "
                    "every shard needs the same column types"
                )
            new = fresh.filter(pc.invert(pc.is_in(fresh, value_set=self.known)))
            if len(new):
                self.known = pa.concat_arrays([self.known, new])
        return np.asarray(pc.index_in(column, value_set=self.known).to_numpy(zero_copy_only=False), np.int64)


def _grow(counts: _Ints, size: int) -> _Ints:
    return counts if counts.size >= size else np.concatenate([counts, np.zeros(size - counts.size, np.int64)])


def read_rollout_shards(
    path: str,
    *,
    prompt_col: str = "prompt",
    reward_col: str = "reward",
    group_col: str | None = None,
    correct_threshold: float | None = None,
    consecutive_groups: bool = True,
    fmt: str | None = None,
) -> Rollouts:
    """Read the shards of ``path`` (:func:`shard_paths`) and reduce them as they stream.

    The same reduction as :func:`sigma_ref.rollouts.read_rollouts` (same columns, rewards, group
    rules and errors), batch by batch; ``fmt`` applies to every shard, else each shard's suffix
    says.
    """
    files = shard_paths(path)
    columns = [prompt_col, reward_col] + ([group_col] if group_col else [])
    if len(set(columns)) != len(columns):
        raise ValueError(f"the prompt, reward and group columns must differ; got {columns}")
    prompts, groups = _Dictionary(prompt_col), _Dictionary(group_col or "")
    n = k = np.zeros(0, np.int64)
    rows = 0
    keyed: list[tuple[_Ints, _Ints, _Ints]] = []  # (prompt * 2**32 + group, rows, correct) per batch
    runs: list[tuple[_Ints, _Ints, _Ints]] = []  # (prompt, size, correct) of finished groups
    carry_prompt, carry_correct = np.zeros(0, np.int64), np.zeros(0, np.int64)
    size_G = 0
    for file in files:
        shard_fmt = _format_of(file, fmt)
        for batch in _batches(file, shard_fmt, columns):
            if batch.num_rows == 0:
                continue
            rows += batch.num_rows
            code = prompts.codes(file, batch.column(prompt_col))
            correct = _correct(file, batch.column(reward_col), reward_col, correct_threshold).astype(np.int64)
            size = len(prompts.known)
            n = _grow(n, size) + np.bincount(code, minlength=size)
            k = _grow(k, size) + np.bincount(code, weights=correct, minlength=size).astype(np.int64)
            if group_col:
                key = code * (1 << 32) + groups.codes(file, batch.column(group_col))
                unique, inverse = np.unique(key, return_inverse=True)
                keyed.append(
                    (unique, np.bincount(inverse), np.bincount(inverse, weights=correct).astype(np.int64))
                )
                continue
            code = np.concatenate([carry_prompt, code])
            correct = np.concatenate([carry_correct, correct])
            starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
            last = int(starts[-1])
            carry_prompt, carry_correct = code[last:], correct[last:]
            if last == 0:
                continue
            lengths = np.diff(starts)
            if size_G == 0:
                size_G = int(np.bincount(lengths).argmax())
            runs.append(_split_runs(code[:last], correct[:last], starts[:-1], lengths, size_G))
    if rows == 0:
        raise ValueError(f"{path}: the shards hold no rollouts")
    if carry_prompt.size:
        length = np.array([carry_prompt.size])
        size_G = size_G or int(carry_prompt.size)
        runs.append(_split_runs(carry_prompt, carry_correct, np.array([0]), length, size_G))
    source = f"column {group_col}" if group_col else "consecutive rows"
    if group_col:
        key = np.concatenate([u for u, _, _ in keyed])
        unique, inverse = np.unique(key, return_inverse=True)
        group_n = np.bincount(inverse, weights=np.concatenate([r for _, r, _ in keyed])).astype(np.int64)
        group_k = np.bincount(inverse, weights=np.concatenate([c for _, _, c in keyed])).astype(np.int64)
        group_prompt = (unique >> 32).astype(np.int64)
    else:
        group_prompt, group_n, group_k = (np.concatenate([r[i] for r in runs]) for i in range(3))
        if not consecutive_groups or np.median(group_n) < 2:
            group_n = group_k = group_prompt = np.zeros(0, np.int64)
            source = ""
    values = np.asarray(prompts.known.to_numpy(zero_copy_only=False))
    return Rollouts(path, rows, values, n, k, group_n, group_k, group_prompt, source)


def _split_runs(
    code: _Ints, correct: _Ints, starts: _Ints, lengths: _Ints, G: int
) -> tuple[_Ints, _Ints, _Ints]:
    """``(prompt, size, correct)`` of the groups in complete runs: a run of ``m G`` rows is ``m``
    groups of ``G`` (as :func:`sigma_ref.rollouts.rollout_counts`), any other run one group."""
    split = (lengths % G == 0) & (lengths > G) if G > 1 else np.zeros(lengths.shape, bool)
    keep = ~split
    sums = np.add.reduceat(correct, starts)
    rows = np.repeat(split, lengths)
    chunks = correct[rows].reshape(-1, G).sum(axis=1) if split.any() else np.zeros(0, np.int64)
    prompt = np.r_[code[starts[keep]], code[rows][::G] if split.any() else []].astype(np.int64)
    size = np.r_[lengths[keep], np.full(chunks.size, G)].astype(np.int64)
    total = np.r_[sums[keep], chunks].astype(np.int64)
    return prompt, size, total
