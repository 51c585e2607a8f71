"""Run a GRPO implementation against sigma-ref's conformance vectors. Needs only numpy.

One file, to vendor into a trainer's repository (copy it; it imports nothing from sigma-ref).
The vectors are written by ``sigma-ref vectors --out DIR`` (schema: docs/vectors.md); each case
holds the inputs, the float64 expected values, the tolerance rule and the spec section.

Without pytest::

    python vectors_reader.py vectors --impl my_pkg.grpo:advantages --family advantages \\
        --convention trl --layout contiguous

With pytest::

    import pytest
    import vectors_reader as vr

    CASES = vr.load("vectors", family="advantages", convention="trl", layout="contiguous")

    @pytest.mark.parametrize("case", CASES, ids=vr.case_id)
    def test_advantages(case):
        vr.assert_case(my_advantages, case)

What each family calls (the implementation's contract):

* ``advantages``: ``fn(rewards, group_size)`` (layout ``contiguous``), ``fn(rewards[B, G])``
  (``grouped``), ``fn(rewards, index)`` (``index``); returns the advantages, one per reward.
* ``keep_mask``: ``fn(rewards, index)``, a boolean keep flag per reward.
* ``aggregation``: ``fn(loss_mat, mask)``, the aggregated scalar loss (the case's ``call.mode``,
  with ``call.constant`` where the mode takes one).
* ``objectives``: ``fn(logp, old_logp, advantages, mask, **extras)`` (``extras``:
  ``ref_logp``/``rollout_logp`` where the case lists them) returning ``dL/dlogp [N, T]``; with
  ``convert="torch"`` it may return the scalar loss instead, and the reader differentiates it.
* ``closed_forms``: ``fn(p, G)`` or ``fn(p, epsilon)``.

Inputs are float64 numpy arrays, or torch tensors with ``convert="torch"`` (torch is then
imported). Outcomes: ``pass``; ``FAIL`` (values out of tolerance, a raise where a value is
required); ``WARN`` (a case marked ``verdict_if_wrong: WARN``, e.g. a NaN reward spreading to
other groups). A case whose ``accept`` lists ``error`` passes when the implementation refuses it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SCHEMA_VERSION", "Result", "load", "case_id", "run_case", "assert_case", "main"]

#: The newest schema this reader understands.
SCHEMA_VERSION = 1
#: Unit roundoff of each working precision.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24}
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _decode(x: Any) -> Any:
    if isinstance(x, str):
        return _SPECIAL.get(x, x)
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if isinstance(x, dict):
        return {k: _decode(v) for k, v in x.items()}
    return x


def _array(x: Any, root: Path) -> Any:
    """Lists of numbers become float64 arrays (integer ids stay integers); ``{"npy": path}`` is read
    from the vectors directory; scalars stay scalars."""
    if isinstance(x, dict) and set(x) == {"npy"}:
        return np.load(root / x["npy"], allow_pickle=False)
    if isinstance(x, list):
        a = np.asarray(_decode(x))
        return a.astype(np.float64) if a.dtype.kind in "fc" else a
    return _decode(x)


def load(
    directory: str | Path,
    *,
    family: str | None = None,
    convention: str | None = None,
    layout: str | None = None,
    verify: bool = True,
) -> list[dict[str, Any]]:
    """The cases of ``directory`` (arrays as numpy), filtered by family, convention and layout.

    ``verify``: check the manifest's schema version and each file's sha256 first.
    """
    root = Path(directory)
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(
            f"{manifest_path} not found: pass the directory `sigma-ref vectors --out DIR` wrote"
        )
    manifest = json.loads(manifest_path.read_text())
    version = manifest.get("schema_version")
    if manifest.get("schema") != "sigma-ref-vectors" or not isinstance(version, int):
        raise ValueError(f"{manifest_path} is not a sigma-ref vectors manifest")
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"the vectors use schema version {version}, newer than this reader's {SCHEMA_VERSION}: "
            "copy the vectors_reader.py of the sigma-ref that wrote them"
        )
    families = manifest["families"]
    if family is not None and family not in families:
        raise ValueError(f"family={family!r} is not in the vectors; choose one of {sorted(families)}")
    cases = []
    for name, info in families.items():
        if family is not None and name != family:
            continue
        text = (root / info["file"]).read_text()
        if verify and hashlib.sha256(text.encode()).hexdigest() != info["sha256"]:
            raise ValueError(
                f"{info['file']} does not match its sha256 in the manifest: regenerate the vectors"
            )
        for line in text.splitlines():
            case = json.loads(line)
            if convention is not None and case.get("convention") != convention:
                continue
            if layout is not None and case["call"].get("layout") != layout:
                continue
            case["inputs"] = {k: _array(v, root) for k, v in case["inputs"].items()}
            case["expected"] = {k: _array(v, root) for k, v in case["expected"].items()}
            atol = case["tolerance"].get("atol")
            if atol is not None:
                case["tolerance"]["atol"] = {k: _array(v, root) for k, v in atol.items()}
            cases.append(case)
    return cases


def case_id(case: dict[str, Any]) -> str:
    """A case's id, for ``pytest.mark.parametrize(..., ids=case_id)``."""
    return str(case["id"])


@dataclasses.dataclass(frozen=True)
class Result:
    """One case's outcome: ``verdict`` is ``pass``, ``FAIL`` or ``WARN``; ``message`` says why."""

    case: str
    verdict: str
    message: str = ""


def _to(x: Any, convert: str | None) -> Any:
    if convert == "torch" and isinstance(x, np.ndarray) and x.dtype.kind == "f":
        import torch

        return torch.from_numpy(x.copy())
    return x.copy() if isinstance(x, np.ndarray) else x


def _back(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _call(fn: Callable[..., Any], case: dict[str, Any], convert: str | None) -> np.ndarray:
    x = {k: _to(v, convert) for k, v in case["inputs"].items()}
    family, call = case["family"], case["call"]
    if family == "advantages":
        if call["layout"] == "contiguous":
            return _back(fn(x["rewards"], x["group_size"])).reshape(-1)
        if call["layout"] == "grouped":
            return _back(fn(x["rewards"])).reshape(-1)
        return _back(fn(x["rewards"], x["index"])).reshape(-1)
    if family == "keep_mask":
        return np.asarray(_back(fn(x["rewards"], x["index"])), dtype=bool).reshape(-1)
    if family == "aggregation":
        return _back(fn(x["loss_mat"], x["mask"])).reshape(())
    if family == "objectives":
        extras = {k: x[k] for k in call["extras"]}
        if convert == "torch":
            x["logp"].requires_grad_(True)
        out = fn(x["logp"], x["old_logp"], x["advantages"], x["mask"], **extras)
        if convert == "torch" and getattr(out, "numel", lambda: 0)() == 1:
            import torch

            (out,) = torch.autograd.grad(out.reshape(()), x["logp"], allow_unused=False)
        return _back(out)
    if family == "closed_forms":
        a, b = call["args"]
        return _back(fn(x[a], x[b]))
    raise ValueError(f"unknown family {family!r} in case {case['id']}")


def _index(flat: int, shape: tuple[int, ...]) -> str:
    return str(tuple(int(i) for i in np.unravel_index(flat, shape))) if shape else "()"


def _out_of_tolerance(actual: np.ndarray, expected: np.ndarray, atol: np.ndarray) -> tuple[Any, Any]:
    """``(bad, diff)``: where ``|actual - expected| > atol`` (NaN expected: not judged; NaN actual: bad)."""
    judged = ~np.isnan(expected)
    with np.errstate(invalid="ignore"):
        diff = np.where(judged, np.abs(actual - expected), 0.0)
        diff = np.where(judged & np.isnan(actual), np.inf, diff)
        bad = judged & ~(diff <= atol)
    return bad, diff


def mismatch(actual: np.ndarray, expected: np.ndarray, atol: np.ndarray, noun: str) -> str | None:
    """None when ``|actual - expected| <= atol`` everywhere (NaN expected: not judged), else a report
    in torch.testing's words: count, greatest absolute and relative differences with their index."""
    if actual.shape != expected.shape:
        return f"{noun}: shape {actual.shape}, but should be {expected.shape}"
    bad, diff = _out_of_tolerance(actual, expected, atol)
    if not bad.any():
        return None
    n, total = int(bad.sum()), int((~np.isnan(expected)).sum())
    worst = int(np.argmax(np.where(bad, diff, -1.0)))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(bad, diff / np.abs(expected), -1.0)
    worst_rel = int(np.nanargmax(rel))
    return (
        f"{noun} are not close! Mismatched elements: {n} / {total} ({100 * n / total:.1f}%); greatest "
        f"absolute difference {diff.flat[worst]:.3g} at index {_index(worst, expected.shape)} "
        f"(actual {float(actual.flat[worst]):.17g}, expected {float(expected.flat[worst]):.17g}, up to "
        f"{atol.flat[worst]:.3g} allowed); greatest relative difference {rel.flat[worst_rel]:.3g} at "
        f"index {_index(worst_rel, expected.shape)}"
    )


def _tolerance(case: dict[str, Any], expected: np.ndarray, precision: str) -> np.ndarray:
    rule = case["tolerance"]
    if rule["rule"] == "exact":
        return np.zeros(expected.shape)
    if rule["rule"] == "relative":
        return np.asarray(float(rule["rtol"]) * np.abs(expected), dtype=np.float64)
    return np.asarray(rule["atol"][precision], dtype=np.float64).reshape(expected.shape)


def run_case(
    fn: Callable[..., Any], case: dict[str, Any], *, precision: str = "float32", convert: str | None = None
) -> Result:
    """Call ``fn`` on one case and judge it (``precision``: the working precision the code computes in,
    ``float32`` or ``float64``; ``convert``: ``"torch"`` to pass torch tensors)."""
    if precision not in UNIT_ROUNDOFF:
        raise ValueError(f"precision={precision!r} must be one of {sorted(UNIT_ROUNDOFF)}")
    accept = case.get("accept", ["values"])
    ident = case["id"]
    try:
        actual = _call(fn, case, convert)
    except Exception as exc:  # the implementation's own error: a refusal, or a failure
        if "error" in accept:
            return Result(ident, "pass", f"refused: {type(exc).__name__}: {exc}")
        return Result(ident, "FAIL", f"raised {type(exc).__name__}: {exc}")
    ((noun, expected),) = [(k, v) for k, v in case["expected"].items() if k != "weights"]
    expected = np.asarray(expected, dtype=bool if noun == "keep" else np.float64)
    if noun == "keep":
        actual = np.asarray(actual, dtype=bool)
        found = (
            None
            if np.array_equal(actual, expected)
            else (f"keep: {actual.astype(int).tolist()}, but should be {expected.astype(int).tolist()}")
        )
    else:
        found = mismatch(
            np.asarray(actual, np.float64), expected, _tolerance(case, expected, precision), noun
        )
    if found is None:
        return Result(ident, "pass")
    verdict = case.get("verdict_if_wrong", "FAIL")
    if verdict == "WARN" and noun != "keep" and actual.shape == expected.shape:
        # hygiene only while every wrong value is a NaN or infinity (a NaN that spread); a finite wrong
        # value is a wrong algorithm
        bad, _ = _out_of_tolerance(actual, expected, _tolerance(case, expected, precision))
        if np.isfinite(actual[bad]).any():
            verdict = "FAIL"
    return Result(ident, verdict, f"{found} [{case['what']}; {case['spec']}]")


def assert_case(
    fn: Callable[..., Any], case: dict[str, Any], *, precision: str = "float32", convert: str | None = None
) -> None:
    """:func:`run_case`, raising AssertionError on FAIL and a warning on WARN (for pytest)."""
    __tracebackhide__ = True
    result = run_case(fn, case, precision=precision, convert=convert)
    if result.verdict == "FAIL":
        raise AssertionError(f"{result.case}: {result.message}")
    if result.verdict == "WARN":
        warnings.warn(f"{result.case}: {result.message}", stacklevel=2)


def _load_object(target: str) -> Callable[..., Any]:
    module, sep, attr = target.partition(":")
    if not sep:
        raise ValueError(f"--impl {target!r}: write module:function, e.g. my_pkg.grpo:advantages")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> int:
    """``python vectors_reader.py DIR --impl module:fn --family F [filters]``: exit 1 on any FAIL."""
    p = argparse.ArgumentParser(prog="vectors_reader", description=__doc__.split("\n\n")[0])
    p.add_argument("directory", help="the vectors directory (manifest.json and *.jsonl)")
    p.add_argument("--impl", required=True, help="module:function to run")
    p.add_argument(
        "--family", required=True, help="advantages, keep_mask, aggregation, objectives, closed_forms"
    )
    p.add_argument("--convention", help="only the cases of this convention (advantages)")
    p.add_argument("--layout", help="only the cases of this layout: contiguous, grouped, index")
    p.add_argument("--id", dest="ids", action="append", help="only the case with this id (repeatable)")
    p.add_argument("--precision", default="float32", choices=sorted(UNIT_ROUNDOFF))
    p.add_argument("--torch", action="store_true", help="pass torch tensors (differentiates a scalar loss)")
    args = p.parse_args(argv)
    cases = load(args.directory, family=args.family, convention=args.convention, layout=args.layout)
    if args.ids:
        cases = [c for c in cases if c["id"] in args.ids]
    if not cases:
        print("no case matches these filters", file=sys.stderr)
        return 2
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # --impl resolves from the working directory, as under python -m
    try:
        fn = _load_object(args.impl)
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"vectors_reader: --impl {args.impl}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    results = [
        run_case(fn, c, precision=args.precision, convert="torch" if args.torch else None) for c in cases
    ]
    for r in results:
        if r.verdict != "pass":
            print(f"{r.verdict} {r.case}: {r.message}")
    counts = {v: sum(r.verdict == v for r in results) for v in ("pass", "FAIL", "WARN")}
    print(f"{counts['pass']} passed, {counts['FAIL']} failed, {counts['WARN']} warned ({len(results)} cases)")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
