"""sigma-ref's vocabulary, each written once: a ``Literal`` type and the tuple of its values, tied by
``typing.get_args`` (as hypothesis' ``extra.array_api`` ties its ``Literal`` types to their tuples).

Every other module imports these names instead of spelling the values again;
``tests/test_vocabulary.py`` reads the package and ``spec/`` and finds no second spelling of any
tuple here. A module of names only: it imports nothing but ``typing``.

================= ===================== ==================================================
type              values                meaning
================= ===================== ==================================================
``Layout``        ``LAYOUTS``           how the suite calls a plain function (``--layout``)
``Split``         ``SPLITS``            how level 5 deals a batch to ranks
``LossScale``     ``LOSS_SCALES``       how level 5 scales a micro-batch's loss
``Aggregation``   ``AGGREGATION_MODES`` a loss's token aggregation (verl's ``loss_agg_mode``)
``TrlLossType``   ``TRL_LOSS_TYPES``    TRL's ``GRPOConfig.loss_type`` (``TRL_AGGREGATION``)
``Dtype``         ``DTYPES``            the floating dtypes an implementation may run in
``Scale``         ``SCALES``            a convention's divisor: group std, batch std, none
``Placement``     ``PLACEMENTS``        where a convention's epsilon goes: ``std + eps``, ``max``
``Singleton``     ``SINGLETONS``        what a convention does with a group of one
``Method``        ``METHODS``           the closed forms' update: GRPO's sigma, Dr. GRPO's sigma**2
``Verdict``       ``OUTCOMES``          a property's outcome; ``VERDICTS``: its finding classes
================= ===================== ==================================================

>>> LAYOUTS[:3], METHODS
(('contiguous', 'index', 'grouped'), ('grpo', 'dr_grpo'))
>>> TRL_AGGREGATION["dr_grpo"]
'seq-mean-token-sum-norm'
"""

from __future__ import annotations

from typing import Literal, TypeAlias, get_args

__all__ = [
    "AGGREGATION_MODES",
    "DTYPES",
    "LAYOUTS",
    "LOSS_SCALES",
    "METHODS",
    "OUTCOMES",
    "PLACEMENTS",
    "SCALES",
    "SINGLETONS",
    "SPLITS",
    "TRL_AGGREGATION",
    "TRL_LOSS_TYPES",
    "VERDICTS",
    "Aggregation",
    "Dtype",
    "Layout",
    "LossScale",
    "Method",
    "Placement",
    "Scale",
    "Singleton",
    "Split",
    "TrlLossType",
    "Verdict",
    "VerdictClass",
]

#: How the suite calls a plain function (``sigma_ref.conformance.Adapter.layout``).
Layout: TypeAlias = Literal["contiguous", "index", "grouped", "token", "keep-mask", "sizes"]
LAYOUTS: tuple[Layout, ...] = get_args(Layout)

#: Level 5: whole groups per rank, or groups split across ranks.
Split: TypeAlias = Literal["whole-groups", "split-groups"]
SPLITS: tuple[Split, ...] = get_args(Split)

#: Level 5: each micro-batch's loss as is, or divided by the number of micro-batches.
LossScale: TypeAlias = Literal["none", "mean-over-micro-batches"]
LOSS_SCALES: tuple[LossScale, ...] = get_args(LossScale)

#: verl 0.9.1's ``loss_agg_mode`` names (``verl.trainer.ppo.core_algos.agg_loss``).
Aggregation: TypeAlias = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum"
]
AGGREGATION_MODES: tuple[Aggregation, ...] = get_args(Aggregation)

#: ``GRPOConfig.loss_type`` values of TRL 1.16.0 (default ``dapo``).
TrlLossType: TypeAlias = Literal["dapo", "grpo", "bnpo", "dr_grpo", "luspo", "cispo", "sapo", "vespo"]
TRL_LOSS_TYPES: tuple[TrlLossType, ...] = get_args(TrlLossType)

#: TRL 1.16.0 ``GRPOConfig.loss_type`` -> verl mode. Read in ``GRPOTrainer._compute_loss``:
#: ``grpo``/``sapo``: per-sequence token mean, mean over sequences; ``bnpo``: one token mean over the
#: (local) batch; ``dr_grpo``: token sum over ``B * max_completion_length``
#: (seq-mean-token-sum-norm with constant ``max_completion_length``); ``dapo``/``cispo``/``vespo``:
#: token sum over the active tokens of the global accumulated batch (a token mean over the global
#: batch); ``luspo``: token sum per sequence, mean over sequences.
TRL_AGGREGATION: dict[str, Aggregation] = {  # keys: TRL_LOSS_TYPES (tests/test_vocabulary.py)
    "grpo": "seq-mean-token-mean",
    "sapo": "seq-mean-token-mean",
    "bnpo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "dapo": "token-mean",
    "cispo": "token-mean",
    "vespo": "token-mean",
    "luspo": "seq-mean-token-sum",
}

#: The floating dtypes an implementation may declare and the suite runs it in.
Dtype: TypeAlias = Literal["float64", "float32", "bfloat16", "float16"]
DTYPES: tuple[Dtype, ...] = get_args(Dtype)

#: A convention's divisor: the group's std, the batch's std, or none (Dr. GRPO).
Scale: TypeAlias = Literal["group", "batch", "none"]
SCALES: tuple[Scale, ...] = get_args(Scale)

#: Where a convention's epsilon goes: ``std + eps`` (add) or ``max(std, eps)`` (floor).
Placement: TypeAlias = Literal["add", "floor"]
PLACEMENTS: tuple[Placement, ...] = get_args(Placement)

#: What a convention does with a group of one: refuse it, advantage 0, or a unit std.
Singleton: TypeAlias = Literal["error", "zero", "unit_std"]
SINGLETONS: tuple[Singleton, ...] = get_args(Singleton)

#: The closed forms' update: GRPO's ``E[sigma]`` or Dr. GRPO's ``E[sigma**2]``.
Method: TypeAlias = Literal["grpo", "dr_grpo"]
METHODS: tuple[Method, ...] = get_args(Method)

#: Verdict classes: FAIL, the claimed algorithm is computed wrong; WARN, hygiene that does not
#: change training; NOTE, a fact of the convention.
VerdictClass: TypeAlias = Literal["FAIL", "WARN", "NOTE"]
VERDICTS: tuple[VerdictClass, ...] = get_args(VerdictClass)
#: A property's outcome in a run, at every level: one of :data:`VERDICTS`, ``pass``, or ``skip`` (the
#: property does not apply; the matrix renders a level whose properties all skip as ``n/a``).
Verdict: TypeAlias = Literal["pass", VerdictClass, "skip"]
OUTCOMES: tuple[Verdict, ...] = get_args(Verdict)
