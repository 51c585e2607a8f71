"""The normaliser hypotheses (:data:`HYPOTHESES`): each predicts the whole gradient a split
accumulates (:func:`hypothesis_gradient`) of the measured :class:`Probe` batch; :func:`identify`
keeps those every probe confirms.

>>> [h.name for h in HYPOTHESES[:2]]
['correct', 'correct-mean']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import torch

from ..._aggregation import PROMPT_MEAN
from ...objectives import aggregation_weights, effective_weights, prompt_mean_effective_weights
from .splits import _RTOL, _close

# ---------------------------------------------------------------------------
# the probe batch


@dataclasses.dataclass(frozen=True, eq=False)
class Probe:
    """The measured data of the designed batch the scale-out check probes (``n`` responses, ``T``
    tokens each, ``D`` policy parameters): what every predicted gradient is computed from.

    ``scores``: ``[n, T, D]``, ``grad log pi(y_it)`` of each token (:func:`token_scores`);
    ``advantages``: ``[n]``, the code's own full-batch advantage of each response; ``mask``:
    ``[n, T]``, the loss mask the batch is applied with; ``index``: ``[n]``, each row's prompt (group
    id; the ``prompt-mean`` hypotheses count per prompt; None: not given); ``counts``:
    ``{scope: (tokens, responses)}`` of the scopes outside the batch's mask (``generation``: the
    generation batch the step was drawn from; ``before-mask``: the batch before truncated responses
    were masked; None: none known).

    >>> probe = Probe(np.array([[[2.0]]]), np.array([1.0]), np.array([[1.0]]))
    >>> hypothesis_gradient(
    ...     HYPOTHESES[0], probe, "token-mean", rank=[0], micro_batch=[0], world_size=1, micro_batches=1
    ... ).tolist()
    [-2.0]
    """

    scores: npt.NDArray[np.float64]
    advantages: npt.NDArray[np.float64]
    mask: npt.NDArray[np.float64]
    index: npt.NDArray[np.int64] | None = None
    counts: Mapping[str, tuple[float, float]] | None = None


# ---------------------------------------------------------------------------
# hypotheses


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    """A normaliser pattern: a loss counting over ``scope``, times ``tau = W^world M^micro``.

    ``label``: the class as a report names it; ``why``: what the code does. The hypothesis is
    about the loss alone, so it is matched against the gradient under the reading ``none``
    (the trainer's 1/M, if any, is the reading's, :func:`readings`).

    ``scope``: ``global`` (the optimizer step's whole batch), ``rank``, ``micro-batch`` or
    ``generation`` (the generation batch of several optimizer steps). Under the reading
    ``none`` the harness adds the micro-batch gradients and DDP averages over ranks, so a loss
    computing ``s * sum_piece w(scope) l`` accumulates ``w_eff = (s / W) w(scope)``: the correct
    loss has ``s = W`` (``world = 1, micro = 0``).

    Under ``prompt-mean`` (a token mean per prompt, then a mean over the P prompts) the scope is
    that of both counts, P and each prompt's tokens, unless ``prompt_scope`` names the scope P is
    counted over (:func:`~sigma_ref.objectives.prompt_mean_effective_weights`). ``modes``: the
    aggregations the hypothesis applies to (empty: every one).

    >>> HYPOTHESES[0].name, HYPOTHESES[0].tau(2, 3)
    ('correct', 2.0)
    """

    name: str
    scope: str
    world: int
    micro: int
    label: str
    why: str
    prompt_scope: str = ""
    modes: tuple[str, ...] = ()

    def applies(self, mode: str, counts: Mapping[str, tuple[float, float]] | None) -> bool:
        """Whether the hypothesis can predict a gradient of ``mode`` (a scope outside the batch needs
        its counts; ``prompt-mean`` has none outside the batch's own mask)."""
        if self.modes and mode not in self.modes:
            return False
        if self.scope in ("global", "rank", "micro-batch"):
            return True
        return mode != PROMPT_MEAN and counts is not None and self.scope in counts

    def tau(self, world_size: int, micro_batches: int) -> float:
        """The loss's scale ``W^world M^micro``."""
        return float(world_size) ** self.world * float(micro_batches) ** self.micro


_EQUAL = "exact only when every micro-batch on every rank holds the same count"
#: The patterns the analysis can name, in order of preference when two predict the same gradient.
#: The first two are right (under the readings ``none`` and ``mean-over-micro-batches``).
HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis("correct", "global", 1, 0, "the global normaliser, times W", ""),
    Hypothesis("correct-mean", "global", 1, 1, "the global normaliser, times W and M", ""),
    Hypothesis(
        "division-twice",
        "global",
        1,
        -1,
        "accumulation division applied twice",
        "the normaliser already spans the step's micro-batches and the loss divides by M as well",
    ),
    Hypothesis(
        "no-world-size",
        "global",
        0,
        0,
        "world size not applied",
        "DDP divides by W; the loss must multiply by world_size (verl's dp_size)",
    ),
    Hypothesis(
        "micro-sum",
        "micro-batch",
        1,
        0,
        "normaliser computed per micro-batch",
        "each micro-batch is normalised by its own count (times W)",
    ),
    Hypothesis(
        "micro-mean",
        "micro-batch",
        0,
        0,
        "normaliser computed per micro-batch and averaged over micro-batches and ranks",
        "each micro-batch is normalised by its own count; with the trainer's 1/M and DDP's 1/W that is a "
        f"mean of per-micro-batch means, {_EQUAL}",
    ),
    Hypothesis(
        "micro-divided",
        "micro-batch",
        1,
        -1,
        "normaliser computed per micro-batch and divided by M in the loss",
        f"a mean of per-micro-batch means on each rank, {_EQUAL}",
    ),
    Hypothesis(
        "micro-divided-no-world-size",
        "micro-batch",
        0,
        -1,
        "normaliser computed per micro-batch and divided by M in the loss, world size not applied",
        f"a mean of per-micro-batch means over micro-batches and ranks, {_EQUAL}",
    ),
    Hypothesis(
        "rank-count",
        "rank",
        1,
        0,
        "{unit} count not gathered across ranks",
        "each rank normalises by its own shard's count; all-reduce it over process_group",
    ),
    Hypothesis(
        "rank-mean",
        "rank",
        0,
        0,
        "normaliser computed per rank and averaged over ranks",
        "a mean of per-rank means, exact only when every rank holds the same count",
    ),
    Hypothesis(
        "generation-count",
        "generation",
        1,
        0,
        "counted over the generation batch, not the optimizer step's batch",
        "with several optimizer steps per generation batch each step must be normalised by its own "
        "batch's count",
    ),
    Hypothesis(
        "count-before-mask",
        "before-mask",
        1,
        0,
        "count taken before the mask changed",
        "the normaliser counts responses or tokens the mask has since removed (truncated or filtered "
        "responses); count the mask the loss is applied with",
    ),
    Hypothesis(
        "generation-count-mean",
        "generation",
        1,
        1,
        "counted over the generation batch, not the optimizer step's batch (times M)",
        "with several optimizer steps per generation batch each step must be normalised by its own "
        "batch's count",
    ),
    Hypothesis(
        "prompt-tokens-micro-batch",
        "micro-batch",
        1,
        0,
        "prompt's tokens counted per micro-batch",
        "each prompt's token count is taken over its rows in the micro-batch, not over the optimizer "
        "step, so a prompt whose group straddles micro-batches is weighted as a whole prompt in each; "
        "count each prompt's tokens over the step (all ranks, all micro-batches: prompt_num_tokens)",
        prompt_scope="global",
        modes=(PROMPT_MEAN,),
    ),
)


def token_scores(
    theta: npt.ArrayLike, feats: npt.ArrayLike, tokens: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """``grad_theta log pi(y_it)`` of the softmax policy ``logits = feats @ theta``: ``[N, T, D]``.

    ``grad log softmax(z)_y = f_y - sum_v p_v f_v`` with ``z_v = f_v . theta``.

    >>> token_scores([0.0], [[[[1.0], [3.0]]]], [[0]]).tolist()
    [[[-1.0]]]
    """
    th = np.asarray(theta, dtype=np.float64)
    f = np.asarray(feats, dtype=np.float64)
    tok = np.asarray(tokens, dtype=np.int64)
    z = f @ th
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    chosen = np.take_along_axis(f, tok[..., None, None], axis=-2)[..., 0, :]
    out: npt.NDArray[np.float64] = chosen - np.einsum("ntv,ntvd->ntd", p, f)
    return out


def hypothesis_gradient(
    hypothesis: Hypothesis,
    probe: Probe,
    mode: str,
    *,
    rank: npt.ArrayLike,
    micro_batch: npt.ArrayLike,
    world_size: int,
    micro_batches: int,
    constant: float | None = None,
) -> npt.NDArray[np.float64]:
    """The gradient the hypothesis predicts for ``probe`` under the reading ``none``:
    ``-sum_it w_eff_it A_i s_it``.

    ``w_eff`` is :func:`~sigma_ref.objectives.effective_weights` for the hypothesis's scope and
    ``tau``; a scope counted outside the batch's final mask (``generation``: the generation
    batch; ``before-mask``: the mask before truncated responses were masked) uses
    :func:`~sigma_ref.objectives.aggregation_weights` with ``probe.counts[scope] = (tokens,
    responses)``. ``prompt-mean`` needs ``probe.index`` (each row's prompt) and uses
    :func:`~sigma_ref.objectives.prompt_mean_effective_weights`.
    """
    counts, index = probe.counts, probe.index
    m = torch.as_tensor(np.asarray(probe.mask, dtype=np.float64))
    tau = hypothesis.tau(world_size, micro_batches)
    c = constant if mode == "seq-mean-token-sum-norm" else None
    if hypothesis.modes and mode not in hypothesis.modes:
        raise ValueError(f"hypothesis {hypothesis.name!r} applies to {hypothesis.modes}, not mode={mode!r}")
    if mode == PROMPT_MEAN:
        if index is None or hypothesis.scope not in ("global", "rank", "micro-batch"):
            raise ValueError(
                f"hypothesis {hypothesis.name!r} under prompt-mean needs index= (each row's prompt) and a "
                f"scope of the batch, not {hypothesis.scope!r}"
            )
        w = prompt_mean_effective_weights(
            m,
            torch.as_tensor(np.asarray(index, dtype=np.int64)),
            rank=torch.as_tensor(np.asarray(rank, dtype=np.int64)),
            micro_batch=torch.as_tensor(np.asarray(micro_batch, dtype=np.int64)),
            world_size=world_size,
            prompts=hypothesis.prompt_scope or hypothesis.scope,  # type: ignore[arg-type]  # checked above
            tokens=hypothesis.scope,  # type: ignore[arg-type]
            loss_scale=tau,
        )
    elif hypothesis.scope not in ("global", "rank", "micro-batch"):
        if counts is None or hypothesis.scope not in counts:
            raise ValueError(
                f"scope {hypothesis.scope!r} needs counts[{hypothesis.scope!r}] = (tokens, responses)"
            )
        tok, seq = counts[hypothesis.scope]
        w = (tau / world_size) * aggregation_weights(m, mode, num_tokens=tok, num_seqs=seq, constant=c)
    else:
        w = effective_weights(
            m,
            mode,
            rank=torch.as_tensor(np.asarray(rank, dtype=np.int64)),
            micro_batch=torch.as_tensor(np.asarray(micro_batch, dtype=np.int64)),
            world_size=world_size,
            normaliser=hypothesis.scope,  # type: ignore[arg-type]  # global, rank or micro-batch here
            loss_scale=tau,
            constant=c,
        )
    adv = np.asarray(probe.advantages, dtype=np.float64)
    out: npt.NDArray[np.float64] = -np.einsum("nt,n,ntd->d", w.numpy(), adv, probe.scores)
    return out


#: ``assign(w, m, split) -> (rank of each row, micro-batch of each row)`` of one configuration.
Assign = Callable[[int, int, str], tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]


def identify(
    grads: Mapping[tuple[int, int, str], npt.ArrayLike],
    probe: Probe,
    mode: str,
    *,
    assign: Assign,
    constant: float | None = None,
    candidates: Sequence[Hypothesis] = HYPOTHESES,
    rtol: float = _RTOL,
) -> list[Hypothesis]:
    """The hypotheses whose predicted gradient of ``probe`` equals the measured one at *every*
    configuration.

    ``grads``: the measured gradient (reading ``none``) per configuration ``(w, m, split)``;
    ``assign`` gives each configuration's rows' ranks and micro-batches. The list is in the
    order of :data:`HYPOTHESES`; more than one means the probes cannot tell them apart. A scope
    outside the batch (``generation``, ``before-mask``) is tried only when ``probe.counts`` has it
    (:meth:`Hypothesis.applies`); ``prompt-mean`` needs ``probe.index``, each row's prompt.
    """
    found = []
    for h in candidates:
        if not h.applies(mode, probe.counts):
            continue
        ok = True
        for (w, m, split), g in grads.items():
            rank, micro = assign(w, m, split)
            pred = hypothesis_gradient(
                h, probe, mode, rank=rank, micro_batch=micro, world_size=w, micro_batches=m, constant=constant
            )
            if not _close(np.asarray(g, dtype=np.float64), pred, rtol):
                ok = False
                break
        if ok:
            found.append(h)
    return found
