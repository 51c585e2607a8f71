"""``sigma-ref audit --file``: the file format, its errors, large inputs, start-up (issues 12, 13)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sigma_ref import corpus_audit
from sigma_ref._audit_files import MAX_BAD_LINES, parse_pass_rates
from sigma_ref.audit import audit_columns
from sigma_ref.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_comments_bom_and_separators(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A UTF-8 BOM is skipped, ``#`` comments and blank lines ignored; spaces, commas, lines separate."""
    path = tmp_path / "rates.txt"
    path.write_bytes("\ufeff# pass rates of run 7\n0.5 0.3,0.15\n\n0.08 # hard\n0.03\n".encode())
    code, out, _ = _run(["audit", "--file", str(path)], capsys)
    assert code == 0 and out.strip() == str(corpus_audit([0.5, 0.3, 0.15, 0.08, 0.03])).strip()


def test_comma_separates_two_rates() -> None:
    """``0,1`` is two rates, 0 and 1 (commas separate; a decimal comma is not read), as documented."""
    assert parse_pass_rates(b"0,1").tolist() == [0.0, 1.0]


def test_every_bad_line_listed_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Non-numbers and out-of-range rates: one exit status (2), each listed as file:line."""
    path = tmp_path / "rates.txt"
    path.write_text("0.5\nabc\n1.5 0.2\n-0.1\n# 7 ignored\nnan\n")
    code, out, err = _run(["audit", "--file", str(path)], capsys)
    assert code == 2 and out == ""
    assert "4 bad pass rates" in err
    for line, token, why in [
        (2, "abc", "not a number"),
        (3, "1.5", "outside [0, 1]"),
        (4, "-0.1", "outside [0, 1]"),
        (6, "nan", "outside [0, 1]"),
    ]:
        assert f"{path}:{line}: {token!r} ({why}" in err


def test_bad_lines_are_capped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rates.txt"
    path.write_text("2\n" * (MAX_BAD_LINES + 5))
    code, _, err = _run(["audit", "--file", str(path)], capsys)
    assert code == 2 and err.count("(outside [0, 1]") == MAX_BAD_LINES and "... and 5 more" in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["audit", "--file", "MISSING"], "no such file"),
        (["audit", "--file", "DIR"], "is a directory"),
        (["audit", "--file", "EMPTY"], "holds no pass rates"),
        (["audit", "--file", "-"], "standard input is closed"),
        (["audit", "0.5", "--G", "8", "16"], "--G takes one value for pass rates"),
        (["audit", "0.5", "--top", "0"], "--top 0: show at least one row"),
    ],
)
def test_file_errors_exit_2(
    argv, needle, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "DIR").mkdir()
    (tmp_path / "EMPTY").write_text("# nothing\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", None)
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == "" and needle in err and err.startswith("sigma-ref audit: ")


def test_closed_stdin_in_a_shell() -> None:
    """``sigma-ref audit --file - <&-``: a message, not a traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "sigma_ref.cli", "audit", "--file", "-"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr and "holds no pass rates" in done.stderr


def test_enough_digits_and_extreme_rates(capsys: pytest.CaptureFixture[str]) -> None:
    """0.999999 prints as itself; a rate needing G beyond 2**40 is reported, not an abort; 0 is never."""
    code, out, _ = _run(["audit", "0.999999", "1e-30", "0", "--G", "8"], capsys)
    assert code == 0
    rows = {line.split()[0]: line.split(maxsplit=2)[2] for line in out.splitlines()[3:6]}
    assert rows["0.999999"].split()[:2] == ["2500003", "3344665"]
    assert rows["1e-30"].split()[:4] == [">", "2**62", ">", "2**40"]
    assert rows["0.0"].split()[:2] == ["never", "never"]
    assert corpus_audit([1e-30]).rows[0].exact_group_size is None


def test_large_input_summary_and_top(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Above ``--top`` rows: a summary and the worst rows with 0 < p < 1, by position in the input."""
    rates = np.r_[np.linspace(0.01, 0.99, 50), 0.0, 1.0]
    path = tmp_path / "rates.txt"
    path.write_text("\n".join(map(repr, rates.tolist())))
    code, out, _ = _run(["audit", "--file", str(path), "--top", "3"], capsys)
    assert code == 0
    assert "52 prompts (2 always or never correct)" in out and "Status: ok" in out
    tail = out.splitlines()[-3:]
    assert [line.split()[0] for line in tail] == ["1", "50", "2"]  # p = 0.01, 0.99, 0.03
    waste = np.mean(audit_columns(rates).silent_rate)
    assert f"Average wasted compute (silent groups): {waste:.1%}" in out


@pytest.mark.parametrize("flag", ["--json", "--csv", "--all"])
def test_streamed_outputs_equal_the_audit(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--json``, ``--csv`` and ``--all`` write every row (in chunks) with the audit's values."""
    import sigma_ref._audit_output as audit_output

    monkeypatch.setattr(audit_output, "CHUNK_ROWS", 7)  # several chunks
    rates = [0.5, 0.0, 1e-5, 0.999999, 0.3, 1.0, 1e-30] * 3
    path = tmp_path / "rates.txt"
    path.write_text(" ".join(map(repr, rates)))
    code, out, _ = _run(["audit", "--file", str(path), "--G", "4", flag], capsys)
    assert code == 0
    want = corpus_audit(rates, G=4)
    if flag == "--json":
        assert json.loads(out) == want.to_dict()
    elif flag == "--csv":
        lines = out.splitlines()
        assert lines[0] == "p,silent_rate,closed_form_group_size,exact_group_size,status"
        for line, row in zip(lines[1:], want.rows, strict=True):
            p, s, c, e, status = line.split(",")
            assert (float(p), float(s), status) == (row.p, row.silent_rate, row.status)
            assert (int(c) if c else None, int(e) if e else None) == (
                row.closed_form_group_size,
                row.exact_group_size,
            )
    else:
        body = out.splitlines()[-len(rates) :]
        assert [line.split()[-1] for line in body] == [r.status for r in want.rows]
        assert body[3].split()[0] == "0.999999" and body[6].split()[2:6] == [">", "2**62", ">", "2**40"]


_STARTUP = """
import sys
from sigma_ref.cli import main
assert main(["audit", "0.5", "0.3", "--G", "8"]) == 0
print(sorted(m for m in ("torch", "sympy", "pyarrow", "matplotlib") if m in sys.modules))
"""


def test_audit_path_imports_no_torch_or_sympy() -> None:
    """``sigma-ref audit 0.5 0.3 --G 8`` runs without importing torch, sympy, pyarrow or matplotlib."""
    done = subprocess.run([sys.executable, "-c", _STARTUP], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_cli_module_imports_lazily() -> None:
    """``sigma_ref.cli``, ``sigma_ref.audit`` and ``sigma_ref.rollouts`` import no torch/sympy themselves."""
    for name in (
        "cli",
        "audit",
        "_audit_files",
        "_audit_output",
        "_rollout_audit",
        "_text_table",
        "rollouts",
        "reproduce",
        "plots",
    ):
        source = (ROOT / "sigma_ref" / f"{name}.py").read_text()
        top = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
        assert not [line for line in top if "torch" in line or "sympy" in line or "conformance" in line], name


def test_chunked_parse_equals_whole(monkeypatch) -> None:
    """Parsing in chunks cut at separators gives the same rates as one piece, and finds bad tokens."""
    import sigma_ref._audit_files as audit_files

    rng = np.random.default_rng(5)
    rates = rng.random(2000)
    data = (
        "# head\n"
        + ", ".join(map(repr, rates[:1000].tolist()))
        + "\n"
        + "\n".join(map(repr, rates[1000:].tolist()))
    ).encode()
    monkeypatch.setattr(audit_files, "_CHUNK_BYTES", 97)
    assert np.array_equal(parse_pass_rates(data), rates)
    with pytest.raises(ValueError, match=r"<input>:1003: 'x' \(not a number\)"):
        parse_pass_rates(data + b"\nx\n")
    with pytest.raises(ValueError, match=r"<input>:2: '\ufffd1' \(not a number\)"):
        parse_pass_rates(b"0.5\n\xff1\n")


def test_json_and_csv_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["audit", "0.5", "--json", "--csv"])
    assert stop.value.code == 2 and "not allowed with argument --json" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["json", "csv"])
def test_rows_written_to_text_and_byte_streams_agree(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``write_rows`` writes each chunk's bytes to the stream's byte buffer when it has one, and
    decoded text otherwise (``io.StringIO``): the same text, chunk separators included."""
    import io

    import sigma_ref._audit_output as audit_output

    monkeypatch.setattr(audit_output, "CHUNK_ROWS", 3)
    cols = audit_columns([0.5, 0.0, 1e-5, 0.999999, 0.3, 1.0, 1e-30, 0.25], G=4)
    text = io.StringIO()
    audit_output.write_rows(cols, text, kind)
    raw = io.BytesIO()
    wrapper = io.TextIOWrapper(raw, encoding="utf-8")
    audit_output.write_rows(cols, wrapper, kind)
    wrapper.flush()
    assert raw.getvalue().decode() == text.getvalue()
    lines = text.getvalue().splitlines()
    assert len(lines) == 8
    if kind == "csv":
        assert lines[1].startswith("0,")
    else:
        assert lines[1].endswith("},")
        assert json.loads("[" + text.getvalue() + "]")[3]["p"] == 0.999999


def test_a_tiny_epsilon_is_shown_and_searched_up_to_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 27 item 13: at epsilon 1e-12 the header says 0.999999999999 (not 1), and a least G just
    under 2**40 (p = 0.3: 595,238,095,240) is searched, not printed as '> 2**40'."""
    assert main(["audit", "--epsilon", "1e-12", "--", "0.3", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "1 - epsilon = 0.999999999999" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("0.3"))
    assert "595238095240" in row and "> 2**40" not in row
    assert "> 2**40" in next(line for line in out.splitlines() if line.strip().startswith("0.001"))
