"""The parent: W processes per launch, the jobs' deadlines, blame for a rank that raised or hung, and
clean-up (every process killed, the work directory removed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from .protocol import _JobConfig, _LaunchConfig, _Outcome, _RunError

#: Where rank 0's rendezvous store listens unless a multi-host run asks otherwise: loopback only.
RENDEZVOUS_HOST = "127.0.0.1"


#: Rendezvous hosts that keep every socket of a launch on this machine.
_LOOPBACK: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")


def _loopback_interface() -> str:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS)."""
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return next((n for n in names if n in ("lo", "lo0")), "lo")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # each rank leads its own session
            except (ProcessLookupError, PermissionError):
                p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            pass


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return ""


def _launch(
    world_size: int,
    backend: str,
    jobs: Sequence[_JobConfig],
    timeouts: Sequence[float],
    host: str = RENDEZVOUS_HOST,
) -> list[tuple[_Outcome, float]]:
    """Run ``jobs`` in order on ``world_size`` fresh processes; each outcome with when it was known.

    The outcomes cover every job, or stop at the first that fails (a :class:`_RunError` naming
    the rank and its exception, or where every rank was when a rank hung): then every process
    is killed and the caller runs the rest elsewhere. Job k has ``timeouts[k]`` seconds from the
    end of job k - 1 (the first from the launch, start-up included, as a launch of one job); the
    last job ends when every process has exited with code 0.
    """
    workdir = tempfile.mkdtemp(prefix="sigma-ref-scaleout-")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        cfg: _LaunchConfig = {
            "world_size": world_size,
            "backend": backend,
            "host": host,
            "port": _free_port(),
            "timeout": max(timeouts),
            "jobs": list(jobs),
        }
        config_path = os.path.join(workdir, "config.json")
        with open(config_path, "w", encoding="utf-8") as fh:
            json.dump(cfg, fh)
        procs += _start_ranks(workdir, config_path, world_size, host)
        return _Watch(workdir, procs, len(jobs), timeouts).run()
    finally:
        _kill(procs)
        shutil.rmtree(workdir, ignore_errors=True)


def _start_ranks(workdir: str, config_path: str, world_size: int, host: str) -> list[subprocess.Popen[bytes]]:
    """Start one process per rank, each in its own session, its output in ``log.<rank>``."""
    env = dict(os.environ)
    paths = [os.getcwd(), *(p for p in sys.path if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("OMP_NUM_THREADS", "1")
    if host in _LOOPBACK:  # the collectives' sockets too, unless the user chose an interface
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            env.setdefault(name, _loopback_interface())
    code = (
        "import sys; from sigma_ref.conformance.scaleout.worker import _worker; "
        "sys.exit(_worker(sys.argv[1], int(sys.argv[2])))"
    )
    procs = []
    for rank in range(world_size):
        log = open(os.path.join(workdir, f"log.{rank}"), "w", encoding="utf-8")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code, config_path, str(rank)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()
    return procs


class _Watch:
    """The parent's watch over one launch: each job's results as they are written, the first rank to
    raise, a rank that hangs past the job's deadline."""

    def __init__(
        self, workdir: str, procs: Sequence[subprocess.Popen[bytes]], n_jobs: int, timeouts: Sequence[float]
    ) -> None:
        self.workdir, self.procs, self.n_jobs, self.timeouts = workdir, procs, n_jobs, timeouts
        self.outcomes: list[tuple[_Outcome, float]] = []
        self.deadline = time.monotonic() + timeouts[0]

    def _path(self, name: str) -> str:
        return os.path.join(self.workdir, name)

    def collect(self, codes: Sequence[int | None]) -> None:
        """Add the jobs whose results are written (the last one only once every rank exited 0)."""
        while len(self.outcomes) < self.n_jobs:
            k = len(self.outcomes)
            path = self._path(f"results.{k}.json")
            if not os.path.exists(path) or (k == self.n_jobs - 1 and not all(c == 0 for c in codes)):
                return
            with open(path, encoding="utf-8") as fh:
                self.outcomes.append((json.load(fh), time.monotonic()))
            if len(self.outcomes) < self.n_jobs:
                self.deadline = time.monotonic() + self.timeouts[len(self.outcomes)]

    def fail(self, message: str, detail: str = "") -> list[tuple[_Outcome, float]]:
        """End the launch with the current job's FAIL: every process killed."""
        _kill(self.procs)
        self.outcomes.append((_RunError(message, detail), time.monotonic()))
        return self.outcomes

    def crashed(self, crashed: Sequence[int], codes: Sequence[int | None]) -> list[tuple[_Outcome, float]]:
        """The FAIL of a rank that exited with an error: the first error written is the cause."""
        time.sleep(0.3)  # let a peer's error land too, then blame the first one written
        self.collect([p.poll() for p in self.procs])  # a rank past job k proves job k's results
        errors = [r for r in range(len(self.procs)) if os.path.exists(self._path(f"error.{r}"))]
        r = min(errors, key=lambda k: os.path.getmtime(self._path(f"error.{k}")), default=crashed[0])
        _kill(self.procs)
        detail = _read(self._path(f"error.{r}")) or _read(self._path(f"log.{r}"))
        last = detail.strip().splitlines()[-1] if detail.strip() else f"exit code {codes[r]}"
        return self.fail(f"rank {r} failed: {last}", detail)

    def hung(self, codes: Sequence[int | None]) -> list[tuple[_Outcome, float]] | None:
        """Past the deadline: the FAIL naming where every rank was, or None when a rank's stage proves
        the job done after all."""
        stages = {r: _read(self._path(f"progress.{r}")) or "start-up" for r in range(len(self.procs))}
        waiting = len(self.outcomes)
        self.collect(codes)  # a stage read above that belongs to the next job proves this one done
        if len(self.outcomes) > waiting:
            return None
        where = "; ".join(f"rank {r} in {s}" for r, s in stages.items())
        timeout = self.timeouts[len(self.outcomes)]
        return self.fail(
            f"a rank hung: no result within the timeout of {timeout:g} s ({where}); every rank was killed"
        )

    def run(self) -> list[tuple[_Outcome, float]]:
        """Poll until every job has its outcome or one fails."""
        while True:
            codes = [p.poll() for p in self.procs]
            self.collect(codes)
            if len(self.outcomes) == self.n_jobs:
                return self.outcomes
            if all(c == 0 for c in codes):  # pragma: no cover - a rank 0 that exits 0 wrote every file
                return self.fail("rank 0 exited without writing its results")
            crashed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if crashed:
                return self.crashed(crashed, codes)
            if time.monotonic() > self.deadline:
                done = self.hung(codes)
                if done is not None:
                    return done
            time.sleep(0.02)


def _run_jobs(
    jobs: Sequence[_JobConfig],
    timeouts: Sequence[float],
    *,
    world_size: int,
    backend: str,
    host: str = RENDEZVOUS_HOST,
) -> list[tuple[_Outcome, float]]:
    """Every job's outcome: as many jobs per launch as run through, the rest in fresh processes.

    A job that fails (a rank raised or hung) gets its FAIL as if it had run alone, and the jobs
    after it run in a new launch. Another program may take the free port before rank 0 binds
    it: a job failing with ``address already in use`` is tried up to three times, as alone.
    """
    outcomes: list[tuple[_Outcome, float]] = []
    attempts = 0
    while len(outcomes) < len(jobs):
        start = len(outcomes)
        got = _launch(world_size, backend, jobs[start:], timeouts[start:], host)
        if len(got) > 1:
            attempts = 0  # the failing job, if any, had its first attempt in this launch
        attempts += 1
        last = got[-1][0]
        if isinstance(last, _RunError):
            if attempts < 3 and "address already in use" in last.detail.lower():
                outcomes += got[:-1]
                continue
        outcomes += got
        attempts = 0
    return outcomes
