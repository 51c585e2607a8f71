"""Rollout logs: per-prompt counts ``(n, k)``, logged groups, and the unbiased subsampled silent rate.

:func:`read_rollouts` reads a log (Parquet, CSV or JSON Lines; one row per rollout) with
pyarrow and reduces it, vectorised, to per-prompt rollout counts ``n`` and correct counts
``k``, and to the groups the log holds (``--group-col``, or runs of consecutive rows with
the same prompt). :func:`subsampled_silent_rate` is the exact without-replacement estimate
of a prompt's silent-group rate, ``(C(k,G) + C(n-k,G)) / C(n,G)`` (``proofs/10_subsampled``:
unbiased for ``p**G + (1-p)**G``, which the plug-in ``p_hat**G + (1-p_hat)**G`` is not).

pyarrow (and tqdm for the progress bar) come with the ``audit`` extra:
``pip install 'sigma-ref[audit]'``.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import re
import sys
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["LogColumns", "Rollouts", "read_rollouts", "rollout_counts", "subsampled_silent_rate"]

_FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "json",
    ".ndjson": "json",
    ".json": "json",
}
_BATCH_ROWS = 1 << 20
_CSV_BLOCK = 1 << 24
_SHOWN_COLUMNS = 8
#: The most bytes one Parquet batch decodes to, and the most the wanted columns may decode to.
_BATCH_BYTES = 1 << 26
MAX_TABLE_BYTES = 1 << 31


class _Decoded:
    """A running count of the bytes a log's columns decode to; ``ValueError`` past ``MAX_TABLE_BYTES``."""

    def __init__(self, path: str) -> None:
        self.path, self.total = path, 0

    def add(self, nbytes: int) -> None:
        self.total += nbytes
        if self.total > MAX_TABLE_BYTES:
            raise ValueError(
                f"{self.path}: the columns read decode to more than {MAX_TABLE_BYTES:,} bytes (long text "
                "in the prompt or group column?); give columns of short ids, or split the log"
            )


def subsampled_silent_rate(n: Any, k: Any, G: int) -> np.ndarray:
    """Unbiased estimate of ``p**G + (1-p)**G`` from ``k`` correct of ``n`` rollouts.

    ``(C(k, G) + C(n - k, G)) / C(n, G)``: the share of the ``C(n, G)`` groups of ``G``
    drawn without replacement from the ``n`` logged rollouts that are silent (all correct
    or all wrong). Its expectation over ``k ~ Binomial(n, p)`` is exactly
    ``p**G + (1-p)**G`` (``proofs/10_subsampled``). ``nan`` where ``G > n`` (no group of
    ``G`` can be drawn). Computed as ``prod_{i<G} (k-i)/(n-i)``, a few ulps per factor.

    >>> subsampled_silent_rate([4, 8], [2, 4], 2)  # (1 + 1)/6 and (6 + 6)/28
    array([0.33333333, 0.42857143])
    >>> float(subsampled_silent_rate(8, 3, 8))  # one group of 8: silent iff k in {0, 8}
    0.0
    """
    n_arr = np.asarray(n, dtype=np.float64).reshape(-1) if np.ndim(n) else np.asarray([n], dtype=np.float64)
    k_arr = np.broadcast_to(np.asarray(k, dtype=np.float64).reshape(-1), n_arr.shape)
    if isinstance(G, bool) or int(G) != G or G < 1:
        raise ValueError(f"G={G!r} must be a positive integer group size")
    if (n_arr < 0).any() or (k_arr < 0).any() or (k_arr > n_arr).any():
        raise ValueError("need 0 <= k <= n for every prompt (k correct of n rollouts)")
    G = int(G)
    # one pass per factor over the distinct (n, k) pairs, not per prompt
    pairs, inverse = np.unique(np.stack([n_arr, k_arr]), axis=1, return_inverse=True)
    nn, kk = pairs
    right = np.ones(nn.shape)
    wrong = np.ones(nn.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(G):
            right *= np.maximum(kk - i, 0) / (nn - i)
            wrong *= np.maximum(nn - kk - i, 0) / (nn - i)
    out = np.where(nn >= G, right + wrong, np.nan)
    out = out[np.asarray(inverse).reshape(-1)]
    return out if np.ndim(n) or np.ndim(k) else out.reshape(())


@dataclasses.dataclass(frozen=True)
class Rollouts:
    """A rollout log reduced to prompts and groups.

    ``n[i]``, ``k[i]``: rollouts and correct rollouts of prompt ``i`` (``prompts[i]`` its id).
    ``group_n``, ``group_k``: size and correct count of each group the log holds
    (``group_prompt`` the prompt index of each); ``group_source`` says how groups were found
    (``"column <name>"``, ``"consecutive rows"`` or ``""`` when the log holds none).
    """

    path: str
    rows: int
    prompts: np.ndarray
    n: npt.NDArray[np.int64]
    k: npt.NDArray[np.int64]
    group_n: npt.NDArray[np.int64]
    group_k: npt.NDArray[np.int64]
    group_prompt: npt.NDArray[np.int64]
    group_source: str

    @property
    def p(self) -> npt.NDArray[np.float64]:
        """Per-prompt pass rate ``k / n``."""
        return self.k / self.n

    @property
    def logged_G(self) -> int | None:
        """The group size of the log: the most common group size (``None`` without groups)."""
        if self.group_n.size == 0:
            return None
        sizes, counts = np.unique(self.group_n, return_counts=True)
        return int(sizes[np.argmax(counts)])


@dataclasses.dataclass(frozen=True)
class LogColumns:
    """How to read a rollout log's columns: their names and what counts as correct, checked once.

    ``prompt``: the column that identifies the prompt (ids of any type). ``reward``: the reward
    column (booleans, numbers that are all 0 or 1, or any numbers with ``correct_threshold``).
    ``group``: the column whose value, with the prompt, names a rollout's group (``None``: groups
    are runs of consecutive rows with the same prompt). ``correct_threshold``: a rollout is
    correct when its reward is ``> correct_threshold`` (``None``: the rewards must be binary).
    ``ValueError`` when the threshold is not a finite number or two columns share a name.

    >>> LogColumns(group="group").names
    ['prompt', 'reward', 'group']
    >>> LogColumns(prompt="q", reward="q")
    Traceback (most recent call last):
    ...
    ValueError: the prompt, reward and group columns must differ; got ['q', 'q']
    """

    prompt: str = "prompt"
    reward: str = "reward"
    group: str | None = None
    correct_threshold: float | None = None

    def __post_init__(self) -> None:
        threshold = self.correct_threshold
        if threshold is not None and not (
            isinstance(threshold, int | float) and -np.inf < threshold < np.inf
        ):
            raise ValueError(
                f"correct_threshold={threshold!r} must be a finite number (a rollout is correct "
                "when its reward is > T), e.g. 0.5"
            )
        names = self.names
        if len(set(names)) != len(names):
            raise ValueError(f"the prompt, reward and group columns must differ; got {names}")

    @property
    def names(self) -> list[str]:
        """The columns to read: the prompt and reward columns, and the group column when given."""
        return [self.prompt, self.reward] + ([self.group] if self.group else [])


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:  # pragma: no cover - the audit extra is installed in tests
        raise ImportError("reading rollout logs needs pyarrow", name="pyarrow") from None
    return pyarrow


def _progress(total: int | None, unit: str, enabled: bool | None) -> Any:
    """A tqdm bar on stderr when it is a terminal (or ``enabled=True``); a no-op otherwise."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        enabled = False
    if not enabled:
        return _NoBar()
    return tqdm(total=total, unit=unit, unit_scale=True, desc="reading rollouts", leave=False)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _format_of(path: str, fmt: str | None) -> str:
    if fmt is not None:
        if fmt not in {"parquet", "csv", "tsv", "json"}:
            raise ValueError(f"format={fmt!r} must be one of parquet, csv, tsv, json")
        return fmt
    lower = path.lower()
    for suffix, name in _FORMATS.items():
        if lower.endswith(suffix):
            return name
    raise ValueError(
        f"{path}: cannot tell the format from the name; use a .parquet, .csv, .tsv or .jsonl "
        "name, or pass --format"
    )


def _check_columns(path: str, available: list[str], wanted: list[str]) -> None:
    from ._files import quote

    missing = [c for c in wanted if c not in available]
    if missing:
        shown = ", ".join(quote(c) for c in available[:_SHOWN_COLUMNS])
        more = f" and {len(available) - _SHOWN_COLUMNS} more" if len(available) > _SHOWN_COLUMNS else ""
        raise ValueError(
            f"{path}: no column {quote(missing[0])}; the file has [{shown}]{more}. Name the columns with "
            "--prompt-col, --reward-col (and --group-col)"
        )


def _read_table(path: str, fmt: str, columns: list[str], progress: bool | None) -> Any:
    """The wanted columns of the log as one pyarrow Table (read in batches, with a bar)."""
    pa = _pyarrow()
    import io

    import pyarrow.csv as pacsv
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    from ._files import read_input

    source: Any = path
    regular = path != "-" and os.path.isfile(path)
    if not regular:  # '-', a pipe (<(zcat log.csv.gz), /dev/stdin): read, bounded; devices refused
        source = read_input(path, option="--rollouts")
        if not source:
            raise ValueError(f"{path} is empty; it holds no rollouts")
    elif os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty; it holds no rollouts")

    def raw_file() -> Any:
        return open(path, "rb") if regular else io.BytesIO(source)

    batches = []
    decoded = _Decoded(path)
    try:
        if fmt == "parquet":
            file = pq.ParquetFile(path if regular else pa.BufferReader(source))
            _check_columns(path, file.schema_arrow.names, columns)
            bar = _progress(file.metadata.num_rows, "rows", progress)
            # a first small batch measures the decoded bytes per row (a compressed column of long
            # strings can decode to a thousand times its size); the batches then fit _BATCH_BYTES
            first = next(file.iter_batches(batch_size=64, columns=columns), None)
            per_row = first.nbytes / max(first.num_rows, 1) if first is not None else 1.0
            size = int(max(1, min(_BATCH_ROWS, _BATCH_BYTES // max(per_row, 1.0))))
            for batch in file.iter_batches(batch_size=size, columns=columns):
                decoded.add(batch.nbytes)
                batches.append(batch)
                bar.update(batch.num_rows)
            bar.close()
            schema = file.schema_arrow
        elif fmt in {"csv", "tsv"}:
            delimiter = "\t" if fmt == "tsv" else ","
            with raw_file() as head_bytes:
                head = io.TextIOWrapper(head_bytes, encoding="utf-8-sig", newline="")
                header = next(csv.reader(head, delimiter=delimiter), [])
            _check_columns(path, header, columns)
            bar = _progress(os.path.getsize(path) if regular else len(source), "B", progress)
            with raw_file() as raw:
                reader = pacsv.open_csv(
                    raw,
                    read_options=pacsv.ReadOptions(block_size=_CSV_BLOCK),
                    parse_options=pacsv.ParseOptions(delimiter=delimiter),
                    convert_options=pacsv.ConvertOptions(include_columns=columns),
                )
                schema = reader.schema
                done = 0
                for batch in reader:
                    decoded.add(batch.nbytes)
                    batches.append(batch)
                    position = raw.tell()
                    bar.update(position - done)
                    done = position
            bar.close()
        else:
            with raw_file() as raw:
                table = pajson.read_json(raw, read_options=pajson.ReadOptions(block_size=_CSV_BLOCK))
            decoded.add(table.nbytes)
            _check_columns(path, table.column_names, columns)
            table = table.select(columns)
            schema = table.schema
            batches = table.to_batches()
    except pa.ArrowInvalid as exc:
        # Arrow quotes the offending row: keep its own words, never the file's line
        message = re.sub(r"(got \d+|[Ii]nvalid value|row)\s*:.*", r"\1", str(exc).split("\n")[0])[:160]
        if "changed from" in message or "conversion error" in message.lower():
            raise ValueError(f"{path}: a column holds mixed types ({message})") from None
        raise ValueError(f"{path}: cannot read it as {fmt} ({message})") from None
    if fmt == "parquet":
        schema = pa.schema([schema.field(c) for c in columns])
    table = pa.Table.from_batches(batches, schema=schema)
    if table.num_rows == 0:
        raise ValueError(f"{path} holds no rollouts (a header and no rows)")
    return table


def _numpy(column: Any) -> npt.NDArray[Any]:
    """A pyarrow array's values as a numpy array (copied where Arrow's layout differs)."""
    return np.asarray(column.to_numpy(zero_copy_only=False))


def _correct(path: str, rewards: Any, name: str, threshold: float | None) -> npt.NDArray[np.int8]:
    """Per-row correctness from the reward column, as int8."""
    pa = _pyarrow()
    if rewards.null_count:
        raise ValueError(f"{path}: {rewards.null_count} rows have no {name!r}; every rollout needs a reward")
    kind = rewards.type
    if pa.types.is_boolean(kind):
        return _numpy(rewards).astype(np.int8)
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        from ._files import quote

        sample = rewards.slice(0, 1).to_pylist()
        raise ValueError(
            f"{path}: column {quote(name)} holds {kind} (e.g. {quote(str(sample[0]))}), not numbers; "
            "rewards must be "
            "numbers or booleans (a column mixing numbers and text reads as text)"
        )
    values = _numpy(rewards).astype(np.float64, copy=False)
    if threshold is not None:
        if not np.isfinite(values).all():
            raise ValueError(f"{path}: column {name!r} holds NaN or infinite rewards")
        return (values > threshold).astype(np.int8)
    binary = (values == 0) | (values == 1)
    if not binary.all():
        bad = float(values[~binary][0])
        raise ValueError(
            f"{path}: column {name!r} is not binary (e.g. {bad!r}); pass --correct-threshold T "
            "(a rollout counts as correct when its reward is > T)"
        )
    return values.astype(np.int8)


def _codes(column: Any) -> tuple[npt.NDArray[np.int64], np.ndarray]:
    """Dense integer codes of a column's values (in order of first appearance) and the values."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column.combine_chunks() if hasattr(column, "combine_chunks") else column)
    return _numpy(encoded.indices).astype(np.int64), _numpy(encoded.dictionary)


_Counts = npt.NDArray[np.int64]


def rollout_counts(
    prompt: np.ndarray, correct: np.ndarray, group: np.ndarray | None = None
) -> tuple[_Counts, _Counts, _Counts, _Counts, _Counts]:
    """Per-prompt ``(n, k)`` and the logged groups from integer codes, all vectorised.

    ``prompt``: integer prompt code per row; ``correct``: 0/1 per row; ``group``: integer
    group code per row, or ``None`` to take runs of consecutive rows with the same prompt
    as groups: the most common run length is the logged ``G``, and a run of ``m G`` rows (the
    same prompt's groups back to back) is split into ``m`` groups. Returns
    ``(n, k, group_n, group_k, group_prompt)``.

    >>> n, k, gn, gk, gp = rollout_counts(np.array([0, 0, 1, 1, 0, 0]), np.array([1, 0, 1, 1, 0, 0]))
    >>> n.tolist(), k.tolist(), gn.tolist(), gk.tolist(), gp.tolist()
    ([4, 2], [1, 2], [2, 2, 2], [1, 2, 0], [0, 1, 0])
    >>> rollout_counts(np.array([0, 0, 1, 1, 1, 1]), np.array([1, 0, 1, 1, 0, 0]))[2:]
    (array([2, 2, 2]), array([1, 2, 0]), array([0, 1, 1]))
    """
    prompt = np.asarray(prompt, dtype=np.int64)
    correct = np.asarray(correct, dtype=np.int64)
    size = int(prompt.max()) + 1 if prompt.size else 0
    n = np.bincount(prompt, minlength=size)
    k = np.bincount(prompt, weights=correct, minlength=size).astype(np.int64)
    if group is None:
        starts = np.flatnonzero(np.r_[True, prompt[1:] != prompt[:-1]])
        lengths = np.diff(np.r_[starts, prompt.size])
        G = int(np.bincount(lengths).argmax()) if lengths.size else 0
        # a run of m*G rows (a prompt's groups logged back to back) is m groups of G
        split = (lengths % G == 0) & (lengths > G) if G > 1 else np.zeros(lengths.shape, bool)
        keep = ~split
        rows = np.repeat(split, lengths)
        chunks = correct[rows].reshape(-1, G).sum(axis=1) if split.any() else np.zeros(0, np.int64)
        group_prompt = np.r_[prompt[starts[keep]], prompt[rows][::G] if split.any() else []].astype(np.int64)
        group_n = np.r_[lengths[keep], np.full(chunks.size, G)].astype(np.int64)
        group_k = np.r_[np.add.reduceat(correct, starts)[keep] if starts.size else [], chunks].astype(
            np.int64
        )
    else:
        key = prompt * (int(np.asarray(group).max()) + 1) + np.asarray(group, dtype=np.int64)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        group_prompt = prompt[first]
        group_n = np.bincount(inverse)
        group_k = np.bincount(inverse, weights=correct).astype(np.int64)
    return n, k, group_n, group_k.astype(np.int64), group_prompt


def read_rollouts(
    path: str,
    *,
    prompt_col: str = "prompt",
    reward_col: str = "reward",
    group_col: str | None = None,
    correct_threshold: float | None = None,
    consecutive_groups: bool = True,
    fmt: str | None = None,
    progress: bool | None = None,
    engine: str = "pyarrow",
) -> Rollouts:
    """Read a rollout log and reduce it to per-prompt ``(n, k)`` and its groups.

    ``path`` is one file, or a directory or glob of shards (:mod:`sigma_ref.shards`, reduced as
    they stream). One row per rollout. ``prompt_col`` identifies the prompt (any type), ``reward_col``
    holds the reward: booleans, or numbers that are all 0 or 1 (binary), or any numbers
    with ``correct_threshold`` (a rollout is correct when ``reward > correct_threshold``).
    Groups: rows sharing ``(prompt, group_col)`` when ``group_col`` is given; otherwise
    (``consecutive_groups=True``) each run of consecutive rows with the same prompt is one
    group, as trainers log a group's ``G`` rollouts together. A progress bar is drawn on a
    terminal (``progress=None``), always (``True``) or never (``False``). ``engine`` reduces
    shards in this process (``"pyarrow"``) or in one Ray task per shard (``"ray"``, the ``ray``
    extra; shards only), with the identical result. The column options are checked once, as a
    :class:`LogColumns`.

    Raises ``ValueError`` naming the file for a missing file or column, an empty file, a
    reward column of text or mixed types, and non-binary rewards without a threshold.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path={path!r} must be a file name")
    path = os.fspath(path)
    columns = LogColumns(
        prompt=prompt_col, reward=reward_col, group=group_col, correct_threshold=correct_threshold
    )
    from . import shards

    if engine not in shards.ENGINES or (not shards.is_shards(path) and engine != "pyarrow"):
        if engine in shards.ENGINES:
            raise ValueError(
                f"engine {engine!r} reduces a directory or glob of shards, and {path} is one file; "
                "give the shards, or use the default engine 'pyarrow'"
            )
        raise ValueError(f"engine={engine!r} is not an engine; use 'pyarrow' (the default) or 'ray'")
    if shards.is_shards(path):  # a directory or a glob: streamed shard by shard
        return shards.read_rollout_shards(
            path, columns=columns, consecutive_groups=consecutive_groups, fmt=fmt, engine=engine
        )
    fmt = _format_of(path, fmt)
    table = _read_table(path, fmt, columns.names, progress)
    correct = _correct(
        path, table.column(columns.reward).combine_chunks(), columns.reward, columns.correct_threshold
    )
    prompt_column = table.column(columns.prompt)
    if prompt_column.null_count:
        raise ValueError(f"{path}: {prompt_column.null_count} rows have no {columns.prompt!r}")
    codes, prompts = _codes(prompt_column)
    group = None
    if columns.group:
        group, _ = _codes(table.column(columns.group))
    n, k, group_n, group_k, group_prompt = rollout_counts(codes, correct, group)
    source = f"column {columns.group}" if columns.group else "consecutive rows"
    if not columns.group and (not consecutive_groups or np.median(group_n) < 2):
        # shuffled logs: runs of one row are not groups
        group_n = group_k = group_prompt = np.zeros(0, np.int64)
        source = ""
    return Rollouts(path, table.num_rows, prompts, n, k, group_n, group_k, group_prompt, source)
