"""Rollout logs in many shards: a directory or a glob of Parquet, CSV/TSV or JSON Lines files,
each reduced on its own to mergeable counts, then merged in shard order (issue 24, item 11).

One implementation, two engines. :func:`shard_counts` reduces one shard, batch by batch, to a
:class:`ShardCounts` (its distinct prompts with their ``(n, k)``, its groups, and the rows of its
first and last runs, which may continue in the neighbouring shards); :func:`merge_shard_counts`
merges them in shard order into a :class:`sigma_ref.rollouts.Rollouts`. The default engine
(``pyarrow``) calls :func:`shard_counts` on one shard after the other in this process; the
``ray`` engine (:mod:`sigma_ref.ray_engine`) calls the same function in one Ray task per shard.
Neither holds the rows: memory is proportional to prompts and groups (a group is three
integers), not to rollouts. Prompt ids get global codes in order of first appearance; the
merge looks the distinct ids of the shards up in those seen before once the shards waiting
hold as many ids as are known (so each known id is hashed a bounded number of times).

Groups: the rows sharing ``(prompt, columns.group)`` (a group may span batches and shards), or runs of
consecutive rows with the same prompt, joined across batch and shard boundaries. A run of
``m G`` rows is ``m`` groups of ``G``, as in :func:`sigma_ref.rollouts.rollout_counts`, where the
logged ``G`` is the most common run length; here (:func:`run_length`) it is the most common
length of the log's first ``RUNS_FOR_G`` runs (the whole log is not kept to count them all).
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Generator, Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from .rollouts import (
    _BATCH_ROWS,
    _FORMATS,
    LogColumns,
    Rollouts,
    _check_columns,
    _correct,
    _format_of,
    _pyarrow,
)

__all__ = ["shard_paths", "read_rollout_shards", "ShardCounts", "shard_counts", "merge_shard_counts"]

_Ints = npt.NDArray[np.int64]
_Bits = npt.NDArray[np.int8]
_Int32s = npt.NDArray[np.int32]
_NONE = np.zeros(0, np.int64)
#: The columns read when none are named: ``prompt``, binary ``reward``, consecutive-row groups.
_DEFAULT_COLUMNS = LogColumns()


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
    """Integer codes for the values of a column, in order of first appearance."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.known: Any = None

    def codes(self, path: str, column: Any) -> _Ints:
        """The code of each value of ``column`` (new values get the next codes): one hash lookup
        of the column's distinct values in the known ones, then one of the column in those."""
        pa = _pyarrow()
        import pyarrow.compute as pc

        if column.null_count:
            raise ValueError(f"{path}: {column.null_count} rows have no {self.name!r}")
        fresh = pc.unique(column)
        if self.known is None:
            self.known = fresh
            where = np.arange(len(fresh), dtype=np.int64)
        else:
            if fresh.type != self.known.type:
                raise ValueError(
                    f"{path}: column {self.name!r} holds {fresh.type}, other shards {self.known.type}; "
                    "every shard needs the same column types"
                )
            found = pc.index_in(fresh, value_set=self.known)
            where = np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
            new = where < 0
            if new.any():
                where[new] = len(self.known) + np.arange(int(new.sum()))
                self.known = pa.concat_arrays([self.known, fresh.filter(pa.array(new))])
        if len(fresh) == len(column):  # distinct values (a shard's prompts): in the order of fresh
            return where
        return where[
            np.asarray(pc.index_in(column, value_set=fresh).to_numpy(zero_copy_only=False), np.int64)
        ]


@dataclasses.dataclass(frozen=True)
class ShardCounts:
    """One shard reduced to counts that merge (:func:`merge_shard_counts`), codes local to it.

    ``prompts``: the shard's distinct prompt ids (a pyarrow array, in order of first appearance);
    ``n[i]``, ``k[i]``: rollouts and correct rollouts of ``prompts[i]`` in the shard. With a group
    column: ``group_values`` its distinct values and ``keys = prompt * 2**32 + group`` the shard's
    distinct (prompt, group) pairs, with ``key_n`` rows and ``key_k`` correct each. Without one:
    ``head`` (correct per row) is the shard's first run of one prompt (``head_prompt``), which may
    continue the previous shard's last run; ``tail``/``tail_prompt`` its last run, which may go on
    in the next shard (``tail_prompt == -1`` when the whole shard is one run); ``runs`` the
    ``(prompt, size, correct)`` of the groups of the runs between them.
    """

    path: str
    rows: int
    prompts: Any
    n: _Ints
    k: _Ints
    group_values: Any = None
    keys: _Ints = dataclasses.field(default_factory=lambda: _NONE)
    key_n: _Ints = dataclasses.field(default_factory=lambda: _NONE)
    key_k: _Ints = dataclasses.field(default_factory=lambda: _NONE)
    head_prompt: int = -1
    head: _Bits = dataclasses.field(default_factory=lambda: np.zeros(0, np.int8))
    tail_prompt: int = -1
    tail: _Bits = dataclasses.field(default_factory=lambda: np.zeros(0, np.int8))
    runs: tuple[_Ints, _Ints, _Ints] = (_NONE, _NONE, _NONE)


#: How many runs of consecutive rows :func:`run_length` counts (the whole log's when it has fewer).
RUNS_FOR_G = 10_000


def run_length(
    files: list[str],
    *,
    columns: LogColumns = _DEFAULT_COLUMNS,
    fmt: str | None = None,
) -> int:
    """The logged ``G`` of consecutive-row groups: the most common length of the first
    ``RUNS_FOR_G`` runs of one prompt, read from the first shard on (all runs when the log has
    fewer, the last one included, as :func:`sigma_ref.rollouts.rollout_counts` counts them); only
    ``columns.prompt`` is read."""
    prompts = _Dictionary(columns.prompt)
    carry = _NONE
    lengths: list[_Ints] = []
    counted = 0
    for file in files:
        for batch in _batches(file, _format_of(file, fmt), [columns.prompt]):
            code = np.concatenate([carry, prompts.codes(file, batch.column(columns.prompt))])
            if code.size == 0:
                continue
            starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
            lengths.append(np.diff(starts))
            counted += starts.size - 1
            carry = code[starts[-1] :]
            if counted >= RUNS_FOR_G:
                return int(np.bincount(np.concatenate(lengths)).argmax())
    lengths.append(np.array([carry.size]))
    return int(np.bincount(np.concatenate(lengths)).argmax()) if carry.size else 0


def shard_counts(
    file: str,
    *,
    columns: LogColumns = _DEFAULT_COLUMNS,
    G: int = 0,
    fmt: str | None = None,
) -> ShardCounts:
    """Reduce one shard, batch by batch, to its :class:`ShardCounts`.

    ``G`` splits runs of consecutive rows (a run of ``m G`` rows is ``m`` groups of ``G``;
    :func:`run_length` gives the log's); unused with ``columns.group``. The same columns, rewards
    and errors as :func:`sigma_ref.rollouts.read_rollouts`.
    """
    prompts, groups = _Dictionary(columns.prompt), _Dictionary(columns.group or "")
    n = k = _NONE
    rows = 0
    keyed: list[tuple[_Ints, _Ints, _Ints]] = []  # (prompt * 2**32 + group, rows, correct) per batch
    runs: list[tuple[_Ints, _Ints, _Ints]] = []  # (prompt, size, correct) of finished groups
    head: tuple[int, _Bits] | None = None
    carry_prompt, carry_correct = _NONE, _NONE
    for batch in _batches(file, _format_of(file, fmt), columns.names):
        if batch.num_rows == 0:
            continue
        rows += batch.num_rows
        code = prompts.codes(file, batch.column(columns.prompt))
        rewards = batch.column(columns.reward)
        correct = _correct(file, rewards, columns.reward, columns.correct_threshold).astype(np.int64)
        size = len(prompts.known)
        n = _grow(n, size) + np.bincount(code, minlength=size)
        k = _grow(k, size) + np.bincount(code, weights=correct, minlength=size).astype(np.int64)
        if columns.group:
            key = code * (1 << 32) + groups.codes(file, batch.column(columns.group))
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
        if head is None:  # the shard's first run: it may continue the previous shard's last one
            head = (int(code[0]), correct[: starts[1]].astype(np.int8))
            starts = starts[1:]
        first = int(starts[0])
        if first < last:
            runs.append(
                _split_runs(code[first:last], correct[first:last], starts[:-1] - first, np.diff(starts), G)
            )
    if rows == 0:
        return ShardCounts(file, 0, None, _NONE, _NONE)
    if columns.group:
        unique, inverse = np.unique(np.concatenate([u for u, _, _ in keyed]), return_inverse=True)
        key_n = np.bincount(inverse, weights=np.concatenate([r for _, r, _ in keyed])).astype(np.int64)
        key_k = np.bincount(inverse, weights=np.concatenate([c for _, _, c in keyed])).astype(np.int64)
        return ShardCounts(file, rows, prompts.known, n, k, groups.known, unique, key_n, key_k)
    tail = (int(carry_prompt[0]), carry_correct.astype(np.int8))
    if head is None:  # the whole shard is one run
        head, tail = tail, (-1, np.zeros(0, np.int8))
    joined = tuple(np.concatenate([r[i] for r in runs]) for i in range(3)) if runs else (_NONE,) * 3
    return ShardCounts(
        file,
        rows,
        prompts.known,
        n,
        k,
        head_prompt=head[0],
        head=head[1],
        tail_prompt=tail[0],
        tail=tail[1],
        runs=(joined[0], joined[1], joined[2]),
    )


def _grow(counts: _Ints, size: int) -> _Ints:
    return counts if counts.size >= size else np.concatenate([counts, np.zeros(size - counts.size, np.int64)])


class _Merge:
    """The running merge of :class:`ShardCounts` taken in shard order: global prompt (and group)
    codes, per-prompt counts, and the groups, a run that spans shards joined before it is split."""

    def __init__(self, columns: LogColumns, G: int) -> None:
        self.prompts, self.groups = _Dictionary(columns.prompt), _Dictionary(columns.group or "")
        self.columns = columns
        self.G = G
        self.rows = 0
        self.n = self.k = _NONE
        self.keyed: list[tuple[_Ints, _Ints, _Ints]] = []  # (global prompt * 2**32 + group, rows, correct)
        # (global prompt, size, correct) of the groups, as int32 chunks (half the memory until the end)
        self.runs: tuple[list[_Int32s], list[_Int32s], list[_Int32s]] = ([], [], [])
        self.carry: tuple[int, _Bits] | None = None  # the last run so far, which may go on
        self.types: dict[str, Any] = {}  # the prompt and group columns' types
        self.waiting: list[ShardCounts] = []  # shards taken, not yet merged (see add)
        self.waiting_ids = 0

    def add(self, part: ShardCounts) -> None:
        """Take the next shard's counts. They wait until the waiting shards hold as many distinct
        ids as are known, then are looked up together (:meth:`_fold`): each known id is hashed
        a bounded number of times over the log, not once per shard."""
        if part.rows == 0:
            return
        for name, values, kind in (
            (self.prompts.name, part.prompts, "prompt"),
            (self.groups.name, part.group_values, "group"),
        ):
            if values is None:
                continue
            first = self.types.setdefault(kind, values.type)
            if values.type != first:
                raise ValueError(
                    f"{part.path}: column {name!r} holds {values.type}, other shards {first}; "
                    "every shard needs the same column types"
                )
        self.waiting.append(part)
        self.waiting_ids += len(part.prompts)
        if self.prompts.known is None or self.waiting_ids >= len(self.prompts.known):
            self._fold()

    def _fold(self) -> None:
        """Global codes for the waiting shards' ids, in one lookup, then each shard merged."""
        pa = _pyarrow()
        parts, self.waiting, self.waiting_ids = self.waiting, [], 0
        if not parts:
            return
        ends = np.cumsum([len(part.prompts) for part in parts])[:-1]
        codes = np.split(
            self.prompts.codes(parts[0].path, pa.concat_arrays([p.prompts for p in parts])), ends
        )
        groups: list[_Ints | None] = [None] * len(parts)
        if parts[0].group_values is not None:
            ends = np.cumsum([len(part.group_values) for part in parts])[:-1]
            values = pa.concat_arrays([part.group_values for part in parts])
            groups = list(np.split(self.groups.codes(parts[0].path, values), ends))
        for part, code, group in zip(parts, codes, groups, strict=True):
            self._merge(part, code, group)

    def _merge(self, part: ShardCounts, code: _Ints, group: _Ints | None) -> None:
        """Merge one shard's counts, ``code`` the global code of each of its prompts (``group``
        of each of its group values)."""
        self.rows += part.rows
        size = len(self.prompts.known)
        self.n, self.k = _grow(self.n, size), _grow(self.k, size)
        self.n[code] += part.n
        self.k[code] += part.k
        if group is not None:
            key = code[part.keys >> 32] * (1 << 32) + group[part.keys & 0xFFFFFFFF]
            self.keyed.append((key, part.key_n, part.key_k))
            return
        head = (int(code[part.head_prompt]), part.head)
        if self.carry is not None and self.carry[0] == head[0]:
            head = (head[0], np.concatenate([self.carry[1], head[1]]))
        elif self.carry is not None:
            self._finish(self.carry)
        if part.tail_prompt < 0:  # the shard is one run: it may go on in the next
            self.carry = head
            return
        self._finish(head)
        prompt, group_n, group_k = part.runs
        if prompt.size:
            self._keep(code[prompt], group_n, group_k)
        self.carry = (int(code[part.tail_prompt]), part.tail)

    def _finish(self, run: tuple[int, _Bits]) -> None:
        prompt, correct = run
        rows = np.full(correct.size, prompt, np.int64)
        self._keep(
            *_split_runs(rows, correct.astype(np.int64), np.array([0]), np.array([correct.size]), self.G)
        )

    def _keep(self, *columns: _Ints) -> None:
        for chunks, column in zip(self.runs, columns, strict=True):
            if column.size and int(column.max()) > np.iinfo(np.int32).max:
                raise ValueError(
                    "the log holds more than 2**31 - 1 prompts, or a run of one prompt that long; "
                    "audit it in parts (a glob of some of its shards)"
                )
            chunks.append(column.astype(np.int32))

    def result(self, path: str, consecutive_groups: bool) -> Rollouts:
        self._fold()
        if self.rows == 0:
            raise ValueError(f"{path}: the shards hold no rollouts")
        group_col = self.columns.group
        source = f"column {group_col}" if group_col else "consecutive rows"
        if group_col:
            unique, inverse = np.unique(np.concatenate([u for u, _, _ in self.keyed]), return_inverse=True)
            weights = (np.concatenate([x[i] for x in self.keyed]) for i in (1, 2))
            group_n, group_k = (np.bincount(inverse, weights=w).astype(np.int64) for w in weights)
            group_prompt = (unique >> 32).astype(np.int64)
        else:
            if self.carry is not None:
                self._finish(self.carry)
                self.carry = None
            group_prompt, group_n, group_k = (_concat64(chunks) for chunks in self.runs)
            if not consecutive_groups or np.median(group_n) < 2:
                group_n = group_k = group_prompt = np.zeros(0, np.int64)
                source = ""
        values = np.asarray(self.prompts.known.to_numpy(zero_copy_only=False))
        return Rollouts(path, self.rows, values, self.n, self.k, group_n, group_k, group_prompt, source)


def merge_shard_counts(
    parts: Iterable[ShardCounts],
    *,
    path: str,
    columns: LogColumns = _DEFAULT_COLUMNS,
    G: int = 0,
    consecutive_groups: bool = True,
) -> Rollouts:
    """Merge the :class:`ShardCounts` of a log's shards, in shard order, into its
    :class:`sigma_ref.rollouts.Rollouts` (``path`` names the log; ``columns`` and ``G`` as for
    :func:`shard_counts`). Each part is folded in as it comes: a stream of parts is never held."""
    merge = _Merge(columns, G)
    for part in parts:
        merge.add(part)
    return merge.result(path, consecutive_groups)


ENGINES = ("pyarrow", "ray")


def read_rollout_shards(
    path: str,
    *,
    columns: LogColumns = _DEFAULT_COLUMNS,
    consecutive_groups: bool = True,
    fmt: str | None = None,
    engine: str = "pyarrow",
) -> Rollouts:
    """Read the shards of ``path`` (:func:`shard_paths`): :func:`shard_counts` on each, merged in
    shard order by :func:`merge_shard_counts`.

    The same reduction as :func:`sigma_ref.rollouts.read_rollouts` (same columns, rewards, group
    rules and errors); ``fmt`` applies to every shard, else each shard's suffix says.
    ``engine="pyarrow"`` reduces the shards one after the other in this process;
    ``engine="ray"`` in one Ray task per shard (:func:`sigma_ref.ray_engine.map_shards`), with the
    identical result.
    """
    if engine not in ENGINES:
        raise ValueError(
            f"engine={engine!r} is not an engine; use 'pyarrow' (the default: the shards one after "
            "the other in this process) or 'ray' (one Ray task per shard)"
        )
    files = shard_paths(path)
    G = 0 if columns.group else run_length(files, columns=columns, fmt=fmt)
    options: dict[str, Any] = {"columns": columns, "G": G, "fmt": fmt}
    if engine == "ray":
        from .ray_engine import map_shards

        parts: Generator[ShardCounts, None, None] = map_shards(files, options)
    else:
        parts = (shard_counts(file, **options) for file in files)
    try:
        return merge_shard_counts(
            parts, path=path, columns=columns, G=G, consecutive_groups=consecutive_groups
        )
    finally:
        parts.close()  # a Ray run stops its tasks and its local cluster even on an error


def _concat64(chunks: list[_Int32s]) -> _Ints:
    """The chunks end to end as one int64 array, each chunk dropped once copied (the list is
    emptied): at most the result and the chunks not yet copied are held."""
    out = np.empty(sum(c.size for c in chunks), np.int64)
    at = 0
    chunks.reverse()
    while chunks:
        chunk = chunks.pop()
        out[at : at + chunk.size] = chunk
        at += chunk.size
    return out


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
