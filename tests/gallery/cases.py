"""One record per gallery implementation: how to call it, what it claims, what it breaks.

The trainer-style galleries (``trainers_correct``, ``trainers_wrong``, ``trainers_token``)
describe each implementation with a :class:`Case`. A correct case names the preset the
suite should detect (``convention``) or, when its exact convention is not a preset,
``convention=None`` and an ``expected`` callable that states its values through the
oracle. A wrong case names what its author intended, the properties of the suite that
must fail (``breaks``) and words a correct diagnosis contains (``cause_words``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

__all__ = ["Case", "PRESET_NAMES", "LAYOUTS", "SHAPES", "ALL_DTYPES", "FULL_PRECISION", "NO_FLOAT16"]

ALL_DTYPES: tuple[str, ...] = ("float64", "float32", "bfloat16", "float16")
FULL_PRECISION: tuple[str, ...] = ("float64", "float32")
#: eps below float16's smallest subnormal (6e-8), e.g. 1e-8 or 1e-9, underflows to 0 in float16.
NO_FLOAT16: tuple[str, ...] = ("float64", "float32", "bfloat16")

#: Conventions a correct case may claim (``sigma_ref.conventions.PRESETS`` plus RLOO).
PRESET_NAMES: tuple[str, ...] = ("paper", "post", "dr_grpo", "trl", "trl_batch", "verl", "openrlhf", "rloo")

#: How the advantage function is called (``sigma_ref.conformance.adapter``); ``dict`` is the
#: ``index`` layout through the ``inputs=`` / ``output=`` hooks (a dict batch in, a dict out).
LAYOUTS: tuple[str, ...] = ("contiguous", "index", "grouped", "token", "dict", "keep-mask", "sizes")

#: What the entry is: an advantage function, a token-level one, a dict one, a loss that
#: returns ``(loss, metrics)``, a DAPO keep mask ``fn(rewards, index) -> bool[N]``.
SHAPES: tuple[str, ...] = ("advantages", "token", "dict", "loss-tuple", "keep-mask")


@dataclasses.dataclass(frozen=True)
class Case:
    """A gallery implementation.

    * ``name``: the ``__name__`` of ``fn``, ``loss`` or ``keep_mask``, so ``--impl
      tests.gallery.<module>:<name>`` names the function the case is about (loss and
      filter cases reuse a correct advantage function as ``fn``).
    * ``layout``: how ``fn`` is called; ``shape``: one of :data:`SHAPES`.
    * ``correct``: whether it correctly implements ``convention``.
    * ``source``: the trainer, file and function (with version) it is modelled on.
    * ``convention``: a name of :data:`PRESET_NAMES`, or ``None`` for a convention (correct)
      or an intent (wrong) outside the presets, then stated by ``expected``.
    * ``breaks``: properties of the suite that must fail (none for correct cases);
      ``cause_words``: words a correct diagnosis contains. ``verdict``: what a wrong case's
      property gives, ``FAIL`` (the algorithm is computed wrong) or ``WARN`` (hygiene: a
      behaviour a real trainer ships, reported with its measured effect).
    * ``loss`` / ``keep_mask``: optional loss and DAPO filter; ``aggregation``: the loss
      aggregation the loss declares (verl's names), ``aggregation_constant`` its ``C`` for
      seq-mean-token-sum-norm (``None``: the padded length T).
    * ``inputs`` / ``output``: the Adapter's call hooks (layout ``dict``); ``returns``: layout
      token, what the returns are declared to equal; ``keep_metric``: a filter's declared metric.
    * ``note``: what the code does and why it is right or wrong.
    * ``precision``: the dtype of its statistics (``"input"``: the input's; ``"float32"``:
      float32 whatever the input).
    * ``expected``: for ``convention=None``, ``expected(rewards: np.ndarray[N] float64,
      index: np.ndarray[N]) -> np.ndarray[N]``, its values through the oracle.
    * ``clip``: a declared symmetric clamp of the advantages (OpenRLHF's
      ``reward.clip_range``), or ``None``.
    * ``dtypes``: the input dtypes it declares (an :class:`~sigma_ref.conformance.Adapter`'s
      ``dtypes``): code that squares in the input dtype overflows in float16 at |R| = 1024
      and is declared for float64/float32 only, as its trainer feeds it float32 rewards;
      code adding an eps below float16's smallest subnormal (1e-8, 1e-9) in the input dtype
      gives 0/0 on silent groups in float16 and does not declare it.
    """

    name: str
    fn: Callable
    layout: str
    correct: bool
    source: str
    convention: str | None
    breaks: tuple[str, ...] = ()
    cause_words: tuple[str, ...] = ()
    loss: Callable | None = None
    keep_mask: Callable | None = None
    aggregation: str | None = None
    note: str = ""
    shape: str = "advantages"
    precision: str = "input"
    expected: Callable | None = None
    clip: float | None = None
    dtypes: tuple[str, ...] = ALL_DTYPES
    verdict: str = "FAIL"
    aggregation_constant: float | None = None
    inputs: Callable | None = None
    output: str | int | None = None
    returns: str | None = None
    keep_metric: str | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"Case {self.name!r}: layout={self.layout!r} must be one of {LAYOUTS}")
        if self.shape not in SHAPES:
            raise ValueError(f"Case {self.name!r}: shape={self.shape!r} must be one of {SHAPES}")
        if self.convention is not None and self.convention not in PRESET_NAMES:
            raise ValueError(
                f"Case {self.name!r}: convention={self.convention!r} must be one of {PRESET_NAMES}"
            )
        if self.correct and self.breaks:
            raise ValueError(f"Case {self.name!r} is correct but names properties it breaks: {self.breaks}")
        if not self.correct and not (self.breaks and self.cause_words):
            raise ValueError(f"Case {self.name!r} is wrong: name the properties it breaks and cause words")
        if self.convention is None and self.expected is None and self.shape == "advantages":
            raise ValueError(
                f"Case {self.name!r}: convention=None needs an expected(rewards, index) callable"
            )
        if self.verdict not in ("FAIL", "WARN"):
            raise ValueError(f"Case {self.name!r}: verdict={self.verdict!r} must be 'FAIL' or 'WARN'")
        if self.correct and self.verdict != "FAIL":
            raise ValueError(f"Case {self.name!r} is correct: a verdict belongs to wrong or hygiene cases")
        if self.precision not in ("input", "float32"):
            raise ValueError(f"Case {self.name!r}: precision={self.precision!r} must be 'input' or 'float32'")

    @property
    def target(self) -> str:
        """``module:attr`` for ``--impl`` (the loss for loss-only cases)."""
        named = [f for f in (self.fn, self.loss, self.keep_mask) if getattr(f, "__name__", None) == self.name]
        if not named:
            raise ValueError(f"Case {self.name!r}: no function of that name (fn, loss or keep_mask)")
        return f"{named[0].__module__}:{named[0].__name__}"
