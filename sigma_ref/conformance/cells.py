"""Cell texts of the peer matrix and the gallery tables, written from a finding's facts.

The matrix (:mod:`.matrix`) and the gallery tables show what a property measured in a few words:
the declared objective, the aggregation ``loss_aggregation`` measured, the clip
``loss_clipped_surrogate`` read off the gradient. Each is written here from data (an
:class:`~sigma_ref.objectives.Objective`, or the ``facts`` of a
:class:`~sigma_ref.conformance.findings.Finding`), never cut out of a message.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["describe_objective", "describe_aggregation", "describe_clip"]


def describe_objective(obj: Any) -> str:
    """A short text for a :class:`~sigma_ref.objectives.Objective` (the matrix's objective cells).

    >>> from sigma_ref.objectives import Objective
    >>> describe_objective(Objective("ppo", eps_low=0.2, dual_clip=3.0, kl="k3", kl_coef=0.1))
    'ppo clip [0.8, 1.2], dual clip 3 + 0.1 k3 KL'
    >>> describe_objective(Objective("cispo", eps_low=math.inf, eps_high=4.0))
    'cispo weight min(r, 5)'
    """
    lo, hi = obj.clip_range
    if obj.kind == "cispo" and lo == hi == 1:
        text = "REINFORCE, weight 1 (cispo clip [1, 1])"
    elif obj.kind == "cispo":
        text = f"cispo weight min(r, {hi:g})" if math.isinf(lo) else f"cispo weight clip(r, {lo:g}, {hi:g})"
    else:
        text = f"{obj.kind} clip [{lo:g}, {hi:g}]"
    if obj.dual_clip is not None:
        text += f", dual clip {obj.dual_clip:g}"
    if obj.tis_cap is not None:
        text += f", {'TIS' if obj.tis_mode == 'truncate' else 'MIS'} {obj.tis_level} cap {obj.tis_cap:g}"
    if obj.kl is not None and obj.kl_coef:
        text += f" + {obj.kl_coef:g} {obj.kl} KL" + (" in the reward" if obj.kl_placement == "reward" else "")
    return text


def describe_aggregation(facts: dict[str, Any]) -> str:
    """The aggregation ``loss_aggregation`` measured, from its finding's facts (the matrix's and the
    gallery's aggregation cells).

    >>> describe_aggregation({"aggregation": "seq-mean-token-sum-norm", "constant": 8.0})
    'seq-mean-token-sum-norm, C = 8'
    >>> describe_aggregation({"aggregation": None})
    'unrecognised weights'
    """
    mode, constant = facts["aggregation"], facts.get("constant")
    if mode is None:
        return "unrecognised weights"
    return str(mode) + (f", C = {constant:g}" if constant else "")


def describe_clip(facts: dict[str, Any]) -> str:
    """The PPO clip ``loss_clipped_surrogate`` read off the gradient, from its finding's facts (the
    matrix's objective cell).

    >>> describe_clip({"ppo": True, "lower": 0.8, "upper": 1.28, "dual_clip": 3.0, "how": "detected"})
    'ppo clip [0.8, 1.28], dual clip 3 [detected]'
    >>> describe_clip({"ppo": False, "lower": None, "upper": 1.0})
    'not a PPO clip [detected]'
    """
    if not facts.get("ppo"):
        return "not a PPO clip [detected]"
    lower = "-inf" if facts["lower"] is None else facts["lower"]
    upper = "inf" if facts["upper"] is None else facts["upper"]
    dual = f", dual clip {facts['dual_clip']:g}" if facts.get("dual_clip") else ""
    return f"ppo clip [{lower}, {upper}]{dual} [{facts['how']}]"
