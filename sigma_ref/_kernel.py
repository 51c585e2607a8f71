"""Private: the group-statistics kernel behind ``sigma_ref.advantages`` (see its docstring,
"Accuracy", for the three ways a group is centred and the bound; ``proofs/13_kernel.py`` proves
each).

:func:`_prepare` reads rewards into float64 values and a group layout (``sigma_ref._layouts``)
and picks the centring (:func:`_units`); :func:`_statistics` centres every group once
(:func:`_center`), scales the groups whose size needs it, and gives the per-group mean, the
standard deviation and the advantages' numerator and denominator (:class:`_Scaled`);
:func:`_fits_output` and :func:`_finite_or_raise` refuse results that do not fit the caller's
dtype. Every function here runs on numpy and torch alike.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import numpy as np

from . import _layouts, _roundtrip, _tensors, _validate
from ._layouts import Layout
from ._tensors import Array, is_tensor
from .conventions import Convention

_MAX_EXP = 1023  # 2**1023 is the largest power of two in float64
_MIN_EXP = -1022  # 2**-1022 the smallest normal one
_SAFE = 2.0**400  # groups with 2**-400 <= max|R| <= 2**400 need no scaling
_SHORT_MAX_G = 2**26  # float32 rewards: groups up to this size center unshifted (proofs/13_kernel.py)
_EXACT_UNITS = 2.0**52  # exact centering while 2 G max|R| / 2**q <= 2**53 (proofs/13_kernel.py)


def _quiet(func: Any) -> Any:
    """Run ``func`` with numpy's floating-point warnings off: overflow and 0/0 are handled
    explicitly here (scaled, masked, or raised as a named ValueError)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(all="ignore"):
            return func(*args, **kwargs)

    return wrapper


def _xp(v: Array) -> Any:
    return _tensors.torch_module() if is_tensor(v) else np


def _pow2(e: Array) -> Array:
    """``2.0**e`` as float64 for integer ``e`` in ``[-1022, 1023]``."""
    if is_tensor(e):  # from the bits (torch.ldexp goes through pow, which may round)
        torch = _tensors.torch_module()
        return ((e.to(torch.int64) + 1023) << 52).view(torch.float64)
    return np.ldexp(1.0, e)


def _sqrt(v: Array) -> Array:
    """Correctly rounded square root (torch's CPU float64 sqrt can be 1 ulp off; numpy's is not)."""
    if is_tensor(v):
        if v.device.type == "cpu":
            return _tensors.torch_module().from_numpy(np.sqrt(v.contiguous().numpy()))
        return v.sqrt()
    return np.sqrt(v)


def _int64(e: Array) -> Array:
    return e.to(_tensors.torch_module().int64) if is_tensor(e) else e.astype(np.int64)


def _zeros_int64(like: Array) -> Array:
    if is_tensor(like):
        return _tensors.torch_module().zeros_like(like, dtype=_tensors.torch_module().int64)
    return np.zeros(like.shape, dtype=np.int64)


def _clip(e: Array, lo: int, hi: int) -> Array:
    return e.clamp(lo, hi) if is_tensor(e) else np.clip(e, lo, hi)


def _times_pow2(v: Array, e: Array) -> Array:
    """``v * 2**e`` exactly (up to overflow and underflow) for any integer ``e`` of a float64."""
    first = _clip(e, _MIN_EXP, _MAX_EXP)
    out = v * _pow2(first)
    rest = e - first
    if bool((rest != 0).any()):
        out = out * _pow2(_clip(rest, _MIN_EXP, _MAX_EXP))
    return out


def _where(cond: Array, a: Any, b: Any) -> Array:
    if is_tensor(cond):
        torch = _tensors.torch_module()
        return torch.where(cond, a, b)
    return np.where(cond, a, b)


def _centering(units: float | None, largest: int) -> str:
    """How :func:`_center` centers groups of at most ``largest`` values with :func:`_units`
    ``units``: ``"exact"`` (``2 G units <= 2**53``), ``"float32"`` (float32 numbers, ``G <= 2**26``)
    or ``"general"``."""
    if units is not None and units <= _EXACT_UNITS / largest:
        return "exact"
    if units is not None and largest <= _SHORT_MAX_G:
        return "float32"
    return "general"


def _largest_group(lay: Layout) -> int:
    return lay.size if isinstance(lay, _layouts.Rows) else int(lay.sizes.max())


def _short_significands(values: Array) -> bool:
    """Every value is a float32 number (or an infinity): a significand of at most 24 bits
    and an exponent in float32's range, so ``j * v`` is exact in float64 for ``j <= 2**29``.
    Checked on a prefix first, so float64 data with long significands costs almost nothing."""
    flat = values.reshape(-1)
    for part in (flat[:256], flat):
        if is_tensor(part):
            narrow = part.to(_tensors.torch_module().float32)
        else:
            with np.errstate(over="ignore"):  # beyond float32's range: inf, unequal, False
                narrow = part.astype(np.float32)
        if not bool((narrow == part).all()):
            return False
    return True


def _units(x: Array, narrow: bool) -> float | None:
    """``max|R| / 2**q`` when every value is a finite float32 number, with ``q = e - 24`` for
    ``2**(e-1) <= min |R| < 2**e`` over the non-zero ``|R|``: every float32 number that large is
    an integer multiple of ``2**q``. ``None`` when some value is not a float32 number
    (``narrow``: the input dtype says they all are) or not finite.

    >>> _units(np.array([0.0, 0.5, 1.0]), False)  # multiples of 2**-24, the largest 2**24 of them
    16777216.0
    """
    flat = x.reshape(-1)
    if not narrow and not _short_significands(flat):
        return None
    top, low = _magnitudes(flat)
    if not math.isfinite(top):
        return None
    if top == 0:
        return 0.0
    _, e = math.frexp(low)  # low >= 2**(e - 1): every float32 number that large is a multiple of 2**(e - 24)
    return math.ldexp(top, 24 - e)


def _magnitudes(flat: Array) -> tuple[float, float]:
    """``(max |R|, min of the non-zero |R|)`` (``inf`` when there is none; ``max`` is NaN or
    inf when some value is). numpy: on the bits (``|R|`` orders as its unsigned bit pattern;
    ``bits - 1`` wraps 0 to the largest pattern, out of the minimum's way), two integer
    reductions with no mask (a masked float minimum is 20x slower on rewards with many 0s)."""
    if is_tensor(flat):
        torch = _tensors.torch_module()
        magnitude = flat.abs()
        low = torch.where(magnitude > 0, magnitude, math.inf).min()
        return float(magnitude.max()), float(low)
    width = flat.dtype.itemsize
    unsigned = np.dtype(f"u{width}")
    bits = flat.view(unsigned) & unsigned.type((1 << (8 * width - 1)) - 1)  # clear the sign bit
    top = bits.max()
    bits -= unsigned.type(1)
    least = bits.min()
    if least == np.iinfo(unsigned).max:  # every value is 0
        return float(np.array(top, dtype=unsigned).view(flat.dtype)), math.inf
    as_float = np.array([top, least + unsigned.type(1)], dtype=unsigned).view(flat.dtype).astype(np.float64)
    return float(as_float[0]), float(as_float[1])


#: Input dtypes whose values are float32 numbers (as numpy or torch names).
_SHORT_DTYPES = frozenset({"float32", "float16", "bfloat16"})


@dataclasses.dataclass(frozen=True)
class _Kernel:
    """The statistics of every group, scaled: what :func:`group_statistics` reports.

    ``centered[i] = (R_i - mu) * 2**-exponent`` per element (layout's value shape);
    per group: ``exponent`` (the group was scaled by ``2**-exponent``), ``mean`` in
    scaled units, ``squares = sum (scaled centered)**2``, ``silent``, ``singleton``, ``size``.
    """

    layout: Layout
    centered: Array
    exponent: Array
    mean: Array
    squares: Array
    silent: Array
    singleton: Array
    size: Array
    scratch: Array | None
    unscaled: bool  # exponent == 0 for every group (the common case: no scaling work)


def _center(values: Array, lay: Layout, *, owned: bool = False, units: float | None = None) -> _Kernel:
    """Center each group: exactly when its sums are exact (``units`` small enough), else in
    two passes, unshifted for float32 numbers (``units`` given), else scaled by a power of
    two and shifted by its maximum.

    ``owned``: ``values`` is a scratch copy the kernel may overwrite (the row layout's
    ``[G, B]`` copy, or a float64 conversion of the input), so the whole computation runs in
    place in one buffer. ``units``: :func:`_units` of the values (``None``: not float32
    numbers, or not finite). The three ways and why each is exact where it claims to be are
    in ``proofs/13_kernel.py``.
    """
    xp = _xp(values)
    scratch = None if isinstance(lay, _layouts.Rows) else xp.empty_like(values)
    way = _centering(units, _largest_group(lay))
    if way == "exact":
        return _center_exact(values, lay, owned, scratch)
    if way == "float32":
        # a silent group of v: every partial sum j * v (j <= 2**26) is exact, so its first mean
        # is v and it centers to exactly 0; every other group keeps a centered value >= 2**-151
        # (squares > 0), and no sum or square of float32 numbers overflows float64: silent is
        # exactly `squares == 0`, with no min, max or scaling pass
        exponent = _zeros_int64(lay.sizes)
        return _finish_centering(values, lay, None, None, exponent, None, scratch, owned, unscaled=True)
    lo, hi = lay.min(values), lay.max(values)  # NaN and inf show up here: no extra pass
    if not bool((xp.isfinite(lo) & xp.isfinite(hi)).all()):
        _validate.check_finite(values, lay, "rewards")
    silent = lo == hi
    top = xp.maximum(abs(lo), abs(hi))
    if bool((top <= _SAFE).all()) and bool(((top >= 1 / _SAFE) | silent).all()):
        # every non-silent group has 2**-400 <= max|R| <= 2**400: no square can overflow or
        # underflow (a non-silent group has a centered value >= ulp(max|R|) / 4), so no scaling
        exponent = _int64(0 * lo)
        shifted = _minus(values, lay.expand(hi, scratch), owned)
        return _finish_centering(values, lay, shifted, hi, exponent, silent, scratch, owned, unscaled=True)
    _, exponent = xp.frexp(top)  # max|R| < 2**exponent, 0 for zeros
    exponent = _int64(exponent)
    first = _clip(-exponent, _MIN_EXP, _MAX_EXP)
    scale = _pow2(first)
    extra = -exponent - first  # non-zero only for groups with max|R| < 2**-1022
    ref = hi * scale
    shifted = _times(values, lay.expand(scale, scratch), owned)
    if bool((extra != 0).any()):
        more = _pow2(extra)
        ref = ref * more
        shifted *= lay.expand(more, scratch)
    shifted -= lay.expand(ref, scratch)  # in [-2, 0]; exactly 0 where R_i is the group's maximum
    return _finish_centering(values, lay, shifted, ref, exponent, silent, scratch, owned, unscaled=False)


def _finish_centering(
    values: Array,
    lay: Layout,
    shifted: Array | None,
    ref: Array | None,
    exponent: Array,
    silent: Array | None,
    scratch: Array | None,
    owned: bool,
    *,
    unscaled: bool,
) -> _Kernel:
    """The two-pass centering of ``shifted = R * 2**-exponent - ref`` and its sum of squares.

    ``shifted=None`` (with ``ref=None``, ``silent=None``): the values themselves, unshifted
    (written in place only if ``owned``); a non-finite first mean then raises naming the
    reward, and ``silent`` is ``squares == 0``.
    """
    size = lay.sizes
    first_mean = lay.sum(values if shifted is None else shifted) / size
    if shifted is None:
        if not bool(_xp(first_mean).isfinite(first_mean).all()):  # NaN or inf: no float32 sum overflows
            _validate.check_finite(values, lay, "rewards")
        shifted = _minus(values, lay.expand(first_mean, scratch), owned)
    else:
        shifted -= lay.expand(first_mean, scratch)
    correction = lay.sum(shifted) / size
    shifted -= lay.expand(correction, scratch)
    squares = lay.sum_squares(shifted, scratch)
    mean = first_mean + correction if ref is None else ref + (first_mean + correction)
    if silent is None:
        silent = squares == 0
    return _Kernel(lay, shifted, exponent, mean, squares, silent, size == 1, size, scratch, unscaled)


def _minus(values: Array, other: Array, owned: bool) -> Array:
    """``values - other``, in ``values``'s buffer when it is ``owned``."""
    if owned:
        values -= other
        return values
    return values - other


def _times(values: Array, other: Any, owned: bool) -> Array:
    """``values * other``, in ``values``'s buffer when it is ``owned``."""
    if owned:
        values *= other
        return values
    return values * other


def _center_exact(values: Array, lay: Layout, owned: bool, scratch: Array | None) -> _Kernel:
    """Every group's ``sum R``, ``n R_i`` and ``n R_i - sum R`` are exact in float64 (integers
    of ``2**q`` below ``2**53``): ``R_i - mu = (n R_i - sum R) / n`` correctly rounded, the
    mean ``sum R / n`` correctly rounded, and a group is silent iff its centered values are all
    exactly 0 (``squares == 0``). One sum, one scale-and-subtract, one sum of squares."""
    size = lay.sizes
    total = lay.sum(values)
    mean = total / size
    if isinstance(lay, _layouts.Rows):
        count: Any = float(lay.size)
    else:  # groups of one size (the usual case) scale by a scalar, with no per-element count
        smallest, largest = float(size.min()), float(size.max())
        count = smallest if smallest == largest else None
    if count is not None and math.frexp(count)[0] == 0.5:
        # G a power of two: the mean is exact, and so is R_i - mean (its integer of
        # 2**q / G is n R_i - sum R): one subtraction
        centered = _minus(values, lay.expand(mean, scratch), owned)
    else:
        if count is None:
            count = lay.expand(size)
        centered = _times(values, count, owned)
        centered -= lay.expand(total, scratch)
        centered /= count
    squares = lay.sum_squares(centered, scratch)
    exponent = _zeros_int64(size)
    return _Kernel(lay, centered, exponent, mean, squares, squares == 0, size == 1, size, scratch, True)


def _eps_weight(
    std: Array, exponent: Array, group_exponent: Array, conv: Convention
) -> tuple[Array, Array, Array]:
    """``d = std * 2**exponent (+ or max) eps`` in original units, and the same ``d`` in the
    group's units ``2**group_exponent`` as ``(den, shift)``: ``d / 2**group_exponent = den * 2**shift``.

    ``std`` is in units of ``2**exponent``. Advantages are ``centered / (den * 2**shift)``
    (see :func:`_apply`), so neither ``d`` nor its reciprocal need to fit in float64.
    """
    xp = _xp(std)
    std_original = _times_pow2(std, exponent)
    eps = conv.eps
    eps_scaled = _times_pow2(xp.zeros_like(std) + eps, -exponent)
    if conv.eps_placement == "add":
        divisor = std_original + eps
        scaled = std + eps_scaled
    else:
        divisor = xp.maximum(std_original, xp.zeros_like(std_original) + eps)
        scaled = xp.maximum(std, eps_scaled)
    positive = scaled > 0
    fraction, power = xp.frexp(scaled)  # scaled = fraction * 2**power, fraction in [1/2, 1)
    den = _where(positive, fraction, xp.ones_like(fraction))  # 0/0 = 0: centered values are 0 there
    shift = _where(positive, _int64(power) + exponent - group_exponent, 0 * exponent)
    if eps > 0:  # eps * 2**-exponent overflowed: d is eps to within 1e-300 relative
        huge = xp.isinf(eps_scaled)
        if bool(huge.any()):
            den = _where(huge, xp.zeros_like(std) + eps, den)
            shift = _where(huge, -group_exponent, shift)
    return divisor, den, shift


def _fold(den: Array, shift: Array) -> tuple[Array, Array]:
    """``(den * 2**shift, 0)`` where that is safely in range, else ``(den, shift)`` unchanged."""
    small = abs(shift) <= 900
    folded = _where(small, _times_pow2(den, _where(small, shift, 0 * shift)), den)
    return folded, _where(small, 0 * shift, shift)


def _apply(kernel: _Kernel, centered: Array, den: Array, shift: Array | None, dtype: Any = None) -> Array:
    """``centered / (den * 2**shift)`` per element, in place on ``centered``: one division
    unless some shift is extreme; a value that overflows float64 raises. ``dtype``: a numpy
    dtype the unscaled quotient of a numpy :class:`~sigma_ref._layouts.Segments` kernel is
    written in (the output's, so the division and the conversion are one pass)."""
    lay = kernel.layout
    if shift is None:  # unscaled: |centered| <= 2**401 and d >= 2**-460, nothing can overflow
        narrower = dtype is not None and not is_tensor(centered) and dtype != centered.dtype
        if narrower and isinstance(lay, _layouts.Segments):
            out = np.empty(centered.shape, dtype=dtype)
            return np.divide(centered, lay.expand(den, kernel.scratch), out=out, casting="unsafe")
        centered /= lay.expand(den, kernel.scratch)
        return centered
    den, shift = _fold(den, shift)
    centered /= lay.expand(den, kernel.scratch)
    if bool((shift != 0).any()):
        centered = _times_pow2(centered, -lay.expand(shift))
    # |centered| <= 2 before the division: only a group with a tiny divisor can overflow
    if bool(((shift < 0) | (den < 2.0**-1000)).any()):
        return _finite_or_raise(centered, kernel, "advantages")
    return centered


@dataclasses.dataclass(frozen=True)
class _Scaled:
    """A kernel with the divisor under a convention: ``A = centered * weight`` per group."""

    kernel: _Kernel
    divisor: Array  # per group, original units (inf where it does not fit in float64)
    den: Array  # per group: d / 2**exponent = den * 2**shift
    shift: Array | None  # None: all zero (an unscaled kernel)
    convention: Convention

    @property
    def sigma(self) -> Array:
        """Population std per group, original units."""
        k = self.kernel
        return _times_pow2(_sqrt(k.squares / k.size), k.exponent)

    def centered_original(self) -> Array:
        """``R_i - mu`` per element, original units (inf where it does not fit)."""
        k = self.kernel
        return _times_pow2(k.centered, k.layout.expand(k.exponent))

    def advantages(self, dtype: Any = None) -> Array:
        """``A_i = (R_i - mu) / d`` per element, in the layout's value shape (computed in the
        kernel's buffer: call once); ``dtype`` as in :func:`_apply`."""
        k = self.kernel
        centered = k.centered
        if self.convention.singleton == "unit_std" and bool(k.singleton.any()):  # A = R / d there
            lay = k.layout  # a singleton's mean is its reward (scaled), exactly
            centered = _where(lay.expand(k.singleton), lay.expand(k.mean), centered)
        return _apply(k, centered, self.den, self.shift, dtype)


@_quiet
def _statistics(
    values: Array, lay: Layout, conv: Convention, *, owned: bool = False, units: float | str | None = "check"
) -> _Scaled:
    """The one computation behind :func:`group_statistics` and the advantages.

    ``units``: :func:`_units` of the values (``"check"`` works it out).
    """
    xp = _xp(values)
    if units == "check":
        units = _units(values, False)
    assert not isinstance(units, str)
    whole = None
    if conv.scale == "batch":  # before the groups' kernel, which may overwrite `values`
        n = int(np.prod(values.shape))
        if n - conv.ddof < 1:
            raise ValueError(
                f"rewards has {n} element(s): a batch std with ddof={conv.ddof} "
                "needs at least 2; use scale='group' or more rewards"
            )
        one = xp.ones(1, dtype=values.dtype) if not is_tensor(values) else values.new_ones(1)
        whole = _center(values.reshape(-1, 1), _layouts.Rows(1, n, one * n, (), 0, 1), units=units)
    kernel = _center(values, lay, owned=owned, units=units)
    singleton = kernel.singleton
    if conv.singleton == "error" and bool(singleton.any()):
        group = lay.first_group(singleton)
        raise ValueError(
            f"rewards has a group of size 1 ({lay.describe(group)}); GRPO needs "
            f"G >= 2 responses per prompt under convention {conv.name!r}. Sample "
            "more responses, drop the group, or use a convention with singleton='zero' "
            "or 'unit_std'"
        )
    exponent = kernel.exponent
    if kernel.unscaled and (whole is None or whole.unscaled):
        return _unscaled_statistics(kernel, whole, conv)
    if conv.scale == "none":
        divisor = xp.ones_like(kernel.squares)
        den, shift = xp.ones_like(divisor), -exponent
    elif conv.scale == "group":
        dof = kernel.size - conv.ddof
        std = _sqrt(kernel.squares / _where(dof >= 1, dof, xp.ones_like(dof)))
        divisor, den, shift = _eps_weight(std, exponent, exponent, conv)
    else:
        assert whole is not None
        std = _sqrt(whole.squares / (n - conv.ddof))
        batch_exponent = whole.exponent + xp.zeros_like(exponent)
        divisor, den, shift = _eps_weight(std + xp.zeros_like(kernel.squares), batch_exponent, exponent, conv)
    if bool(singleton.any()):
        if conv.singleton == "zero":
            den = _where(singleton, xp.ones_like(den), den)  # its centered value is 0
            shift = _where(singleton, 0 * shift, shift)
            divisor = _where(singleton, xp.ones_like(divisor), divisor)
        else:  # "unit_std": mean 0 and std 1, so A = R / (1 + eps)
            unit = conv.replace(scale="group") if conv.scale == "batch" else conv
            one = xp.ones_like(divisor)
            if unit.scale == "none":
                d_one, w_one, s_one = one, one, -exponent
            else:
                d_one, w_one, s_one = _eps_weight(one, 0 * exponent, exponent, unit)
            den = _where(singleton, w_one, den)
            shift = _where(singleton, s_one, shift)
            divisor = _where(singleton, d_one, divisor)
    return _Scaled(kernel, divisor, den, shift, conv)


def _plain_eps(std: Array, conv: Convention) -> Array:
    if conv.eps_placement == "add":
        return std + conv.eps
    return std.clamp(min=conv.eps) if is_tensor(std) else np.maximum(std, conv.eps)


def _unscaled_statistics(kernel: _Kernel, whole: _Kernel | None, conv: Convention) -> _Scaled:
    """:func:`_statistics` when no group needed scaling: ``d`` directly, one division later."""
    xp = _xp(kernel.squares)
    singleton = kernel.singleton
    if conv.scale == "none":
        divisor = xp.ones_like(kernel.squares)
    elif conv.scale == "group":
        divisor = _plain_eps(_sqrt(kernel.squares / _at_least_one(kernel.size - conv.ddof)), conv)
    else:
        assert whole is not None
        n = int(whole.size[0])
        batch = _plain_eps(_sqrt(whole.squares / (n - conv.ddof)), conv)
        divisor = batch + xp.zeros_like(kernel.squares)
    if bool(singleton.any()):
        if conv.singleton == "zero":
            divisor = _where(singleton, xp.ones_like(divisor), divisor)  # its centered value is 0
        else:  # "unit_std": mean 0 and std 1, so A = R / (1 + eps)
            one = xp.ones_like(divisor)
            d_one = one if conv.scale == "none" else _plain_eps(one, conv)
            divisor = _where(singleton, d_one, divisor)
    den = _where(divisor > 0, divisor, 1.0)  # 0/0 = 0: silent, eps = 0
    return _Scaled(kernel, divisor, den, None, conv)


def _at_least_one(v: Array) -> Array:
    return v.clamp(min=1) if is_tensor(v) else np.maximum(v, 1)


def _first_group_failing(ok: Array, kernel: _Kernel) -> str | None:
    """``None`` where ``ok`` (a boolean array in the kernel's layout) holds everywhere, else the
    description of the group of its first ``False``."""
    if bool(ok.all()):
        return None
    pos = int(_xp(ok).nonzero(~ok.reshape(-1))[0][0])
    lay = kernel.layout
    return lay.describe(lay.group_of(pos))


def _finite_or_raise(result: Array, kernel: _Kernel, what: str) -> Array:
    """``result``, or a ValueError naming the first group whose value overflows float64."""
    finite = result.isfinite() if is_tensor(result) else np.isfinite(result)
    group = _first_group_failing(finite, kernel)
    if group is None:
        return result
    raise ValueError(
        f"the {what} of {group} do not fit in float64 (|value| > "
        "1.8e308): the rewards' spread is too large. Rescale the rewards (GRPO is invariant "
        "to a positive scale; Dr. GRPO and RLOO scale with it)"
    )


#: The largest finite value of each floating dtype narrower than float64 ((2 - 2**-m) * 2**e_max).
_NARROW_MAX = {
    "float16": (2 - 2.0**-10) * 2.0**15,
    "bfloat16": (2 - 2.0**-7) * 2.0**127,
    "float32": (2 - 2.0**-23) * 2.0**127,
}


def _fits_output(adv: Array, kernel: _Kernel, backend: _roundtrip.Backend, what: str) -> Array:
    """``adv`` (the kernel's layout, float64 or the output dtype), or a ValueError naming the first
    group whose value does not fit in a floating output dtype narrower than float64 (a float16
    RLOO advantage of rewards ``[65504, -65504]`` is 131008 > 65504: never ``inf`` silently)."""
    name = str(backend.dtype).removeprefix("torch.")
    top = _NARROW_MAX.get(name)
    if top is None:
        return adv
    fits = adv.abs() <= top if is_tensor(adv) else np.abs(adv) <= top
    group = _first_group_failing(fits, kernel)
    if group is None:
        return adv
    raise ValueError(
        f"the {what} of {group} do not fit in {name} (|value| > {top:.6g}), "
        "the rewards' dtype and so the output's: pass float64 rewards, or rescale the rewards"
    )


class _Prepared(NamedTuple):
    """What :func:`_prepare` hands the kernel."""

    values: Array  # float64, in the layout's value shape
    layout: Layout
    backend: _roundtrip.Backend
    units: float | None  # _units of the input
    owned: bool  # values is a private copy (the [G, B] copy, or a float64 conversion)


def _prepare(rewards: Any, index: Any, dim: Any, *, sort: bool = True, statistics: bool = True) -> _Prepared:
    """The float64 values and their layout. ``sort=False`` for results given per reward
    (advantages, masks): the groups need not be numbered in sorted id order
    (:func:`sigma_ref._factorize.factorize`), so string ids are never sorted; errors name the same group
    either way (``first_group``). ``statistics=False``: no kernel follows (``units`` is None)."""
    x, backend = _roundtrip.as_float64(rewards, "rewards", library="auto", copy=False, convert=False)
    values, lay = _layouts.arrange(x, index, dim, "rewards", sort=sort)
    units = None
    if statistics:  # on the input as it is (half the bytes for float32), else on the float64 values
        name = str(x.dtype).removeprefix("torch.")
        floating = name.startswith(("float", "bfloat"))
        units = _units(x, name in _SHORT_DTYPES) if floating else _units(values, False)
    owned = isinstance(lay, _layouts.Rows) or values is not x  # not the caller's memory
    return _Prepared(values, lay, backend, units, owned)
