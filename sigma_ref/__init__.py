"""sigma-ref: the ground-truth oracle for GRPO-family advantage code.

GRPO, Dr. GRPO, RLOO and DAPO all act on one number, the group reward standard
deviation ``sigma = sqrt(k (G - k)) / G``. For binary rewards the per-prompt update
is exactly ``g = (sigma**2 / d) * (s+ - s-)``, with ``d = sigma`` for GRPO.

Public submodules beyond this namespace: ``sigma_ref.testing``
(``assert_advantages_close``, in the style of ``torch.testing.assert_close``),
``sigma_ref.strategies`` (hypothesis strategies for reward groups, ragged batches and
scores; needs hypothesis), ``sigma_ref.conformance`` (the suite's ``Adapter`` protocol
and ``detect_convention``), ``sigma_ref.objectives`` (the per-token gradient of GRPO-family
losses: aggregation modes, PPO and dual clip, GSPO, CISPO, importance sampling, KL
estimators, and what micro-batches and ranks make of them), ``sigma_ref.symbolic`` (the
sympy expressions the proofs derive) and ``sigma_ref.compat.post`` (the seed post's code,
as published).

The specification the docstrings and messages cite as ``docs/spec.md §N`` ships with the
package: ``docs/spec.md`` is that path in a clone and inside the installed package, read with
``importlib.resources.files("sigma_ref").joinpath("docs/spec.md").read_text()``.

>>> import numpy as np, sigma_ref
>>> sigma_ref.grpo_advantage(np.array([1.0, 0.0, 0.0, 0.0]))
array([ 1.73205081, -0.57735027, -0.57735027, -0.57735027])
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, for type checkers; at run time they load on first use
    from .advantages import (
        GroupStatistics,
        dapo_keep_mask,
        dr_grpo_advantage,
        group_statistics,
        grpo_advantage,
        rloo_advantage,
    )
    from .audit import AuditResult, AuditRow, corpus_audit
    from .conventions import (
        DR_GRPO,
        OPENRLHF,
        PAPER,
        POST,
        PRESETS,
        TRL,
        TRL_BATCH,
        VERL,
        Convention,
        get_convention,
    )
    from .difficulty import (
        arcsine_objective,
        attenuation,
        difficulty_weight,
        exact_group_size,
        expected_gradient,
        fidelity,
        mass_share,
        mass_weight,
        min_group_size,
        silent_group_rate,
    )
    from .identity import (
        ContinuousDecomposition,
        Decomposition,
        decompose,
        decompose_continuous,
        policy_gradient,
    )
    from .stats import centered_norm, group_sigma

#: Public name -> the submodule that defines it. ``import sigma_ref`` loads none of them
#: (PEP 562): numpy callers never import torch, and nobody imports sympy or mpmath by accident.
_HOMES = {
    "group_statistics": "advantages",
    "GroupStatistics": "advantages",
    "dapo_keep_mask": "advantages",
    "dr_grpo_advantage": "advantages",
    "grpo_advantage": "advantages",
    "rloo_advantage": "advantages",
    "AuditResult": "audit",
    "AuditRow": "audit",
    "corpus_audit": "audit",
    "DR_GRPO": "conventions",
    "OPENRLHF": "conventions",
    "PAPER": "conventions",
    "POST": "conventions",
    "PRESETS": "conventions",
    "TRL": "conventions",
    "TRL_BATCH": "conventions",
    "VERL": "conventions",
    "Convention": "conventions",
    "get_convention": "conventions",
    "arcsine_objective": "difficulty",
    "attenuation": "difficulty",
    "difficulty_weight": "difficulty",
    "exact_group_size": "difficulty",
    "expected_gradient": "difficulty",
    "fidelity": "difficulty",
    "mass_share": "difficulty",
    "mass_weight": "difficulty",
    "min_group_size": "difficulty",
    "silent_group_rate": "difficulty",
    "ContinuousDecomposition": "identity",
    "Decomposition": "identity",
    "decompose": "identity",
    "decompose_continuous": "identity",
    "policy_gradient": "identity",
    "centered_norm": "stats",
    "group_sigma": "stats",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sigma_ref' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def _public_names(module: str) -> list[str]:
    """The names of ``__all__`` that live in ``module`` (a submodule's ``__name__``).

    Each submodule's ``__all__`` starts with this slice, so the package's one list names them:

    >>> _public_names("sigma_ref.stats")
    ['group_sigma', 'centered_norm']
    """
    home = module.rpartition(".")[2]
    return [name for name in __all__ if _HOMES[name] == home]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

__all__ = [
    # group statistics
    "group_statistics",
    "GroupStatistics",
    "group_sigma",
    "centered_norm",
    # conventions
    "Convention",
    "get_convention",
    "PRESETS",
    "PAPER",
    "POST",
    "DR_GRPO",
    "TRL",
    "TRL_BATCH",
    "VERL",
    "OPENRLHF",
    # advantages
    "grpo_advantage",
    "dr_grpo_advantage",
    "rloo_advantage",
    "dapo_keep_mask",
    # the identity
    "policy_gradient",
    "decompose",
    "decompose_continuous",
    "Decomposition",
    "ContinuousDecomposition",
    # closed forms in p
    "silent_group_rate",
    "expected_gradient",
    "fidelity",
    "attenuation",
    "min_group_size",
    "exact_group_size",
    "difficulty_weight",
    "mass_weight",
    "mass_share",
    "arcsine_objective",
    # corpus audit
    "corpus_audit",
    "AuditResult",
    "AuditRow",
]
