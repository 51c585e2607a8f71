"""The :class:`Judge`: names the normaliser class of a failing split gradient, the class every probe
confirms (:func:`~.hypotheses.identify`), with the measured factor in words."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from ..._aggregation import PROMPT_MEAN
from .hypotheses import HYPOTHESES, Assign, Hypothesis, Probe, identify
from .splits import _RTOL, READINGS, readings


@dataclasses.dataclass(frozen=True)
class Judge:
    """Names the normaliser class of a failing split gradient (:func:`identify` at every probe).

    ``probe``: the designed batch (:func:`token_scores` of its tokens, the code's own full-batch
    advantages, the mask, each row's prompt, ``(tokens, responses)`` of the scopes outside the
    batch's mask); ``mode``: the aggregation its full-batch gradient matches (None: no class can be
    named); ``assign``: each configuration's rows' ranks and micro-batches.
    """

    probe: Probe
    mode: str | None
    assign: Assign
    constant: float | None = None
    #: hypothesis name -> (label, why) where the pattern has its own words (:func:`advantage_scope_labels`)
    relabel: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    #: relative tolerance of a match (the loss's working precision's: :data:`_RTOL` for float64)
    rtol: float = _RTOL

    def _found(
        self,
        runs: Mapping[tuple[int, int, str], Mapping[str, object]],
        keys: Sequence[tuple[int, int, str]],
        declared: str,
        mode: str,
    ) -> tuple[list[Hypothesis], list[tuple[int, int, str]]]:
        grads = {}
        for key in dict.fromkeys(keys):
            run = runs.get(key)
            if run is not None and run.get("grad") is not None:
                grads[key] = readings(np.asarray(run["grad"]), key[1], declared)["none"]
        found = identify(
            grads,
            self.probe,
            mode,
            assign=self.assign,
            constant=self.constant,
            candidates=HYPOTHESES[2:],
            rtol=self.rtol,
        )
        return found, list(grads)

    def _words(
        self, found: Sequence[Hypothesis], mode: str, where: Sequence[tuple[int, int, str]]
    ) -> tuple[str, str]:
        """The class's label and the message's template (``{measured}`` to fill)."""
        h = found[0]
        if h.name in self.relabel:
            label, why = self.relabel[h.name]
            h = dataclasses.replace(h, label=label, why=why)
        unit = {"token-mean": "token", PROMPT_MEAN: "prompt"}.get(mode, "response")
        probes = ", ".join(f"({w}, {m})" for w, m, _ in where)
        text = (
            f"{h.why}. Confirmed: the gradient this normaliser predicts ({mode}) equals the measured one at "
            f"every probe (W, M) = {probes}"
        )
        if len(found) > 1:
            text += f" (so does {', '.join(o.name for o in found[1:])}: these probes cannot tell them apart)"
        label = h.label.format(unit=unit)
        return label, label + ": {measured}; " + text

    def name(
        self,
        runs: Mapping[tuple[int, int, str], Mapping[str, object]],
        W: int,
        M: int,
        split: str,
        declared: str,
        c: float,
        resid: float = 0.0,
    ) -> tuple[str, str] | None:
        """The class every probe confirms and ``scaleout_gradient[W, M]``'s FAIL message naming it, or None.

        ``c``: the least-squares factor of the measured gradient against the full batch's under the
        declared reading; ``resid``: the share of the gradient it leaves (``~c`` when above 1e-6).
        """
        if self.mode is None:
            return None
        keys = [(W, M, split), (1, M, "whole-groups"), (1, M + 1, "whole-groups"), (W, 1, split)]
        found, where = self._found(runs, keys, declared, self.mode)
        if not found:
            return None
        other = READINGS[1 - READINGS.index(declared)]
        c_other = c / M if other == "mean-over-micro-batches" else c * M
        approx = "~" if resid > 1e-6 else ""
        measured = (
            f"the accumulated, rank-averaged gradient is {approx}{c:.3g}x the full-batch gradient at "
            f"W = {W}, M = {M} under loss_scale={declared!r} ({approx}{c_other:.3g}x under {other!r})"
        )
        if approx:
            measured += f"; {resid:.0%} of it is not a multiple of the full-batch gradient"
        label, template = self._words(found, self.mode, where)
        return label, template.format(measured=measured)

    def name_prediction(
        self,
        runs: Mapping[tuple[int, int, str], Mapping[str, object]],
        aggregation: str,
        declared: str,
        c: float,
    ) -> tuple[str, str] | None:
        """Why the full-batch gradient is ``c`` times the declared ``aggregation``'s prediction: the
        class (a count outside the mask the loss is applied with) that every run confirms and the
        words naming it, or None."""
        found, where = self._found(runs, list(runs), declared, aggregation)
        if not found:
            return None
        measured = f"the full-batch gradient is {c:.3g}x the {aggregation} prediction"
        label, template = self._words(found, aggregation, where)
        return label, template.format(measured=measured)
