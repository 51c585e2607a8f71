"""JAX implementations, written the way google's tunix writes them (``tunix/rl/algo_core.py``,
``tunix/rl/common.py``, 0.1.7): two correct, two with a bug. The suite reaches them through the
JAX bridge (``sigma_ref.conformance.frameworks``), detected from their code.

* :func:`grpo_advantages`: ``compute_advantages(rewards, num_generations)`` style, reshape to
  ``[-1, G]``, Bessel std (``ddof=1``) plus ``1e-6``, ``repeat`` back to ``[N]``, in at least
  float32: correct for its convention (ddof 1, eps 1e-6 added), which no preset names exactly.
* :func:`token_mean_loss`: a clipped PPO surrogate (eps 0.2) aggregated as tunix's
  ``aggregate_loss(..., "token-mean")``: ``sum(loss * mask) / max(sum(mask), 1)``: correct.
* :func:`batch_mean_advantages`: centers on the *batch* mean, divides by each group's std:
  wrong (the group-centering bug).
* :func:`padded_mean_loss`: the surrogate averaged over every position, padding included
  (``jnp.mean(per_token_loss)``): wrong.

At level 5 (``--world-size W --micro-batches M``, each rank calling the loss on its micro-batches):

* :func:`global_token_mean_loss`: token-mean with the step's token count passed in
  (``global_num_tokens``) and the ranks' average undone (``* world_size``): correct;
* :func:`token_mean_loss` is then wrong: it divides each micro-batch by its own token count, so the
  accumulated gradient is a mean of per-micro-batch means (normaliser computed per micro-batch).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def grpo_advantages(rewards: jax.Array, num_generations: int) -> jax.Array:
    """Group-relative advantages: ``(R - mean_g) / (std_g(ddof=1) + 1e-6)``, computed in at least
    float32 (tunix's rewards are float32; a float16 square overflows at |R| = 256) and returned in
    the rewards' dtype."""
    dtype = rewards.dtype
    rewards = rewards.astype(jnp.promote_types(dtype, jnp.float32))
    grouped = rewards.reshape(-1, num_generations)
    mean = grouped.mean(axis=-1)
    std = grouped.std(axis=-1, ddof=1)
    mean = mean.repeat(num_generations)
    std = std.repeat(num_generations)
    return ((rewards - mean) / (std + 1e-6)).astype(dtype)


def batch_mean_advantages(rewards: jax.Array, num_generations: int) -> jax.Array:
    """Meant GRPO's group centering; subtracts the batch mean instead (divides by the group std)."""
    grouped = rewards.reshape(-1, num_generations)
    std = grouped.std(axis=-1, ddof=1).repeat(num_generations)
    return (rewards - rewards.mean()) / (std + 1e-6)


def _surrogate(logp: jax.Array, old_logp: jax.Array, advantages: jax.Array) -> jax.Array:
    """Per-token clipped PPO loss (eps 0.2), tunix's ``grpo_loss_fn`` lines."""
    ratio = jnp.exp(jnp.clip(logp - old_logp, -20.0, 20.0))
    adv = jnp.expand_dims(advantages, 1)
    pg_loss_1 = -adv * ratio
    pg_loss_2 = -adv * jnp.clip(ratio, 1 - 0.2, 1 + 0.2)
    return jnp.maximum(pg_loss_1, pg_loss_2)


def token_mean_loss(
    logp: jax.Array, old_logp: jax.Array, advantages: jax.Array, mask: jax.Array
) -> jax.Array:
    """Clipped surrogate, token-mean over the batch's completion tokens."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    return (per_token_loss * mask).sum() / jnp.clip(mask.sum(), min=1)


def padded_mean_loss(
    logp: jax.Array, old_logp: jax.Array, advantages: jax.Array, mask: jax.Array
) -> jax.Array:
    """Meant token-mean; averages over every position, padding included."""
    return jnp.mean(_surrogate(logp, old_logp, advantages))


def global_token_mean_loss(
    logp: jax.Array,
    old_logp: jax.Array,
    advantages: jax.Array,
    mask: jax.Array,
    *,
    global_num_tokens: int,
    world_size: int,
) -> jax.Array:
    """Clipped surrogate, token-mean over the whole step: ``W sum(l * mask) / N_tok(step)`` per piece
    (the pieces add up to the step's token mean; ``W`` undoes the data-parallel average)."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    return (per_token_loss * mask).sum() / global_num_tokens * world_size
