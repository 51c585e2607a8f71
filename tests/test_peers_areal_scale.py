"""AReaL's level-5 cells on real processes: ``ppo_actor_loss_fn`` (a micro-batch token mean) scaled
as AReaL's FSDP engine scales it, ``loss_weight_fn / compute_total_loss_weight * dp_size``
(``spec/adapters/areal.py``, ``_at_scale``; ``proofs/12_scale_out.py``, "Re-weighted by the engine").

The rows pass at W = 2, M = 2 on uneven micro-batches; the same launch runs the engine with one
ingredient taken out, each a mutant the cell must FAIL with its class named: without the
``dp_size`` multiplier (``loss_multiplier=1``) and without ``compute_total_loss_weight`` (each
micro-batch's own token mean, times ``dp_size``).
"""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from sigma_ref.conformance.matrix import adapter_module, run_scaleout_cells

pytestmark = pytest.mark.slow


def _areal() -> Any:
    module = adapter_module("areal")
    reason = module.unavailable()
    if reason is not None:
        pytest.skip(reason)
    return module


def without_dp_size(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    rank_num_tokens: int,
    process_group: Any,
) -> torch.Tensor:
    """Mutant: AReaL's engine with ``loss_multiplier=1`` (FSDP's average left in): ``0.5x`` at W = 2."""
    at_scale = adapter_module("areal").AT_SCALE.ppo
    out: torch.Tensor = at_scale(
        logp,
        old_logp,
        advantages,
        mask,
        rank_num_tokens=rank_num_tokens,
        world_size=1,
        process_group=process_group,
    )
    return out


def without_total_weight(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    world_size: int,
) -> torch.Tensor:
    """Mutant: no ``loss_weight_fn / compute_total_loss_weight``, each micro-batch's own token mean
    (``ppo_actor_loss_fn`` as it is) times ``dp_size``: a sum of micro-batch means."""
    out: torch.Tensor = (
        adapter_module("areal").ADAPTERS["reward_norm[group]"].loss(logp, old_logp, advantages, mask)
    )
    return out * world_size


#: The mutants as the child processes import them (``tests.test_peers_areal_scale:AT_SCALE.<name>``).
AT_SCALE = types.SimpleNamespace(without_dp_size=without_dp_size, without_total_weight=without_total_weight)

#: AReaL rows (their at-scale losses differ: the default loss, GSPO, rejection sampling with the
#: rollout's log-probs) and the expected cell.
ROWS = [
    ("reward_norm[group]", "pass"),
    ("policy[importance_sampling_level=sequence]", "pass"),
    ("policy[rejection_sampling token mask 2]", "pass"),
]
MUTANTS = [
    ("without_dp_size", "FAIL 0.5x the full-batch gradient: world size not applied"),
    ("without_total_weight", "FAIL ~3.62x the full-batch gradient: normaliser computed per micro-batch"),
]


@pytest.fixture(scope="module")
def cells() -> dict[str, tuple[str, list[Any]]]:
    """Every cell of ROWS and MUTANTS, from one launch of 2 gloo processes."""
    import sys

    from spec.adapters._peers import ScaleOut

    areal = _areal()
    this = sys.modules[__name__]
    wanted = [(areal, areal.SCALEOUT[mode]) for mode, _ in ROWS]
    wanted += [(this, ScaleOut(name, "token-mean", sizes="uneven")) for name, _ in MUTANTS]
    got = run_scaleout_cells(wanted)
    return dict(zip([m for m, _ in ROWS] + [n for n, _ in MUTANTS], got, strict=True))


@pytest.mark.parametrize(("mode", "text"), ROWS)
def test_areal_rows_pass_at_scale(mode: str, text: str, cells: dict[str, tuple[str, list[Any]]]) -> None:
    """AReaL's engine arithmetic gives the global token mean at W = 2, M = 2 on uneven micro-batches:
    the split gradient equals the full-batch one and the token-mean prediction."""
    got, results = cells[mode]
    assert got == text, [r.line() for r in results]
    assert {r.property.partition("[")[0] for r in results} >= {"scaleout_gradient", "scaleout_prediction"}


@pytest.mark.parametrize(("name", "text"), MUTANTS)
def test_areal_engine_without_an_ingredient_fails(
    name: str, text: str, cells: dict[str, tuple[str, list[Any]]]
) -> None:
    """Each of the engine's two ingredients is needed: without ``dp_size`` the step is half the full
    batch's; without the all-reduced total weight each micro-batch is its own token mean."""
    got, results = cells[name]
    assert got == text, [r.line() for r in results]


def test_areal_scaleout_covers_every_loss_row() -> None:
    """Every AReaL loss row has a ScaleOut (no reason string left) whose loss is in AT_SCALE and
    declares the engine's inputs: the rank's valid tokens, the world size and the process group."""
    from sigma_ref.conformance.scaleout import declared_globals

    areal = _areal()
    for mode, adapter in areal.ADAPTERS.items():
        assert adapter.loss is not None
        spec = areal.SCALEOUT[mode]
        assert not isinstance(spec, str), (mode, spec)
        fn = getattr(areal.AT_SCALE, spec.loss)
        assert declared_globals(fn) == ["rank_num_tokens", "world_size", "process_group"], mode
