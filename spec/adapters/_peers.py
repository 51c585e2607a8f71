"""Shared plumbing of the peer adapters (private): availability, lazy loading, tensors.

Every adapter module (``trl``, ``verl``, ``openrlhf``, ``areal``, ``swift``, ``skyrl``,
``unsloth``, ``post``) exposes the same four
names, which ``sigma-ref matrix`` and ``tests/test_peers.py`` read:

* ``PEER``: the :class:`Peer` it adapts (distribution name, tested release);
* ``ADAPTERS``: ``{mode: Adapter}``, one :class:`~sigma_ref.conformance.Adapter` per mode;
* ``NOT_APPLICABLE``: ``{mode: reason}``, modes the framework has but that cannot be
  driven on their own (the matrix prints them as ``n/a`` with the reason);
* ``available()`` / ``unavailable()``: whether the peer is installed, and why not;

and, optionally (the matrix reads them with ``getattr``):

* ``SCALEOUT``: ``{mode: ScaleOut | reason}``, how the level-5 column runs the mode's loss at
  W = 2, M = 2 (:class:`ScaleOut`), or why it cannot (the cell reads ``n/a: reason``);
* ``AT_SCALE``: a namespace of the losses in their at-scale form, named by ``ScaleOut.loss``;
* ``LOSS_ONLY``: modes that differ from another row only in their loss (objective variants):
  the matrix runs the loss properties on them, not the advantage ones;
* ``NOTES``: ``{mode: note}``, one sentence the matrix prints in the row's notes;
* ``OBJECTIVE_NOTES``: ``{mode: text}``, the objective cell of a mode that declares none (what
  the peer computes where the oracle has no such objective).

Importing an adapter module never imports its peer: the peer is imported on the first
call of an adapter (``functools.cache``), and a missing peer raises
:class:`PeerUnavailableError` (an ``ImportError``) naming the fix, ``make peers``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["MODULE_API", "Peer", "PeerUnavailableError", "ScaleOut", "per_token", "version_of", "lazy"]

#: The names every adapter module exposes (its ``__all__`` starts with them).
MODULE_API: tuple[str, ...] = ("PEER", "ADAPTERS", "NOT_APPLICABLE", "available", "unavailable")


class PeerUnavailableError(ImportError):
    """The peer package an adapter calls is not installed (``make peers`` installs it)."""


def version_of(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or ``None``.

    >>> version_of("torch") is not None
    True
    >>> version_of("no-such-distribution-sigma-ref") is None
    True
    """
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclasses.dataclass(frozen=True)
class Peer:
    """A peer framework: its distribution, import name and the release the adapters were written for.

    >>> p = Peer("no-such-dist", "no_such_module", "1.0")
    >>> print(p.unavailable())
    no_such_module is not installed (the adapters were written for no-such-dist 1.0; install the
    peers with `make peers`)
    """

    dist: str
    module: str
    tested: str
    title: str = ""

    @property
    def version(self) -> str | None:
        """The installed version, or ``None``."""
        return version_of(self.dist)

    def available(self) -> bool:
        """Whether the peer is installed (an adapter module's ``available = PEER.available``)."""
        return self.unavailable() is None

    def unavailable(self) -> str | None:
        """Why the peer cannot be used, or ``None`` when it is installed."""
        if importlib.util.find_spec(self.module) is None or self.version is None:
            return (
                f"{self.module} is not installed (the adapters were written for {self.dist} "
                f"{self.tested}; install the peers with `make peers`)"
            )
        return None

    def importer(self, module: str) -> Callable[[], Any]:
        """``module`` (a module of the peer), imported on the first call, after :meth:`require`: an
        adapter's handle on its peer, so that importing the adapter never imports the peer.

        >>> Peer("numpy", "numpy", "2").importer("numpy.linalg")().__name__
        'numpy.linalg'
        """

        def load() -> Any:
            self.require()
            return importlib.import_module(module)

        load.__name__ = f"import {module}"
        return lazy(load)

    def require(self) -> str:
        """The installed version; raises :class:`PeerUnavailableError` with the reason if absent."""
        reason = self.unavailable()
        if reason is not None:
            raise PeerUnavailableError(reason)
        return str(self.version)


def lazy(loader: Callable[[], Any]) -> Callable[[], Any]:
    """``loader`` run once, on first use (the peer is imported then, not at module import)."""
    cache: list[Any] = []

    def load() -> Any:
        if not cache:
            cache.append(loader())
        return cache[0]

    load.__name__ = getattr(loader, "__name__", "load")
    load.__doc__ = loader.__doc__
    return load


def per_token(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-response advantages ``[N]`` broadcast to the tokens, ``A_i * mask_it`` (``[N, T]``).

    verl and OpenRLHF take advantages per token (their trainers store them so).

    >>> per_token(torch.tensor([1.0, -2.0]), torch.tensor([[1.0, 0.0], [1.0, 1.0]])).tolist()
    [[1.0, 0.0], [-2.0, -2.0]]
    """
    return advantages.reshape(-1, 1).to(mask.dtype) * mask


@dataclasses.dataclass(frozen=True)
class ScaleOut:
    """How ``sigma-ref matrix`` runs one mode's loss at W ranks and M micro-batches (level 5).

    ``loss``: the attribute of the adapter module's ``AT_SCALE`` namespace holding the loss in
    its at-scale form, ``loss(logp, old_logp, advantages, mask, **globals)`` with the global
    counts the peer takes (:data:`sigma_ref.conformance.scaleout.GLOBALS`); the child processes
    import it as ``<module>:AT_SCALE.<loss>``. ``aggregation`` / ``constant``: the declared
    aggregation the gradient is predicted with (``constant``: the ``C`` of
    ``seq-mean-token-sum-norm``). ``loss_scale``: ``"none"`` when the peer's loss already
    accounts for the accumulation steps (verl, TRL), ``"mean-over-micro-batches"`` when the
    engine divides each micro-batch loss by them (DeepSpeed, in OpenRLHF). ``how``: the
    global information it is given, in words. ``sizes``: ``"uneven"`` (ranks and micro-batches
    hold different numbers of responses, as verl's ``use_dynamic_bsz``) or ``"equal"`` (a fixed
    per-device batch, as TRL's ``per_device_train_batch_size``). ``scaler``: the attribute of
    ``AT_SCALE`` holding the trainer's own advantage pre-scaling (``--advantage-scaler``,
    :func:`~sigma_ref.conformance.normalisers.call_advantage_scaler`), run on the optimizer step's
    mask before the loss (a token sum) gets the advantages; ``None``: the loss gets them as they are.
    ``loss_precision``: ``float64``, or ``float32`` for a peer that computes its loss (or its ratio,
    SkyRL) in float32 (tunix): the gradients are compared at that precision's tolerance
    (:data:`sigma_ref.conformance.scaleout.LOSS_PRECISION_RTOL`).

    >>> ScaleOut("dapo", "token-mean", how="num_items_in_batch").loss_scale
    'none'
    """

    loss: str
    aggregation: str | None
    constant: float | None = None
    loss_scale: str = "none"
    how: str = ""
    sizes: str = "uneven"
    scaler: str | None = None
    loss_precision: str = "float64"
