"""Fault injection on the console script (issue 27): hostile paths, special files, output-path
failures, and implementations that exit, leave threads, print or allocate without bound.

Every case runs ``sigma-ref`` in a child process in a scratch directory and must end within
its time limit in either one clear line on stderr (exit 2; 141 for a closed pipe) or a
verdict with a summary, with no traceback, and with no file the user did not name as output
changed (a digest of the directory before and after). The slow tier: each ``check`` run
starts the suite (10-40 s on two busy cores).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: Seconds any one case may take (the slowest is a full ``check`` on two busy cores).
LIMIT_S = 150


def _digest(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_symlink():
            out[str(path.relative_to(root))] = "-> " + os.readlink(path)
    return out


def _run(
    cwd: Path, *argv: str, stdout: int | None = subprocess.PIPE, timeout: float = LIMIT_S, **env: str
) -> tuple[int, str, str, float]:
    environ = dict(os.environ, CI="true", PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cwd.parent / "cache"))
    environ.update(env)
    environ.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    environ.pop("HYPOTHESIS_PROFILE", None)
    start = time.monotonic()
    done = subprocess.run(
        [str(BIN / "sigma-ref"), *argv],
        cwd=cwd,
        env=environ,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout or "", done.stderr, time.monotonic() - start


def _one_line(code: int, err: str, match: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert match in err, err


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    here = tmp_path / "work"
    here.mkdir()
    (here / "rates.txt").write_text("0.5 0.25 0.1\n")
    (here / "rates.png").write_text("0.5 0.25 0.1\n")
    os.symlink("rates.png", here / "link.png")
    (here / "notes.svg").write_text("my notes\n")
    (here / "trainer.py").write_text("print('my code')\n")
    (here / "log.csv").write_text("prompt,reward\na,1\na,0\nb,1\nb,1\n")
    os.symlink("/etc/passwd", here / "passwd")
    os.mkfifo(here / "fifo")
    (here / "dir.png").mkdir()
    return here


AUDIT_CASES = [
    (["--file", "rates.png", "--plot", "rates.png", "--force"], "is an input of this run"),
    (["--file", "rates.png", "--plot", "link.png", "--force"], "is an input of this run"),
    (["0.5", "--plot", "trainer.py"], "use a .png or .svg"),
    (["0.5", "--plot", "notes.svg"], "not a previous svg output"),
    (["--file", "/dev/zero"], "is a device"),
    (["--file", "/dev/urandom"], "is a device"),
    (["--file", "fifo"], "a FIFO with no data within 10 s"),
    (["--rollouts", "/dev/zero", "--format", "parquet"], "is a device"),
    (["0.5", "--plot", "/proc/fig.png"], "cannot create a file"),
    (["0.5", "--plot", "dir.png"], "is a directory"),
    (["0.5", "--plot", "missing/fig.png"], "does not exist"),
]


@pytest.mark.parametrize(("argv", "match"), AUDIT_CASES, ids=[" ".join(a) for a, _ in AUDIT_CASES])
def test_audit_hostile_paths(scratch: Path, argv: list[str], match: str) -> None:
    before = _digest(scratch)
    code, _out, err, seconds = _run(scratch, "audit", *argv)
    _one_line(code, err, match)
    assert _digest(scratch) == before and seconds < 30


def test_errors_quote_no_line_of_a_foreign_file(scratch: Path) -> None:
    lines = [line for line in Path("/etc/passwd").read_text().splitlines() if len(line) > 12]
    for argv in (["--file", "passwd"], ["--rollouts", "passwd", "--format", "csv"]):
        code, _out, err, _ = _run(scratch, "audit", *argv)
        assert code == 2 and "Traceback" not in err, err
        assert not any(line in err for line in lines), err


def test_audit_output_failures(scratch: Path) -> None:
    with open("/dev/full", "w") as full:
        code, _, err, _ = _run(scratch, "audit", "0.5", stdout=full.fileno())
    _one_line(code, err, "standard output is /dev/full")
    proc = subprocess.Popen(
        [str(BIN / "sigma-ref"), "audit", *[f"{i / 5000:.4f}" for i in range(5000)], "--all"],
        cwd=scratch,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == "", err


def _check(scratch: Path, fn: str, *options: str) -> tuple[int, str, str, float]:
    return _run(
        scratch,
        "check",
        f"tests.gallery.hostile:{fn}",
        "--layout",
        "contiguous",
        "--hypothesis-profile",
        "ci",
        *options,
    )


def test_check_leaves_no_trace_and_ends_past_a_lingering_thread(scratch: Path) -> None:
    """A thread the code leaves running is a WARN after the verdict, not a 300 s wait blamed on
    the code "between two properties"; no hypothesis data lands in the working directory."""
    before = _digest(scratch)
    code, out, err, seconds = _check(scratch, "leaves_thread", "--report", "report.json")
    assert seconds < 100, (seconds, out[-2000:])
    assert "between two properties" not in out and "did not finish" not in out, out[-2000:]
    assert "WARN: the implementation left 1 thread(s) running after the run (forever-flusher)" in out, out
    assert "result:" in out and code in (0, 1), (code, out[-2000:], err[-2000:])
    after = _digest(scratch)
    assert after.pop("report.json") and after == before  # only the named output is new
    assert not (scratch / ".hypothesis").exists()
    assert (scratch.parent / "cache" / "sigma-ref" / "hypothesis").is_dir()
    code, out, err, _ = _check(scratch, "leaves_thread", "--report", "trainer.py")
    _one_line(code, err, "not a previous report output")
    assert _digest(scratch)["trainer.py"] == before["trainer.py"]


def test_check_bounds_what_the_code_prints(scratch: Path) -> None:
    """A megabyte printed per call: the run ends with its verdict and its output stays small."""
    _code, out, err, seconds = _check(scratch, "prints_megabytes")
    assert "result: CONFORMANT" in out, (out[-2000:], err[-2000:])
    assert len(out) + len(err) < 4 << 20, len(out) + len(err)
    assert seconds < LIMIT_S


def test_check_and_detect_refuse_a_result_far_larger_than_the_input(scratch: Path) -> None:
    code, out, err, seconds = _check(scratch, "returns_huge")
    assert code == 1 and "result: NOT CONFORMANT" in out and "(32768,)" in out, (out[-2000:], err[-2000:])
    code, out, err, seconds = _run(
        scratch, "detect", "tests.gallery.hostile:returns_huge", "--layout", "contiguous"
    )
    assert code == 1 and "no known convention" in out and seconds < 60, (out, err)


def test_detect_ends_past_a_lingering_thread(scratch: Path) -> None:
    _code, out, err, seconds = _run(
        scratch, "detect", "tests.gallery.hostile:leaves_thread", "--layout", "contiguous"
    )
    assert "WARN: the implementation left 1 thread(s) running after the probes" in out, (out, err)
    assert "did not finish the probes" not in out and seconds < 60, (out, seconds)


def test_detect_refuses_a_grouped_result_of_a_flat_layout(scratch: Path) -> None:
    (scratch / "twod.py").write_text(
        "def adv(rewards, G):\n"
        "    r = rewards.view(-1, G)\n"
        "    return (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)\n"
    )
    code, out, _err, _ = _run(
        scratch, "detect", "twod:adv", "--layout", "contiguous", PYTHONPATH=f"{scratch}{os.pathsep}{ROOT}"
    )
    assert code == 1 and not out.startswith("trl"), out
    assert "no advantages in the layout's shape" in out, out
    assert not (scratch / "__pycache__").exists()  # nothing written beside the user's code


def test_the_pytest_route_says_it_does_not_protect_itself(scratch: Path) -> None:
    """``os._exit(0)`` under ``pytest spec --sigma-ref-impl`` still ends pytest with 0 and no
    summary (spec/README.md); the header, printed first, says so and points to ``check``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "spec"),
            "-p",
            "no:cacheprovider",
            "--sigma-ref-impl",
            "tests.gallery.hostile:hard_exit",
            "--sigma-ref-layout",
            "contiguous",
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), CI="true"),
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )
    assert "runs in this pytest process" in done.stdout and "sigma-ref check" in done.stdout, done.stdout


def test_the_pytest_route_stops_a_stubborn_hang_in_one_line(scratch: Path) -> None:
    """A call that swallows the time limit: exit 1 and one FAIL line within seconds, not a
    silent wait of the whole hypothesis run."""
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "spec"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--sigma-ref-impl",
            "tests.gallery.hostile:hangs_stubbornly",
            "--sigma-ref-layout",
            "contiguous",
            "--sigma-ref-timeout",
            "1",
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), CI="true"),
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )
    seconds = time.monotonic() - start
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    assert "sigma-ref: FAIL: the implementation did not return within 1 s and caught the 3" in done.stderr
    assert seconds < 60, seconds
