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

Level 5 (:data:`SCALEOUT`, :data:`AT_SCALE`): how tunix 0.1.7 trains a step, read from its code
(paths under ``site-packages``):

* micro-batches: ``RLTrainingConfig`` sets ``gradient_accumulation_steps = mini_batch_size //
  train_micro_batch_size`` (``tunix/rl/rl_cluster.py:140``; it refuses a user value, :121) and the
  learner cuts the batch into micro-batches of ``train_micro_batch_size`` prompts
  (``tunix/rl/rl_learner.py:572``): equal sizes, one ``train_step`` each;
* accumulation: ``PeftTrainer`` wraps the optimizer in ``optax.MultiSteps(optimizer,
  gradient_accumulation_steps)`` (``tunix/sft/peft_trainer.py:213``), whose ``use_grad_mean=True``
  default (``optax/transforms/_accumulation.py:266``, optax 0.2.8) *averages* the micro-batch
  gradients (:307): ``loss_scale="mean-over-micro-batches"``;
* data parallelism: ``sharding_utils.shard_input`` (``peft_trainer.py:665``) makes the micro-batch
  one global array sharded over the mesh's batch axis (``tunix/sft/sharding_utils.py:69``), and
  ``nnx.value_and_grad`` runs the loss once on it (``peft_trainer.py:352``): no loss per device, so
  the normaliser counts the micro-batch of every rank. The at-scale losses are therefore
  :func:`~sigma_ref.conformance.scaleout.spmd_loss` around the bridged ``grpo_loss_fn``;
* precision: ``grpo_loss_fn`` casts log-probs and advantages to float32 (``tunix/rl/algo_core.py:399,
  401``): the gradients are compared at float32's tolerance (``loss_precision="float32"``).

So each mode's normaliser is counted per (global) micro-batch and the micro-batch gradients are
averaged. That is the step's aggregation exactly when every micro-batch holds the same count: the
sequence modes (``N_seq`` = ``train_micro_batch_size x num_generations`` responses, every one with a
token) pass; ``token-mean`` (``tunix/rl/common.py:554``: "average by total number of completion
tokens", of the micro-batch) gives a mean of per-micro-batch token means, whose token counts differ:
FAIL whenever ``train_micro_batch_size < mini_batch_size``, exact without accumulation.

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
from sigma_ref.conformance.scaleout import spmd_loss

from ._peers import MODULE_API, Peer, ScaleOut, lazy

__all__ = [*MODULE_API, "LOSS_ONLY", "AGGREGATION_MODES", "NOTES", "SCALEOUT", "AT_SCALE"]

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

available = PEER.available
unavailable = PEER.unavailable


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
    "loss[token-mean]": "level 5: tunix divides each micro-batch by its own token count "
    "(tunix/rl/common.py:554, on the global micro-batch: peft_trainer.py:352) and optax.MultiSteps averages "
    "the micro-batch gradients (peft_trainer.py:213, use_grad_mean=True): a mean of per-micro-batch token "
    "means, not the step's token mean, whenever train_micro_batch_size < mini_batch_size",
}


def _attr(mode: str) -> str:
    """A mode as an attribute of :data:`AT_SCALE`: ``token-mean`` -> ``token_mean``."""
    return mode.replace("-", "_")


#: The loss of each aggregation mode in its at-scale form, as tunix trains: ``grpo_loss_fn`` once on
#: the global micro-batch of every rank (``jax.sharding`` SPMD, :func:`~sigma_ref.conformance.scaleout.
#: spmd_loss`); the child processes import them by name.
AT_SCALE = types.SimpleNamespace(
    **{_attr(mode): spmd_loss(jax_loss(_grpo_loss(mode))) for mode in AGGREGATION_MODES}
)
_HOW = (
    "grpo_loss_fn once on the global micro-batch (jax.sharding SPMD), optax.MultiSteps' mean over the "
    "mini-batch's micro-batches"
)


def _scaleout(mode: str) -> ScaleOut:
    """tunix's training step at level 5: SPMD over ranks, ``optax.MultiSteps`` (mean) over micro-batches
    of equal size (``train_micro_batch_size`` divides ``mini_batch_size``)."""
    return ScaleOut(
        _attr(mode),
        AGGREGATION_MODES[mode],
        loss_scale="mean-over-micro-batches",
        how=_HOW,
        sizes="equal",
        loss_precision="float32",  # grpo_loss_fn casts log-probs, advantages and the loss to float32
    )


#: The level-5 column: every row's loss (the advantage rows: tunix's default mode) as tunix trains it.
SCALEOUT: dict[str, ScaleOut | str] = {
    mode: _scaleout(
        mode.removeprefix("loss[").removesuffix("]") if mode.startswith("loss[") else DEFAULT_MODE
    )
    for mode in ADAPTERS
}
NOT_APPLICABLE: dict[str, str] = {
    "gae": "tunix's gae estimator is token-level PPO with a critic's values, not a group estimator",
}
