"""What the parent and the ranks exchange: the launch's config file (JSON), a rank's results per
configuration, and a job that ended without results (:class:`_RunError`)."""

from __future__ import annotations

from typing import TypeAlias, TypedDict

#: One configuration of a plan: (world size w, micro-batches m, split); w = 1 runs on rank 0 alone.
_Key: TypeAlias = "tuple[int, int, str]"

# ---------------------------------------------------------------------------
# the worker (one per rank)


class _JobConfig(TypedDict):
    """One job as the ranks read it from the launch's config file (JSON)."""

    impl: str
    loss: str | None
    layout: str | None  # as given (None: the Adapter's own)
    output: str | int | None
    seed: int
    aggregation: str | None
    loss_scale: str
    plan: list[_Key]
    sizes: str
    steps_per_generation: int
    mask_truncated: bool
    pad_value: float | None
    packing: str
    advantage_scale: str
    advantage_scale_on: str
    advantage_scaler: str | None
    aggregation_constant: float | None
    framework: str


class _LaunchConfig(TypedDict):
    """The launch's config file: the process group and the jobs, run in this order."""

    world_size: int
    backend: str
    host: str
    port: int
    timeout: float  # of the process group's collectives: the parent's deadlines come first
    jobs: list[_JobConfig]


class _Run(TypedDict):
    """Rank 0's outcome of one configuration: the rank-averaged gradient, the gathered advantages."""

    grad: list[float] | None  # None: no loss
    advantages: list[float]


# ---------------------------------------------------------------------------
# the parent: processes, time-outs, clean-up


class _RunError(Exception):
    """A job that ended without results: ``message`` for its FAIL, ``detail`` the rank's traceback or log."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message, detail)
        self.message = message
        self.detail = detail


#: A job's outcome: rank 0's results per configuration of its plan, or why there are none.
_Outcome: TypeAlias = "list[_Run | None] | _RunError"
