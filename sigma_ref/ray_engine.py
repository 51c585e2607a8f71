"""``--engine ray``: the shards of a rollout log reduced by Ray tasks (issue 24, item 11).

:func:`map_shards` runs :func:`sigma_ref.shards.shard_counts`, the very function the default
engine calls, in one Ray task per shard, and yields the results in shard order for
:func:`sigma_ref.shards.merge_shard_counts`: the report is identical to the default engine's.
It connects to the cluster that ``RAY_ADDRESS`` names, or to the one this process already
joined (``ray.init`` called before), and otherwise starts a local one for the call. The shard
paths must be readable by every worker (on a cluster of several machines: shared storage).

Ray comes with the ``ray`` extra: ``pip install 'sigma-ref[ray]'``.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .shards import ShardCounts

__all__ = ["EngineError", "map_shards"]

#: How to install Ray for ``--engine ray``.
INSTALL = "pip install 'sigma-ref[ray]'"


class EngineError(RuntimeError):
    """A Ray task did not finish, or the Ray cluster could not be started or reached."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(f"--engine ray needs Ray; install it: {INSTALL}", name="ray") from None
    return ray


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def map_shards(
    files: list[str], options: dict[str, Any], *, in_flight: int | None = None
) -> Generator[ShardCounts, None, None]:
    """``shard_counts(file, **options)`` for each of ``files`` (``options``: its keywords, the
    ``columns``, ``G`` and ``fmt``), each in its own Ray task, yielded in the order of ``files``;
    at most ``in_flight`` tasks (default: twice the cluster's CPUs) run or wait to be merged at
    once, so the driver holds a bounded number of results.

    A task that raised ``ValueError`` or ``TypeError`` (a bad shard) re-raises it here, with the
    default engine's one-line message; any other failure, and a cluster that cannot be started
    or reached, raise :class:`EngineError` naming the shard and what to do.
    """
    ray = _ray()
    from .shards import shard_counts

    started = False
    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        except Exception as exc:
            where = (
                f"the Ray cluster at RAY_ADDRESS={os.environ['RAY_ADDRESS']}"
                if os.environ.get("RAY_ADDRESS")
                else "a local Ray cluster"
            )
            raise EngineError(
                f"--engine ray could not start or reach {where} ({_first_line(exc)}); check it with "
                "`ray status`, or drop --engine ray to read the shards in this process"
            ) from None
        started = True
    try:
        task = ray.remote(shard_counts)
        limit = in_flight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        pending: collections.deque[tuple[str, Any]] = collections.deque()
        for file in files:
            pending.append((file, task.remote(file, **options)))
            if len(pending) >= limit:
                yield _result(ray, *pending.popleft())
        while pending:
            yield _result(ray, *pending.popleft())
    finally:
        if started:
            ray.shutdown()


def _result(ray: Any, file: str, ref: Any) -> ShardCounts:
    try:
        result: ShardCounts = ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, (ValueError, TypeError)):
            raise cause from None
        raise EngineError(
            f"the Ray task reducing {file} failed ({_first_line(cause or exc)}); fix that shard, or "
            "drop --engine ray to read it in this process and see the full error"
        ) from None
    except ray.exceptions.RayError as exc:  # a worker or node died, an object was lost
        raise EngineError(
            f"the Ray task reducing {file} did not finish ({_first_line(exc)}); check the cluster's "
            "workers and memory with `ray status`, or drop --engine ray"
        ) from None
    return result
