"""The conformance vectors (``sigma-ref vectors``) and their numpy-only reader.

The vectors are checked in (``vectors/``) and must equal what the oracle generates now; the
reader must pass the oracle and every correct gallery implementation whose layout and convention
the vectors cover, and fail every wrong one whose defect they cover.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sigma_ref import vectors
from sigma_ref import vectors_reader as vr
from sigma_ref.advantages import dapo_keep_mask, grpo_advantage, rloo_advantage
from sigma_ref.cli import main as cli
from tests.gallery import correct, wrong

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "vectors"


@functools.cache
def _cases(family: str | None = None, **filters: Any) -> list[dict[str, Any]]:
    return vr.load(VECTORS, family=family, **filters)


def test_checked_in_vectors_equal_what_the_oracle_generates() -> None:
    """CI regenerates the vectors: a change in the oracle, a tolerance or a case must be committed."""
    assert vectors.check(VECTORS) == [], "run: sigma-ref vectors --out vectors"


def test_cli_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["vectors", "--out", str(tmp_path / "v")]) == 0
    assert "cases to" in capsys.readouterr().out
    assert cli(["vectors", "--check", str(tmp_path / "v")]) == 0
    line = (tmp_path / "v" / "keep_mask.jsonl").read_text().splitlines()[0]
    (tmp_path / "v" / "keep_mask.jsonl").write_text(line + "\n")
    assert cli(["vectors", "--check", str(tmp_path / "v")]) == 1
    assert "keep_mask.jsonl" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert cli(["vectors", "--out", str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err


def test_every_family_and_convention_is_covered() -> None:
    from sigma_ref.conventions import AGGREGATION_MODES, PRESETS

    cases = _cases()
    assert {c["family"] for c in cases} == set(vectors.FAMILIES)
    conventions = {c.get("convention") for c in cases if c["family"] == "advantages"}
    assert conventions == {*PRESETS, "rloo"}
    assert {c["call"]["mode"] for c in cases if c["family"] == "aggregation"} == set(AGGREGATION_MODES)
    names = {c["id"] for c in cases}
    for edge in (
        "silent",
        "all-silent",
        "non-dyadic-silent",
        "partial-trailing-group",
        "nan-reward",
        "ragged",
    ):
        assert any(edge in n for n in names), edge


def test_reader_refuses_a_newer_schema_and_a_changed_file(tmp_path: Path) -> None:
    vectors.generate(tmp_path)
    manifest = (tmp_path / "manifest.json").read_text()
    (tmp_path / "manifest.json").write_text(manifest.replace('"schema_version": 1', '"schema_version": 99'))
    with pytest.raises(ValueError, match="newer than this reader"):
        vr.load(tmp_path)
    (tmp_path / "manifest.json").write_text(manifest)
    with (tmp_path / "keep_mask.jsonl").open("a") as f:
        f.write("\n")
    with pytest.raises(ValueError, match="sha256"):
        vr.load(tmp_path, family="keep_mask")
    with pytest.raises(ValueError, match="family='nope'"):
        vr.load(tmp_path, family="nope")
    with pytest.raises(FileNotFoundError, match=r"manifest\.json"):
        vr.load(tmp_path / "missing")


def _oracle(case: dict[str, Any]) -> Any:
    """The oracle called the way the case calls an implementation."""
    family, call = case["family"], case["call"]
    if family == "advantages":
        conv = case["convention"]

        def adv(rewards: np.ndarray, index: np.ndarray) -> np.ndarray:
            if conv == "rloo":
                return np.asarray(rloo_advantage(rewards, index=index))
            return np.asarray(grpo_advantage(rewards, convention=conv, index=index))

        if call["layout"] == "contiguous":
            return lambda r, g: adv(r, np.arange(r.size) // g)
        if call["layout"] == "grouped":
            return lambda r: adv(r.reshape(-1), np.repeat(np.arange(r.shape[0]), r.shape[1]))
        return adv
    if family == "keep_mask":
        return lambda r, i: np.asarray(dapo_keep_mask(r, index=i))
    if family == "aggregation":
        from sigma_ref.objectives import aggregation_weights

        kw = {k: v for k, v in call.items() if k == "constant"}
        return lambda loss, mask: float(
            np.sum(aggregation_weights(torch.tensor(mask), call["mode"], **kw).numpy() * loss * mask)
        )
    if family == "objectives":
        from sigma_ref.objectives import Objective, loss_gradient

        obj = Objective(**{k: vr._decode(v) for k, v in call["objective"].items()})
        return lambda logp, old, adv, mask, **extras: loss_gradient(
            obj, torch.tensor(logp), torch.tensor(old), torch.tensor(adv), torch.tensor(mask), **extras
        ).numpy()
    import sigma_ref.difficulty as d

    fn = getattr(d, call["function"])
    second = call["args"][1]  # G (positional or named) or epsilon (keyword-only)
    return (
        (lambda p, G: fn(p)) if call["function"] == "difficulty_weight" else lambda p, b: fn(p, **{second: b})
    )


def test_the_oracle_passes_every_case_at_float64() -> None:
    results = [vr.run_case(_oracle(c), c, precision="float64") for c in _cases()]
    bad = [r for r in results if r.verdict != "pass"]
    assert not bad, bad[:3]
    assert len(results) > 200


# what the correct gallery's functions are called with, per layout
_LAYOUTS = {"contiguous", "grouped", "index"}


@pytest.mark.parametrize(
    "name, fn, layout, preset", [c[:4] for c in correct.CORRECT], ids=[c[0] for c in correct.CORRECT]
)
def test_correct_gallery_passes(name: str, fn: Any, layout: str, preset: str) -> None:
    """Trainer-style code (float32 or float64, views, dicts of ids) passes its convention's cases."""
    cases = _cases("advantages", convention=preset, layout=layout)
    assert cases, f"no {preset} case in layout {layout}"
    results = [vr.run_case(fn, c, convert="torch") for c in cases]
    assert [r for r in results if r.verdict != "pass"] == []


_VALUE_DEFECTS = {
    "advantage_values",
    "group_centering",
    "silent_group_zero",
    "singleton_groups",
    "interleaved_groups",
}


@pytest.mark.parametrize("case", [w for w in wrong.WRONG if w.breaks in _VALUE_DEFECTS], ids=lambda w: w.name)
def test_wrong_gallery_fails(case: Any) -> None:
    """Every wrong implementation whose defect is in the values fails some case of its convention."""
    cases = _cases("advantages", convention=case.intended, layout=case.layout)
    results = [vr.run_case(case.fn, c, convert="torch") for c in cases]
    failed = [r for r in results if r.verdict == "FAIL"]
    assert failed, f"{case.name} passed every {case.intended} {case.layout} case"
    assert "Mismatched elements" in failed[0].message or "raised" in failed[0].message


def _trainer_cases() -> list[Any]:
    from tests.gallery import trainers_correct, trainers_wrong

    every = [*trainers_correct.CASES, *trainers_wrong.CASES]
    return [c for c in every if c.layout in _LAYOUTS and c.shape == "advantages" and c.convention]


@pytest.mark.parametrize("case", _trainer_cases(), ids=lambda c: c.name)
def test_trainer_gallery(case: Any) -> None:
    """The trainer-style gallery judged at the precision each entry declares: the correct entries
    pass, and each wrong one either fails a case or is listed by the vectors as out of their reach
    (a defect in the contract, in half precision, or in a loss: no advantage value shows it)."""
    precision = "float32" if case.precision == "float32" else "float64"
    cases = _cases("advantages", convention=case.convention, layout=case.layout)
    results = [vr.run_case(case.fn, c, precision=precision, convert="torch") for c in cases]
    failed = [r for r in results if r.verdict == "FAIL"]
    if case.correct:
        assert failed == []
    elif set(case.breaks) & _VALUE_DEFECTS:
        assert failed, f"{case.name} passed every {case.convention} {case.layout} case"


def test_keep_masks() -> None:
    cases = _cases("keep_mask")

    def by_id(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:  # written as verl's filter is
        keep = torch.zeros(rewards.shape[0], dtype=torch.bool)
        for uid in set(index.tolist()):
            rows = torch.tensor(index == uid)
            keep[rows] = bool(rewards[rows].std(unbiased=False) > 0)
        return keep

    def only_k_positive(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
        keep = by_id(rewards, index)
        for uid in set(index.tolist()):
            rows = torch.tensor(index == uid)
            keep[rows] |= bool(rewards[rows].sum() == rows.sum())  # keeps all-right groups too
        return keep

    assert all(vr.run_case(by_id, c, convert="torch").verdict == "pass" for c in cases)
    assert any(vr.run_case(only_k_positive, c, convert="torch").verdict == "FAIL" for c in cases)


def test_losses() -> None:
    """The gallery's token-mean loss (clip 0.8..1.28) passes its case and the wrong losses fail it;
    the unclipped seq-mean-token-mean loss passes the inside-the-clip cases of its mode."""
    asym = _cases("objectives")
    pick = {c["id"]: c for c in asym}
    ok = vr.run_case(correct.token_mean_loss, pick["objectives/ppo-asymmetric"], convert="torch")
    assert ok.verdict == "pass", ok.message
    inside = pick["objectives/pg-seq-mean-token-mean-inside"]
    assert vr.run_case(correct.seq_mean_token_mean_loss, inside, convert="torch").verdict == "pass"
    assert vr.run_case(correct.token_mean_loss, inside, convert="torch").verdict == "FAIL"
    for bad in (wrong.loss_wrong_sign, wrong.loss_unmasked, wrong.loss_detached_ratio):
        result = vr.run_case(bad, pick["objectives/ppo-asymmetric"], convert="torch")
        assert result.verdict == "FAIL", bad.__name__


def test_verl_agg_loss_passes_the_aggregation_cases() -> None:
    """verl's own agg_loss (a peer: skipped when verl is not installed) against every mode."""
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    for case in _cases("aggregation"):
        call = case["call"]
        kw = {"loss_scale_factor": call["constant"]} if "constant" in call else {}

        def agg(loss: torch.Tensor, mask: torch.Tensor, mode: str = call["mode"], kw: Any = kw) -> Any:
            return core_algos.agg_loss(loss, mask, mode, **kw)

        result = vr.run_case(agg, case, convert="torch")
        assert result.verdict == "pass", (case["id"], result.message)


def test_nan_reward_that_spreads_is_a_warn_not_a_fail() -> None:
    (case,) = [c for c in _cases("advantages", convention="paper") if c["id"].endswith("nan-reward")]

    def spreads(rewards: np.ndarray, group_size: int) -> np.ndarray:
        r = rewards.reshape(-1, group_size)
        out = (r - r.mean(1, keepdims=True)) / r.std(1, keepdims=True)
        return np.where(np.isnan(out).any(), np.nan, out).reshape(-1)

    def refuses(rewards: np.ndarray, group_size: int) -> np.ndarray:
        raise ValueError("NaN reward")

    assert vr.run_case(spreads, case).verdict == "WARN"
    assert vr.run_case(refuses, case).verdict == "pass"


_NUMPY_ONLY = """
import importlib.util, sys
sys.modules["torch"] = None      # importing either now raises
sys.modules["sigma_ref"] = None
spec = importlib.util.spec_from_file_location("vectors_reader", sys.argv[1])
vr = importlib.util.module_from_spec(spec); sys.modules["vectors_reader"] = vr; spec.loader.exec_module(vr)
import numpy as np

def paper(rewards, group_size):  # a numpy GRPO, population std, 0 on silent groups
    r = rewards.reshape(-1, group_size)
    silent = (r == r[:, :1]).all(1, keepdims=True)  # exact: a float std of [0.1] * 3 is not 0
    c = r - r.mean(1, keepdims=True)
    s = np.where(silent, 1.0, r.std(1, keepdims=True))
    return np.where(silent, 0.0, c / s).reshape(-1)

sys.modules["__main__"].paper = paper
sys.exit(vr.main([sys.argv[2], "--impl", "__main__:paper", "--family", "advantages",
                  "--convention", "paper", "--layout", "contiguous", "--precision", "float64"]))
"""


def test_reader_runs_with_numpy_alone() -> None:
    """The reader is one file that needs numpy only: run from its path with torch and sigma_ref
    unimportable, through its command line, on a numpy implementation."""
    path = importlib.util.find_spec("sigma_ref.vectors_reader").origin  # type: ignore[union-attr]
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_NUMPY_ONLY), str(path), str(VECTORS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed, 0 failed" in done.stdout


def test_mismatch_report_names_count_worst_index_and_tolerance() -> None:
    msg = vr.mismatch(
        np.array([[1.0, 2.0], [3.0, 4.5]]), np.array([[1.0, 2.0], [3.0, 4.0]]), np.full((2, 2), 0.1), "grad"
    )
    assert msg is not None
    assert "Mismatched elements: 1 / 4 (25.0%)" in msg and "index (1, 1)" in msg and "0.1 allowed" in msg
