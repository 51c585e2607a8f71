"""``corpus_audit`` and the ``sigma-ref audit`` command (issue 2, item 6)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

from sigma_ref import AuditResult, corpus_audit, fidelity
from sigma_ref.audit import format_rate
from sigma_ref.cli import main

POST_RATES = [0.5, 0.3, 0.15, 0.08, 0.03]


def _status(waste: float) -> str:
    return "ok" if waste < 0.1 else "warn" if waste < 0.3 else "critical"


def _least_G(p: float, eps: float) -> int:
    """Least ``G`` with fidelity >= 1 - eps, by a linear scan (slow, obviously right)."""
    return next(G for G in range(2, 10_000) if fidelity(p, G) >= 1 - eps)


def test_post_example_rows_and_totals() -> None:
    """The post's corpus at ``G = 8``: every column from the formulas, computed here."""
    result = corpus_audit(POST_RATES, G=8)
    assert isinstance(result, AuditResult) and result.G == 8 and result.epsilon == 0.05
    assert [r.p for r in result.rows] == POST_RATES
    wastes = []
    for row, p in zip(result.rows, POST_RATES, strict=True):
        fp = Fraction(p)
        waste = float(fp**8 + (1 - fp) ** 8)
        wastes.append(waste)
        assert row.silent_rate == pytest.approx(waste, rel=1e-15)
        assert row.closed_form_group_size == math.ceil(1 / (8 * Fraction("0.05") * fp * (1 - fp)))
        assert row.exact_group_size == _least_G(p, 0.05)
        assert row.status == _status(waste)
    assert [r.closed_form_group_size for r in result.rows] == [10, 12, 20, 34, 86]
    assert [r.status for r in result.rows] == ["ok", "ok", "warn", "critical", "critical"]
    average = sum(wastes) / len(wastes)
    assert result.average_waste == pytest.approx(average, rel=1e-14)
    assert result.effective_budget == pytest.approx(1 - average, rel=1e-14)
    # the post printed 32.9% and 7.6% for p = 0.3; its own formula gives these
    assert f"{result.average_waste:.1%}" == "32.7%"
    assert f"{result.rows[1].silent_rate:.1%}" == "5.8%"


def test_str_is_a_table_with_every_row() -> None:
    """``str()`` has a header, one line per prompt with its numbers, and the totals."""
    result = corpus_audit(POST_RATES, G=8)
    text = str(result)
    lines = text.splitlines()
    assert "G=8" in lines[0]
    assert "G (exact)" in text and "G (closed form)" in text
    for row in result.rows:
        cells = [
            format_rate(row.p),
            f"{row.silent_rate:.1%}",
            str(row.closed_form_group_size),
            str(row.exact_group_size),
            row.status,
        ]
        assert any(line.split() == cells for line in lines), (cells, text)
    assert f"{result.average_waste:.1%}" in text and f"{result.effective_budget:.1%}" in text


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_edge_rates_say_never(p: float) -> None:
    """``p = 0`` or ``1``: every group is silent, no ``G`` helps ("never")."""
    result = corpus_audit([p, 0.5], G=4)
    row = result.rows[0]
    assert row.silent_rate == 1.0 and row.status == "critical"
    assert row.closed_form_group_size is None and row.exact_group_size is None
    line = next(line for line in str(result).splitlines() if line.split()[:1] == [format_rate(p)])
    assert line.split()[2:4] == ["never", "never"]


def test_json_round_trip() -> None:
    """``to_json`` is valid JSON equal to ``to_dict``, and rebuilds the same result."""
    result = corpus_audit([0.0, 0.2, 0.7], G=16, epsilon=0.1)
    data = json.loads(result.to_json())
    assert data == result.to_dict()
    assert data["G"] == 16 and data["epsilon"] == 0.1 and len(data["rows"]) == 3
    rebuilt = AuditResult(
        data["G"],
        data["epsilon"],
        tuple(type(result.rows[0])(**row) for row in data["rows"]),
        data["average_waste"],
        data["effective_budget"],
    )
    assert rebuilt == result


def test_epsilon_and_G_change_the_audit() -> None:
    """A larger ``G`` wastes less; a smaller epsilon needs larger groups."""
    small, large = corpus_audit(POST_RATES, G=8), corpus_audit(POST_RATES, G=32)
    assert large.average_waste < small.average_waste
    strict = corpus_audit(POST_RATES, G=8, epsilon=0.01)
    for a, b in zip(strict.rows, small.rows, strict=True):
        assert a.exact_group_size > b.exact_group_size
        assert a.exact_group_size == _least_G(a.p, 0.01)


# ---------------------------------------------------------------------------
# the CLI


def test_cli_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """``sigma-ref audit 0.5 0.3 0.15 0.08 0.03 --G 8`` prints ``str(corpus_audit(...))``."""
    assert main(["audit", "0.5", "0.3", "0.15", "0.08", "0.03", "--G", "8"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == str(corpus_audit(POST_RATES, G=8)).strip()


def test_cli_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--file`` reads rates separated by spaces, commas or new lines, after the arguments."""
    path = tmp_path / "rates.txt"
    path.write_text("0.15, 0.08\n0.03\n")
    assert main(["audit", "0.5", "0.3", "--file", str(path), "--epsilon", "0.1"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == str(corpus_audit(POST_RATES, G=8, epsilon=0.1)).strip()


def test_cli_file_bad_token(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A token that is not a number: exit 2 and a message naming it with file and line."""
    path = tmp_path / "rates.txt"
    path.write_text("0.5 zero.3\n")
    assert main(["audit", "--file", str(path)]) == 2
    assert f"{path}:1: 'zero.3' (not a number)" in capsys.readouterr().err


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    """``--json`` prints the JSON document of the audit."""
    assert main(["audit", "0.5", "0", "--G", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == corpus_audit([0.5, 0.0], G=4).to_dict()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        pytest.param(["audit", "0.5", "1.5"], "pass_rates=1.5 is outside [0, 1]", id="p=1.5"),
        pytest.param(["audit", "0.5", "--G", "1"], "G=1 is too small", id="G=1"),
        pytest.param(["audit", "0.5", "--epsilon", "2"], "epsilon=2.0 is outside (0, 1)", id="epsilon=2"),
    ],
)
def test_cli_errors_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad input: exit code 2 and the oracle's message on stderr, nothing on stdout."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert needle in captured.err and captured.err.startswith("sigma-ref audit: ")
    assert captured.out == ""


def test_cli_without_rates_stops(capsys: pytest.CaptureFixture[str]) -> None:
    """No pass rates at all: exit 2 and a message saying how to give them."""
    assert main(["audit"]) == 2
    assert "give pass rates" in capsys.readouterr().err
