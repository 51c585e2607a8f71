"""Hostile paths for the command line's inputs and outputs (issue 27, items 1, 2, 5, 6, 13).

Each case runs ``sigma_ref.cli.main`` in this process and checks that it ends in one line on
stderr (no traceback), exit status 2 (or 141 for a closed pipe), and that no file the user
did not name as output changed. The slow fault-injection module (``test_fault_injection.py``)
runs the console script in child processes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from sigma_ref import _files
from sigma_ref.cli import main

pytest.importorskip("matplotlib")
pytest.importorskip("pyarrow")


def _digest(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` (not following links) -> its sha256."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _fails_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str], match: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert match in err, err
    return err


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rates.txt").write_text("0.5 0.25\n")
    (tmp_path / "trainer.py").write_text("print('my code')\n")
    (tmp_path / "log.csv").write_text("prompt,reward\na,1\na,0\nb,1\nb,1\n")
    return tmp_path


def test_plot_never_overwrites_an_input_even_with_force(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "rates.png").write_text("0.5 0.25\n")
    before = _digest(here)
    _fails_in_one_line(
        ["audit", "--file", "rates.png", "--plot", "rates.png"], capsys, "is an input of this run"
    )
    _fails_in_one_line(
        ["audit", "--file", "rates.png", "--plot", "rates.png", "--force"], capsys, "is an input of this run"
    )
    os.symlink("rates.png", here / "alias.png")  # the same file through a link
    _fails_in_one_line(["audit", "--file", "alias.png", "--plot", "rates.png"], capsys, "is an input")
    assert _digest(here) == before


def test_plot_refuses_a_foreign_file_and_replaces_links_not_targets(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "notes.svg").write_text("my notes\n")
    before = _digest(here)
    _fails_in_one_line(["audit", "0.5", "--plot", "notes.svg"], capsys, "not a previous svg output")
    os.symlink("trainer.py", here / "fig.png")
    _fails_in_one_line(["audit", "0.5", "--plot", "fig.png"], capsys, "is a symbolic link")
    assert _digest(here) == before
    assert main(["audit", "0.5", "--plot", "fig.png", "--force"]) == 0
    assert not (here / "fig.png").is_symlink() and _digest(here)["trainer.py"] == before["trainer.py"]
    assert main(["audit", "0.5", "--plot", "fig.png"]) == 0  # a previous figure is replaced
    capsys.readouterr()


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ("missing/fig.png", "does not exist"),
        ("/proc/fig.png", "cannot create a file"),
        (".", "use a .png or .svg"),
        ("dir.png", "is a directory"),
    ],
)
def test_bad_plot_paths_fail_before_the_run(
    here: Path, capsys: pytest.CaptureFixture[str], target: str, match: str
) -> None:
    (here / "dir.png").mkdir()
    _fails_in_one_line(["audit", "0.5", "--plot", target], capsys, match)


@pytest.mark.parametrize(
    ("path", "match"),
    [("/dev/zero", "is a device"), ("/dev/urandom", "is a device"), ("fifo", "a FIFO with no data")],
)
def test_special_input_files_end_in_one_line(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, path: str, match: str
) -> None:
    os.mkfifo(here / "fifo")
    monkeypatch.setattr(_files, "PIPE_WAIT", 0.2)
    _fails_in_one_line(["audit", "--file", path], capsys, match)
    _fails_in_one_line(["audit", "--rollouts", path, "--format", "csv"], capsys, match)


def test_inputs_are_bounded(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (here / "big.txt").write_bytes(b"0.5\n" * 100)
    with pytest.raises(ValueError, match="more than the 64 read"):
        _files.read_input("big.txt", option="--file", limit=64)
    r, w = os.pipe()
    os.write(w, b"0.5\n" * 100)
    os.close(w)
    try:
        with pytest.raises(ValueError, match="more than 64 bytes"):
            _files.read_input(f"/dev/fd/{r}", option="--file", limit=64)
    finally:
        os.close(r)


def test_a_pipe_is_read_as_a_log(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r, w = os.pipe()
    os.write(w, (here / "log.csv").read_bytes())
    os.close(w)
    try:
        assert stat.S_ISFIFO(os.stat(f"/dev/fd/{r}").st_mode)
        assert main(["audit", "--rollouts", f"/dev/fd/{r}", "--format", "csv", "--json"]) == 0
    finally:
        os.close(r)
    assert '"prompts": 2' in capsys.readouterr().out.replace(" ", "").replace('"prompts":2', '"prompts": 2')


def test_errors_quote_no_foreign_lines(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "root:x:0:0:root:/root:/bin/bash-and-a-long-tail"
    (here / "passwd").write_text(secret + "\n")
    for argv in (["audit", "--file", "passwd"], ["audit", "--rollouts", "passwd", "--format", "csv"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert secret not in err and "bin/bash" not in err, err
        assert len(max(err.splitlines(), key=len)) < 200


def test_a_closed_pipe_ends_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Closed:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            raise ValueError("no descriptor")

    monkeypatch.setattr("sys.stdout", Closed())
    assert main(["audit", "0.5", "0.1", "--all"]) == 141
    assert capsys.readouterr().err == ""


def test_a_full_disk_on_stdout_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Full:
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            pass

        def fileno(self) -> int:
            raise ValueError("no descriptor")

    monkeypatch.setattr("sys.stdout", Full())
    assert main(["audit", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err == "sigma-ref audit: cannot write the output (No space left on device)\n"


def test_check_refuses_a_report_path_before_the_run(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _digest(here)
    impl = "tests.gallery.correct:trl_contiguous"
    _fails_in_one_line(["check", impl, "--report", "trainer.py"], capsys, "not a previous report output")
    _fails_in_one_line(["check", impl, "--report", "missing/r.json"], capsys, "does not exist")
    _fails_in_one_line(["check", impl, "--report", "/dev/full"], capsys, "not a regular file")
    assert _digest(here) == before


def test_check_keeps_hypothesis_data_out_of_the_working_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    from sigma_ref.conformance.cli import hypothesis_cache

    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/me")
    assert hypothesis_cache() == "/var/cache/me/sigma-ref/hypothesis"
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", "/elsewhere")
    assert hypothesis_cache() == "/elsewhere"
    assert hypothesis_cache("rel") == os.path.abspath("rel")


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--correct-threshold", "nan"], "must be a finite number"),
        (["--correct-threshold", "inf"], "must be a finite number"),
        (["--csv"], "--csv is for pass rates"),
        (["--all"], "--all is for pass rates"),
    ],
)
def test_rollout_options_that_would_be_ignored_or_absurd_are_refused(
    here: Path, capsys: pytest.CaptureFixture[str], extra: list[str], match: str
) -> None:
    _fails_in_one_line(["audit", "--rollouts", "log.csv", *extra], capsys, match)


def test_a_parquet_bomb_is_refused_before_it_decodes(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A few kB of Parquet whose prompt column decodes to 40 MB: refused at the cap (16 MB here),
    one batch past it at most."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sigma_ref import rollouts

    rows = 400
    long = "p" * 100_000
    table = pa.table(
        {"prompt": [long + str(i % 2) for i in range(rows)], "reward": [i % 2 for i in range(rows)]}
    )
    pq.write_table(table, here / "bomb.parquet", compression="zstd")
    assert (here / "bomb.parquet").stat().st_size < 1 << 16
    monkeypatch.setattr(rollouts, "MAX_TABLE_BYTES", 1 << 24)
    monkeypatch.setattr(rollouts, "_BATCH_BYTES", 1 << 22)
    with pytest.raises(ValueError, match="decode to more than 16,777,216 bytes"):
        rollouts.read_rollouts(str(here / "bomb.parquet"))


def test_check_never_overwrites_the_code_under_test(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _digest(here)
    _fails_in_one_line(
        ["check", "trainer:adv", "--report", "trainer.py", "--force"], capsys, "is an input of this run"
    )
    assert _digest(here) == before


def test_a_hang_at_exit_is_not_blamed_between_two_properties() -> None:
    from sigma_ref.conformance.cli import abnormal_summary

    events = [
        {"event": "context"},
        {"event": "started", "nodeid": "spec/x.py::test_a"},
        {"event": "finished", "nodeid": "spec/x.py::test_a", "outcome": "pass"},
        {"event": "end", "threads": []},
    ]
    text = abnormal_summary(events, "no end within 300 s (killed)")
    assert "between two properties" not in text
    assert "after every property had finished (while the process was exiting)" in text
