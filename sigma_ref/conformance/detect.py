"""Convention detection: probe an implementation with designed reward vectors.

Each probe is a small batch whose answer separates two conventions (group size 4 unless
said otherwise); every expected number comes from the oracle:

1. *structure* ``[[1,0,0,0],[0,3,1,0]]``: are the advantages centered per group
   (``sum_g A = 0``) and proportional to ``R - mu`` with one divisor ``d_g`` per group?
   Equal divisors across groups mean ``scale="batch"`` (compared with the oracle's batch
   std), ``d = 1`` (Dr. GRPO) or ``d = (G-1)/G`` (RLOO, confirmed at G = 3); otherwise
   ``d_g / std_ddof(g)`` picks ``ddof`` 0 or 1.
2. *eps* ``[[t,0,0,0]]`` with ``t = 4e-13``: the group std is far below any eps in use,
   so ``d - std`` measures eps (0 if ``d = std``).
3. *placement*: a group with ``std = 10 eps``: ``d = 11 eps`` means ``std + eps``
   (``add``), ``d = 10 eps`` means ``max(std, eps)`` (``floor``).
4. *silent* ``[[1,1,1,1],[1,0,0,0]]``: the silent group's advantages (0, NaN, ...).
5. *singleton*: two groups of one, rewards 0.7 and 0.2: raises (``error``), 0
   (``zero``) or ``R / (1 + eps)`` (``unit_std``).

The detected fields are matched against :data:`sigma_ref.PRESETS` (and RLOO); when
none matches, the nearest preset and the differing fields are reported.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from .._vocabulary import SINGLETONS, Placement, Scale
from ..advantages import dr_grpo_advantage, group_statistics, grpo_advantage
from ..conventions import PAPER, PRESETS, Convention
from .adapter import Adapter, Batch
from .guard import ImplementationError, call_guarded
from .precision import precision_from_residual
from .reference import Reference, as_numpy, reference_for

__all__ = ["Detection", "detect_convention"]

_REL = 1e-6  # structure tolerance of float64 probes
_TINY = 4e-13


@dataclasses.dataclass(frozen=True)
class Detection:
    """What the probes found.

    ``family``: ``grpo``, ``dr_grpo``, ``rloo`` or ``unknown``. ``convention``: the
    detected fields as a :class:`~sigma_ref.Convention` named ``"detected"`` (``None``
    for RLOO or when the structure is not recognised). ``preset``: the matching preset
    name (or ``"rloo"``), else ``None``. ``nearest`` / ``differences``: the closest
    preset and how it differs. ``silent`` / ``singleton``: observed behaviour
    (``zero``, ``nan``, ``inf``, ``nonzero``, ``error``, ``unit_std``). ``notes``: what
    the probes saw, in words.
    """

    family: str
    convention: Convention | None
    preset: str | None
    nearest: str | None
    differences: tuple[str, ...]
    silent: str
    singleton: str
    notes: tuple[str, ...]
    precision: str = "float64"
    residual: float = 0.0
    silent_below: float = 0.0
    clip: float = 0.0
    #: A named estimator of :mod:`sigma_ref.estimators` the advantages are (``rloo_std``,
    #: ``loo_std``, ``group_then_batch``, ``maxrl``), when the structure is no convention.
    estimator: str | None = None

    @property
    def reference(self) -> Reference:
        """The behaviour to test against: the preset, the detected convention, or PAPER."""
        if self.preset is not None:
            ref = reference_for(self.preset)
        elif self.convention is not None:
            ref = Reference("detected", self.convention)
        elif self.family == "rloo":
            ref = reference_for("rloo")
        else:
            ref = reference_for(self.nearest or PAPER.name)
        if self.silent_below > 0 or self.clip > 0:
            ref = dataclasses.replace(ref, silent_below=self.silent_below, clip=self.clip)
        return ref

    def fields(self) -> str:
        """The detected fields in one phrase."""
        if self.family == "rloo":
            return f"RLOO: d = (G-1)/G; silent={self.silent}; singleton={self.singleton}"
        if self.convention is None:
            return "unrecognised structure"
        c = self.convention
        if c.scale == "none":
            d = "scale=none"
        else:
            eps = "eps=0" if c.eps == 0 else f"eps={c.eps:g} ({c.eps_placement})"
            d = f"ddof={c.ddof}, {eps}, scale={c.scale}"
        text = f"{d}, singleton={self.singleton}, silent={self.silent}"
        if self.silent_below > 0:
            text += f", spread filter std < {self.silent_below:.2g}"
        if self.clip > 0:
            text += f", advantages clamped to +-{self.clip:g}"
        return text

    def summary(self) -> str:
        """One line: the matching preset and the fields, or "no known convention"."""
        if self.preset is not None:
            return f"{self.preset} ({self.fields()})"
        near = ""
        if self.nearest is not None:
            near = f"; nearest: {self.nearest} (differs in {', '.join(self.differences)})"
        if any("inside the sqrt" in n for n in self.notes):
            near += "; eps is inside the sqrt"
        if self.estimator is not None:
            return f"named estimator {self.estimator!r} (sigma_ref.estimators), no convention{near}"
        return f"no known convention ({self.fields()}){near}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        conv = dataclasses.asdict(self.convention) if self.convention is not None else None
        return {
            "summary": self.summary(),
            "family": self.family,
            "preset": self.preset,
            "nearest": self.nearest,
            "differences": list(self.differences),
            "convention": conv,
            "silent": self.silent,
            "singleton": self.singleton,
            "notes": list(self.notes),
            "precision": self.precision,
            "residual": self.residual,
            "silent_below": self.silent_below,
            "clip": self.clip,
            "estimator": self.estimator,
        }


def _call(adapter: Adapter, batch: Batch) -> np.ndarray | None:
    """Advantages of a probe as float64 numpy, or ``None`` if the call raised or returned
    something that is not ``N`` numbers."""
    rewards = torch.tensor(batch.rewards, dtype=torch.float64)
    try:
        raw = call_guarded(adapter.call_raw, batch, rewards, what=lambda: adapter.call_repr(batch))
    except ImplementationError as exc:
        if not exc.rejected:  # exited, interrupted or hung: stop detecting, the run fails with it
            raise
        return None
    # the layout's own shape, checked before any conversion: a [B, G] result of a flat layout
    # is not N advantages, and a huge result is never copied
    if not isinstance(raw, torch.Tensor | np.ndarray) or tuple(raw.shape) != adapter.expected_shape(batch):
        return None
    out: np.ndarray = adapter.flat(raw).detach().to("cpu", torch.float64).numpy()
    return out


def _divisors(c: npt.NDArray[np.float64], a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Least-squares ``d`` per row with ``c = d * a`` (rows of ``[B, G]``)."""
    num: npt.NDArray[np.float64] = (c * c).sum(-1)
    den: npt.NDArray[np.float64] = (c * a).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return num / den


def _oracle_divisors(rewards: np.ndarray, conv: Convention | None) -> np.ndarray:
    """The oracle's divisor ``d`` of each row of ``rewards [B, G]`` (RLOO: ``(G - 1) / G``)."""
    if conv is None:
        G = rewards.shape[-1]
        return np.full(rewards.shape[0], (G - 1) / G)
    return np.asarray(group_statistics(rewards, convention=conv).divisor, dtype=np.float64).reshape(-1)


def _close(x: float, y: float, rel: float) -> bool:
    return bool(abs(x - y) <= rel * max(abs(x), abs(y)))


def _behaviour(values: np.ndarray | None) -> str:
    if values is None:
        return "error"
    if np.isnan(values).any():
        return "nan"
    if np.isinf(values).any():
        return "inf"
    return "zero" if (values == 0).all() else "nonzero"


def _structure(adapter: Adapter, notes: list[str]) -> tuple[str, int, Scale]:
    """Family, ddof and scale from the structure probes."""
    R = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0]])
    a = _call(adapter, Batch.grouped(R))
    if a is None:
        notes.append(
            "the implementation raised, or returned no advantages in the layout's shape, "
            "on the structure probe [[1,0,0,0],[0,3,1,0]]"
        )
        return "unknown", 0, "group"
    a = a.reshape(R.shape)
    if not np.isfinite(a).all():
        notes.append(f"non-finite advantages {a.tolist()} for [[1,0,0,0],[0,3,1,0]]")
        return "unknown", 0, "group"
    c = as_numpy(dr_grpo_advantage(R))
    size = max(1.0, float(np.abs(a).max()))
    if (np.abs(a.sum(-1)) > 1e-6 * size).any():
        notes.append(f"advantages do not sum to zero within groups (sums {a.sum(-1).tolist()})")
        return "unknown", 0, "group"
    with np.errstate(all="ignore"):
        d = _divisors(c, a)
    if (
        not np.isfinite(d).all()
        or not (np.abs(c - d[:, None] * a) <= 1e-6 * np.abs(c).max(-1, keepdims=True)).all()
    ):
        notes.append("advantages are centered but not proportional to R - mean within a group")
        return "unknown", 0, "group"
    if not (d > 0).all():
        notes.append(f"advantages have the wrong sign (divisors {d.tolist()})")
        return "unknown", 0, "group"
    if _close(d[0], d[1], _REL):
        if _close(d[0], 1.0, _REL):
            return "dr_grpo", 0, "none"
        rloo = _oracle_divisors(R, None)
        if _close(d[0], rloo[0], _REL):
            R3 = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
            a3 = _call(adapter, Batch.grouped(R3))
            if a3 is not None and np.isfinite(a3).all():
                d3 = _divisors(as_numpy(dr_grpo_advantage(R3)), a3.reshape(R3.shape))
                if _close(d3[0], _oracle_divisors(R3, None)[0], _REL):
                    return "rloo", 0, "none"
            notes.append("divisor (G-1)/G at G=4 but not at G=3: not RLOO")
            return "unknown", 0, "none"
        for ddof in (0, 1):
            batch = _oracle_divisors(R, PAPER.replace(ddof=ddof, scale="batch"))
            if _close(d[0], batch[0], 1e-3):
                return "grpo", ddof, "batch"
        notes.append(f"advantages are (R - mean) / {d[0]:.6g} with one constant for every group")
        return "unknown", 0, "none"
    for ddof in (0, 1):
        group = _oracle_divisors(R, PAPER.replace(ddof=ddof))
        if np.allclose(d, group, rtol=1e-3, atol=0):
            return "grpo", ddof, "group"
    ratio = d / _oracle_divisors(R, PAPER)
    notes.append(f"divisor is not the group std: d / std(ddof=0) = {ratio.round(6).tolist()}")
    return "unknown", 0, "group"


def _nice(x: float) -> float:
    """``x`` rounded to two significant digits."""
    return float(f"{x:.2g}")


def _probe_divisor(adapter: Adapter, t: float, base: Convention) -> tuple[float, float] | None:
    """``(d, std)`` of the probe ``[[t, 0, 0, 0]]``: the implementation's divisor and the
    group std under ``base``; ``None`` when the advantages are 0, non-finite or missing."""
    R = np.array([[t, 0.0, 0.0, 0.0]])
    a = _call(adapter, Batch.grouped(R))
    if a is None or not np.isfinite(a).all() or not (a != 0).any():
        return None
    d = float(_divisors(as_numpy(dr_grpo_advantage(R)), a.reshape(R.shape))[0])
    return d, float(_oracle_divisors(R, base)[0])


def _spread_filter(adapter: Adapter, base: Convention, notes: list[str]) -> tuple[float, float] | None:
    """``(threshold std, probe reward)`` of a filter that zeroes groups of small spread.

    The tiny-std probe got 0: scan ``t = 1e-12 .. 0.1`` for the first live group, then
    bisect (in log space, 40 steps) between the last silent and the first live ``t``.
    """
    live = next((t for t in 10.0 ** np.arange(-12, 0) if _probe_divisor(adapter, t, base)), None)
    if live is None:
        return None
    lo, hi = live / 10, live
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        if _probe_divisor(adapter, mid, base) is None:
            lo = mid
        else:
            hi = mid
    std = float(_oracle_divisors(np.array([[hi, 0.0, 0.0, 0.0]]), base.replace(eps=0.0))[0])
    notes.append(
        f"groups whose std is below {std:.3g} get advantage 0 (a spread filter): such groups are "
        "treated as silent"
    )
    return std, hi


def _eps(adapter: Adapter, ddof: int, scale: Scale, notes: list[str]) -> tuple[float, Placement, float]:
    """Eps, its placement and a spread filter's threshold, from the tiny-std probes.

    A group of std ``4e-13`` measures eps as ``d - std``. Where the implementation returns 0
    for it (a spread filter such as ``std < 1e-4``), the filter's threshold is bracketed
    first and eps is measured at twice the threshold.
    """
    base = PAPER.replace(ddof=ddof, scale=scale)
    silent_below = 0.0
    t = _TINY
    found = _probe_divisor(adapter, t, base)
    if found is None:
        spread = _spread_filter(adapter, base, notes)
        if spread is None:
            notes.append(f"tiny-std probe [[{_TINY:g},0,0,0]] and every spread up to 0.1 gave 0 or failed")
            return 0.0, "add", 0.0
        silent_below, t = spread
        t *= 2
        found = _probe_divisor(adapter, t, base)
        if found is None:
            return 0.0, "add", silent_below
    d, std = found
    if _close(d, std, 1e-3):
        return 0.0, "add", silent_below
    if not d > std:
        notes.append(f"tiny-std probe: d = {d:.3g} is below the group std {std:.3g} (imprecise statistics)")
        return 0.0, "add", silent_below
    eps = _nice(d - std)
    # a group whose std is 10 eps: d = 11 eps (add) or 10 eps (floor)
    unit = float(_oracle_divisors(np.array([[1.0, 0.0, 0.0, 0.0]]), base)[0])
    if 10 * eps < 1.5 * silent_below:
        notes.append(
            "eps is below the spread filter's threshold: its placement cannot be probed; assuming add"
        )
        return eps, "add", silent_below
    R10 = np.array([[10 * eps / unit, 0.0, 0.0, 0.0]])
    a10 = _call(adapter, Batch.grouped(R10))
    if a10 is None or not np.isfinite(a10).all() or not (a10 != 0).any():
        notes.append("placement probe failed; assuming eps is added")
        return eps, "add", silent_below
    d10 = float(_divisors(as_numpy(dr_grpo_advantage(R10)), a10.reshape(R10.shape))[0])
    if abs(d10 / eps - math.sqrt(101)) < 0.005:  # d = sqrt(std^2 + eps^2)
        notes.append(f"d = sqrt(var + {eps * eps:.2g}) fits the probes: eps is inside the sqrt")
    placement: Placement = "floor" if abs(d10 / eps - 10) < abs(d10 / eps - 11) else "add"
    if min(abs(d10 / eps - 10), abs(d10 / eps - 11)) > 0.05:
        notes.append(
            f"d = {d10 / eps:.4g} eps for a group with std = 10 eps: neither std + eps nor max(std, eps)"
        )
    if placement == "floor":  # d = max(std, eps) = eps on the tiny-std probe
        eps = _nice(d)
    return eps, placement, silent_below


#: A well-conditioned probe whose rewards are not representable in float32 (nor in
#: binary): its rounding residual tells float64 statistics from float32 ones.
_PRECISION_PROBE = np.array([[0.1, 0.7, 0.3, 0.9], [0.35, 0.2, 0.65, 0.15]])


def _precision(adapter: Adapter, notes: list[str]) -> tuple[str, float]:
    """Working precision and the relative residual ``max|c - d a| / max|c|`` of the probe."""
    R = _PRECISION_PROBE
    a = _call(adapter, Batch.grouped(R))
    if a is None or not np.isfinite(a).all():
        return "float64", math.nan
    c = as_numpy(dr_grpo_advantage(R))
    a = a.reshape(R.shape)
    with np.errstate(all="ignore"):
        d = _divisors(c, a)
        residual = float(np.max(np.abs(c - d[:, None] * a)) / np.max(np.abs(c)))
    if not math.isfinite(residual):
        return "float64", math.nan
    precision = precision_from_residual(residual)
    if precision != "float64":
        notes.append(
            f"statistics computed in {precision} (relative rounding residual {residual:.2g} on a "
            "non-dyadic probe): values are judged at that precision"
        )
    return precision, residual


#: Two probes that tell the named estimators apart (a group with one success, whose leave-one-out
#: sets include a silent one; continuous non-dyadic groups).
_ESTIMATOR_PROBES = (
    np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0]]),
    np.array([[0.1, 0.7, 0.3, 0.9, 0.5], [0.35, 0.2, 0.65, 0.15, 1.0]]),
)


def _named_estimator(adapter: Adapter) -> str | None:
    """The named estimator (:mod:`sigma_ref.estimators`) that reproduces the advantages on both
    :data:`_ESTIMATOR_PROBES`, or ``None``: the diagnosis' estimator hypotheses, checked on each."""
    from .diagnose import _explaining

    found: set[str] | None = None
    for R in _ESTIMATOR_PROBES:
        batch = Batch.grouped(R)
        a = _call(adapter, batch)
        if a is None or not np.isfinite(a).all():
            return None
        keys = {
            key.split(":")[1]
            for key, _ in _explaining(a, batch.rewards, batch.index, reference_for(PAPER.name))
            if key.startswith("estimator:")
        }
        found = keys if found is None else found & keys
    return sorted(found)[0] if found and len(found) == 1 else None


def _singleton(adapter: Adapter, conv: Convention | None) -> str:
    R = np.array([[0.7], [0.2]])
    a = _call(adapter, Batch.grouped(R))
    kind = _behaviour(a)
    if kind != "nonzero" or a is None:
        return kind
    if conv is not None:
        unit = as_numpy(grpo_advantage(R, convention=conv.replace(singleton="unit_std"))).reshape(-1)
        if np.allclose(a, unit, rtol=1e-6, atol=0):
            return "unit_std"
    return "nonzero"


def _matches(conv: Convention, preset: Convention) -> list[str]:
    """Fields where ``conv`` differs from ``preset``."""
    diff = []
    if conv.scale != preset.scale:
        diff.append(f"scale {conv.scale} vs {preset.scale}")
    if conv.scale != "none" and preset.scale != "none":
        if conv.ddof != preset.ddof:
            diff.append(f"ddof {conv.ddof} vs {preset.ddof}")
        if (conv.eps == 0) != (preset.eps == 0) or (
            conv.eps > 0 and not math.isclose(conv.eps, preset.eps, rel_tol=0.05)
        ):
            diff.append(f"eps {conv.eps:g} vs {preset.eps:g}")
        elif conv.eps > 0 and conv.eps_placement != preset.eps_placement:
            diff.append(f"eps placement {conv.eps_placement} vs {preset.eps_placement}")
    if preset.singleton != "error" and conv.singleton != preset.singleton:  # "error": unspecified
        diff.append(f"singleton {conv.singleton} vs {preset.singleton}")
    return diff


def detect_convention(adapter: Adapter) -> Detection:
    """Probe ``adapter`` and name its convention (module doc: the probes), then look for a
    clamp of the advantages (a group of 128 with one success, and ``[0, 0, 0, 40]``, whose
    advantages exceed any clamp in use under every convention).

    >>> from sigma_ref.conformance import oracle_adapter
    >>> detect_convention(oracle_adapter("verl")).clip
    0.0
    """
    det = _detect(adapter)
    if det.family == "unknown":
        return det
    clip = _clamp(adapter, det.reference)
    if clip:
        notes = (
            *det.notes,
            f"advantages are clamped to [-{clip:g}, {clip:g}] (e.g. OpenRLHF's advantage clip)",
        )
        return dataclasses.replace(det, clip=clip, notes=notes)
    return det


def _clamp(adapter: Adapter, ref: Reference) -> float:
    """The bound ``C`` of a clamp ``A -> clip(A, -C, C)``, or 0 when the probes show none."""
    for R in (np.array([[1.0] + [0.0] * 127]), np.array([[0.0, 0.0, 0.0, 40.0]])):
        a = _call(adapter, Batch.grouped(R))
        if a is None or not np.isfinite(a).all():
            continue
        try:
            e = as_numpy(ref.advantages(R.reshape(-1), np.zeros(R.size, dtype=np.int64)))
        except Exception:
            continue
        top = float(np.abs(a).max())
        if top < 0.999 * float(np.abs(e).max()) and abs(top - round(top)) < 1e-6 and top >= 1:
            free = np.abs(e) < top
            if np.allclose(a[free], e[free], rtol=1e-4, atol=1e-6):
                return float(round(top))
    return 0.0


def _detect(adapter: Adapter) -> Detection:
    """The probes of :func:`detect_convention` without the clamp probe.

    >>> from sigma_ref.conformance import oracle_adapter
    >>> detect_convention(oracle_adapter("verl")).preset
    'verl'
    >>> print(detect_convention(oracle_adapter(PAPER.replace(name="x", eps=1e-5))).summary())
    no known convention (ddof=0, eps=1e-05 (add), scale=group, singleton=error, silent=zero);
    nearest: paper (differs in eps 1e-05 vs 0)
    """
    notes: list[str] = []
    family, ddof, scale = _structure(adapter, notes)
    precision, residual = _precision(adapter, notes) if family != "unknown" else ("float64", math.nan)
    probe = _call(adapter, Batch.grouped([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]]))
    silent = _behaviour(None if probe is None else probe[:4])
    if silent != "zero":
        notes.append(f"a silent group [1,1,1,1] gets {silent} advantages, not 0")
    estimator, silent_below = None, 0.0
    conv: Convention | None
    differences: tuple[str, ...]
    if family == "unknown":
        singleton = _singleton(adapter, None)
        estimator = _named_estimator(adapter)
        if estimator is not None:
            notes.append(
                f"the advantages are the named estimator {estimator!r} of sigma_ref.estimators on both "
                "estimator probes: a different algorithm, not a convention"
            )
        conv, preset_name, nearest, differences = None, None, PAPER.name, ("structure",)
    elif family == "rloo":
        singleton = _singleton(adapter, None)
        preset_name = "rloo" if silent == "zero" else None
        conv, nearest, differences = None, "rloo", (() if preset_name else ("silent groups",))
    else:
        eps: float
        placement: Placement
        eps, placement, silent_below = (
            (0.0, "add", 0.0) if scale == "none" else _eps(adapter, ddof, scale, notes)
        )
        conv = Convention("detected", ddof=ddof, eps=eps, eps_placement=placement, scale=scale)
        singleton = _singleton(adapter, conv)
        if singleton in SINGLETONS:
            conv = conv.replace(singleton=singleton)
        else:
            notes.append(f"a group of one response gets {singleton} advantages")
        conv, preset_name, nearest, differences = _nearest_preset(conv, singleton, silent)
    return Detection(
        family,
        conv,
        preset_name,
        nearest,
        differences,
        silent,
        singleton,
        tuple(notes),
        precision=precision,
        residual=residual,
        silent_below=silent_below,
        estimator=estimator,
    )


def _nearest_preset(
    conv: Convention, singleton: str, silent: str
) -> tuple[Convention, str | None, str, tuple[str, ...]]:
    """The preset nearest ``conv`` (fewest differing fields; ties go to the preset whose eps matches
    exactly, then to the preset order): ``(the preset or conv, its name when nothing differs, the
    nearest name, the differences)``."""
    ranked = []
    for order, (name, candidate) in enumerate(PRESETS.items()):
        diff = _matches(conv, candidate)
        if singleton not in SINGLETONS and candidate.singleton != "error":
            diff = [d for d in diff if not d.startswith("singleton")]
            diff.append(f"singleton {singleton} vs {candidate.singleton}")
        if silent != "zero":
            diff.append(f"silent groups {silent} vs zero")
        same_eps = conv.scale == "none" or math.isclose(conv.eps, candidate.eps, rel_tol=0.05, abs_tol=0.0)
        ranked.append((len(diff), 0 if same_eps else 1, order, name, tuple(diff)))
    ranked.sort()
    n_diff, _, _, nearest, differences = ranked[0]
    if n_diff == 0:
        return PRESETS[nearest], nearest, nearest, differences
    return conv, None, nearest, differences
