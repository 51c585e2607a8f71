"""Adapters for google's tunix 0.1.7 (JAX): its advantage estimators and its GRPO loss, run on CPU.

tunix is written in JAX; every adapter goes through the suite's JAX bridge
(``sigma_ref.conformance.frameworks``): the suite's torch inputs reach tunix as jax arrays
(float64 under ``jax.enable_x64``), the loss's gradient is ``jax.value_and_grad``'s.

Advantages (layout ``contiguous``: tunix groups by position, ``rewards.reshape(-1,
num_generations)``), tunix's registered estimators of ``tunix/rl/algo_core.py``, called as
``estimator(rewards, num_generations)``:

* ``grpo`` (``compute_advantages``): ``(R - mean_g) / (std_g(ddof=1) + 1e-6)``: Bessel std plus
  1e-6, verl's statistics, but a group of one gets NaN (``std`` with ``ddof=1`` of one value);
* ``rloo`` (``compute_rloo_advantages``): ``R_i - mean_{j != i} R_j``;
* ``drgrpo`` (``compute_drgrpo_advantages``): ``R - mean_g``;
* ``gae`` is token-level with a critic's values (PPO), not a group estimator: ``n/a``.

Loss: tunix's own ``algo_core.grpo_loss_fn(model, train_example, algo_config, pad_id, eos_id)``,
unmodified, with a real ``GRPOConfig(beta=0.0, loss_agg_mode=...)`` (clip ``epsilon`` 0.2) and a
``TrainExample`` holding the suite's mask (boolean, as ``GRPOLearner`` builds it), advantages and
old log-probs; tunix computes the loss in float32 (``jnp.astype(per_token_logps, jnp.float32)``).
It computes the policy's log-probs with ``common.compute_per_token_logps(graphdef, state, ...)``
from a model; for the call only, that name is replaced by a stand-in returning the suite's
log-probs (and zero logits for the entropy metric), as TRL's adapter stands in for
``_get_per_token_logps_and_entropies``.
The advantage rows use tunix's default ``loss_agg_mode="sequence-mean-token-mean"``; the rows
``loss[<mode>]`` run each of ``common.aggregate_loss``'s modes. tunix reuses verl's mode names
with other meanings; what each computes (per-token weight ``w_it``, ``N_seq`` the rows with a
token, ``T`` the padded length), as the suite measures it:

* ``token-mean``: ``1 / N_tok`` (verl's token-mean);
* ``sequence-mean-token-mean``: ``1 / (N_seq |y_i|)`` (verl's seq-mean-token-mean);
* ``sequence-mean-token-scale``: ``1 / (N_seq T)``, verl's *seq-mean-token-sum-norm* (C = T);
* ``seq-mean-token-sum``: ``1 / N_seq`` (verl's seq-mean-token-sum);
* ``sequence-mean-token-sum-norm``: ``1 / N_seq`` by default (``norm`` = the non-empty rows), i.e.
  verl's *seq-mean-token-sum*, not verl's seq-mean-token-sum-norm (which divides by ``N_seq C``).

>>> sorted(ADAPTERS)[:3]
['drgrpo', 'grpo', 'loss[seq-mean-token-sum]']
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

from sigma_ref.conformance import Adapter
from sigma_ref.conformance.adapter import ALL_DTYPES
from sigma_ref.conformance.frameworks import jax_function, jax_loss

from ._peers import Peer, ScaleOut, lazy

__all__ = [
    "PEER",
    "ADAPTERS",
    "NOT_APPLICABLE",
    "LOSS_ONLY",
    "AGGREGATION_MODES",
    "NOTES",
    "SCALEOUT",
    "available",
    "unavailable",
]

PEER = Peer("google-tunix", "tunix", "0.1.7", title="tunix")

#: ``common.aggregate_loss``'s modes in tunix 0.1.7 -> the aggregation they compute (the oracle's
#: names, ``sigma_ref.objectives``), measured by the suite's ``loss_aggregation``.
AGGREGATION_MODES: dict[str, str] = {
    "token-mean": "token-mean",
    "sequence-mean-token-mean": "seq-mean-token-mean",
    "sequence-mean-token-scale": "seq-mean-token-sum-norm",
    "seq-mean-token-sum": "seq-mean-token-sum",
    "sequence-mean-token-sum-norm": "seq-mean-token-sum",
}
#: tunix's default ``GRPOConfig.loss_agg_mode`` and ``epsilon`` (the clip range).
DEFAULT_MODE = "sequence-mean-token-mean"
EPSILON = 0.2


def available() -> bool:
    """Whether tunix is installed."""
    return PEER.unavailable() is None


def unavailable() -> str | None:
    """Why tunix cannot be used, or ``None``."""
    return PEER.unavailable()


@lazy
def _tunix() -> types.SimpleNamespace:
    """tunix's modules the adapters call (imports tunix, jax and flax on first use)."""
    PEER.require()
    from flax import nnx
    from tunix.rl import algo_core, common
    from tunix.rl.grpo import grpo_learner

    class NoModel(nnx.Module):  # type: ignore[misc]
        """A model with no parameters: grpo_loss_fn splits it, the stand-in ignores it."""

    return types.SimpleNamespace(algo_core=algo_core, common=common, grpo=grpo_learner, model=NoModel())


#: tunix's registered group estimators (``function_registry`` names -> ``algo_core`` functions).
_ESTIMATORS = {
    "grpo": "compute_advantages",
    "rloo": "compute_rloo_advantages",
    "drgrpo": "compute_drgrpo_advantages",
}


def _estimator(name: str) -> Callable[..., Any]:
    attr = _ESTIMATORS[name]

    def advantages(rewards: Any, group_size: int) -> Any:
        return getattr(_tunix().algo_core, attr)(rewards, group_size)

    advantages.__name__ = advantages.__qualname__ = attr
    advantages.__module__ = "tunix.rl.algo_core"
    return advantages


@contextlib.contextmanager
def _log_probs(logp: Any) -> Iterator[None]:
    """``common.compute_per_token_logps`` returns ``logp`` (and zero logits) during the call."""
    import jax.numpy as jnp

    common = _tunix().common
    original = common.compute_per_token_logps

    def stand_in(*args: Any, return_logits: bool = False, **kwargs: Any) -> Any:
        if return_logits:
            return logp, jnp.zeros((*logp.shape, 2), dtype=logp.dtype)
        return logp

    common.compute_per_token_logps = stand_in
    try:
        yield
    finally:
        common.compute_per_token_logps = original


def _grpo_loss(mode: str) -> Callable[..., Any]:
    """tunix's ``grpo_loss_fn`` with ``loss_agg_mode=mode``, as ``loss(logp, old_logp, advantages, mask)``."""

    def loss(logp: Any, old_logp: Any, advantages: Any, mask: Any) -> Any:
        import jax.numpy as jnp

        t = _tunix()
        config = t.grpo.GRPOConfig(num_generations=2, beta=0.0, epsilon=EPSILON, loss_agg_mode=mode)
        config.temperature = 1.0  # GRPOLearner.__init__ copies it from the rollout config
        n, width = logp.shape
        example = t.grpo.TrainExample(
            prompt_ids=jnp.zeros((n, 1), dtype=jnp.int32),
            prompt_mask=jnp.ones((n, 1), dtype=jnp.int32),
            completion_ids=jnp.zeros((n, width), dtype=jnp.int32),
            completion_mask=mask > 0,  # boolean, as GRPOLearner builds it (completion_ids != pad)
            advantages=advantages,
            ref_per_token_logps=None,
            old_per_token_logps=old_logp,
        )
        with _log_probs(logp):
            return t.algo_core.grpo_loss_fn(t.model, example, config, pad_id=0, eos_id=1)

    loss.__name__ = loss.__qualname__ = f"grpo_loss_fn[{mode}]"
    loss.__module__ = "tunix.rl.algo_core"
    return loss


#: The oracle's name for each estimator's convention (``grpo``: none; Bessel + 1e-6 with NaN for a
#: group of one is no preset, the suite reports what it detects).
_CONVENTIONS: dict[str, str | None] = {"grpo": None, "rloo": "rloo", "drgrpo": "dr_grpo"}


#: tunix's rewards are float64 numpy arrays (``RewardManager``: ``np.zeros``), so compute_advantages never
#: sees float16, where its std squares |R| >= 256 past float16's 65504 (the suite's
#: ``half_precision_range`` FAILs it with that cause when float16 is declared).
_DTYPES: dict[str, tuple[str, ...]] = {"grpo": ("float64", "float32", "bfloat16")}


def _adapter(estimator: str, mode: str) -> Adapter:
    return Adapter(
        jax_function(_estimator(estimator)),
        "contiguous",
        loss=jax_loss(_grpo_loss(mode)),
        convention=_CONVENTIONS[estimator],
        dtypes=_DTYPES.get(estimator, ALL_DTYPES),
        devices=("cpu",),
        name=f"tunix {estimator} + grpo_loss_fn[{mode}]",
        aggregation=AGGREGATION_MODES[mode],
        clip=(EPSILON, EPSILON),
    )


ADAPTERS: dict[str, Adapter] = {
    "grpo": _adapter("grpo", DEFAULT_MODE),
    "rloo": _adapter("rloo", DEFAULT_MODE),
    "drgrpo": _adapter("drgrpo", DEFAULT_MODE),
    **{f"loss[{mode}]": _adapter("grpo", mode) for mode in AGGREGATION_MODES if mode != DEFAULT_MODE},
}
#: The loss rows share the grpo row's advantages: the matrix runs only their loss properties.
LOSS_ONLY: dict[str, tuple[str, ...]] = {
    mode: ("loss_gradient_identity", "loss_aggregation", "loss_clipped_surrogate", "loss_ignores_padding")
    for mode in ADAPTERS
    if mode.startswith("loss[")
}
NOTES: dict[str, str] = {
    "grpo": "Bessel std + 1e-6 (verl's statistics); a group of one gets NaN; float16 not declared (tunix's "
    "rewards are float64; its float16 std overflows at |R| >= 256)",
    "loss[sequence-mean-token-scale]": "tunix's name for verl's seq-mean-token-sum-norm (C = T)",
    "loss[sequence-mean-token-sum-norm]": "tunix's name for verl's seq-mean-token-sum (divides by N_seq)",
}
_NOT_YET = "level 5 runs torch.distributed ranks; tunix shards with jax.sharding (not yet)"
SCALEOUT: dict[str, ScaleOut | str] = {mode: _NOT_YET for mode in ADAPTERS}
NOT_APPLICABLE: dict[str, str] = {
    "gae": "tunix's gae estimator is token-level PPO with a critic's values, not a group estimator",
}
