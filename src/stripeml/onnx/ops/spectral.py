"""Fourier transforms: DFT and STFT, as contractions with constant twiddle tensors.

A discrete Fourier transform along one axis is linear in its input, so each
is one contraction ``Y[.., k, .., d] = +(X[.., n, .., c] * M[n, c, k, d])``
whose coefficients ``M`` (the cosines and sines, the inverse's ``1/N``, the
window of an STFT, padding or truncation to ``dft_length``, the Hermitian
weights of a one-sided inverse) are computed when compiling: ``c`` is the input's real/imaginary component
(one for a real signal), ``d`` the output's.  An STFT reads its frames
through the affine index ``step * f + n`` of the same contraction, so frames
are never copied.  The sums run in float64 and the result takes the signal's
type: a matrix DFT's rounding error grows with ``N`` (an FFT's with
``log N``), and float64 keeps it below the float32 result's own rounding.  The cost is ``N`` multiply-adds per output value (a
matrix DFT, not an FFT): fine for the frame lengths of audio front ends,
quadratic for long transforms.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import axis as norm_axis
from ._util import cast, indices


def _scalar_input(n: Node, i: int, what: str) -> int | None:
    got = n.const_input(i, what)
    if got is None:
        return None
    arr = np.asarray(got)
    if arr.size != 1:
        raise n.error(f"{what} must be a single value, got shape {list(arr.shape)}")
    return int(arr.reshape(-1)[0])


def twiddles(rows: int, comps: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """``M[n, c, k, d]`` (float64): the DFT of length ``length`` of a signal of
    ``rows`` samples with ``comps`` components (1 real, 2 complex), as the ONNX
    reference computes it (numpy.fft.fft, ifft, irfft; a one-sided forward
    transform keeps bins ``0 .. length // 2``)."""
    used = min(rows, length)
    if inverse and onesided:  # irfft: bins 0 .. length // 2 of a real signal's spectrum
        half = length // 2 + 1
        k = np.arange(min(rows, half))[:, None]
        t = np.arange(length)[None, :]
        theta = 2 * np.pi * k * t / length
        weight = np.full(k.shape, 2.0)
        weight[0] = 1.0
        if length % 2 == 0 and half - 1 < rows:
            weight[half - 1] = 1.0
        cos = weight * np.cos(theta) / length
        sin = weight * np.sin(theta) / length
        sin[0] = 0.0  # the imaginary part of bin 0 (and of the Nyquist bin) is ignored
        if length % 2 == 0 and half - 1 < rows:
            sin[half - 1] = 0.0
        m = np.zeros((rows, comps, length, 1))
        m[: k.shape[0], 0, :, 0] = cos
        if comps == 2:
            m[: k.shape[0], 1, :, 0] = -sin
        return m
    bins = length // 2 + 1 if (onesided and not inverse) else length
    nn = np.arange(used)[:, None]
    kk = np.arange(bins)[None, :]
    theta = 2 * np.pi * ((nn * kk) % length) / length  # the reduced angle: exact at multiples
    cos, sin = np.cos(theta), np.sin(theta)
    m = np.zeros((rows, comps, bins, 2))
    if not inverse:  # (xr + i xi)(cos - i sin)
        m[:used, 0, :, 0], m[:used, 0, :, 1] = cos, -sin
        if comps == 2:
            m[:used, 1, :, 0], m[:used, 1, :, 1] = sin, cos
    else:  # (xr + i xi)(cos + i sin) / N
        m[:used, 0, :, 0], m[:used, 0, :, 1] = cos / length, sin / length
        if comps == 2:
            m[:used, 1, :, 0], m[:used, 1, :, 1] = -sin / length, cos / length
    return m


def _signal(n: Node, x: Value) -> int:
    if x.dtype.kind != "f":
        raise n.error(f"the signal must be floating point, got {x.dtype}")
    if x.rank < 2 or x.shape[-1] not in (1, 2):
        raise n.error(
            f"the signal's last axis holds the real (1) or real and imaginary (2) parts, "
            f"got shape {list(x.shape)}"
        )
    return x.shape[-1]


@op("DFT", static=(1, 2))
def dft(b: Builder, n: Node) -> list[Value | None]:
    """DFT: forward, inverse, one-sided (irfft when inverse), dft_length; any axis but the last."""
    x = n.input(0)
    comps = _signal(n, x)
    onesided, inverse = bool(n.attr("onesided", 0)), bool(n.attr("inverse", 0))
    if n.opset >= 20:
        given = _scalar_input(n, 2, "axis")
        ax = -2 if given is None else given
    else:
        ax = int(n.attr("axis", 1))
    ax = norm_axis(n, ax, x.rank)
    if ax == x.rank - 1:
        raise n.error("the axis cannot be the last one (it holds the complex components)")
    rows = x.shape[ax]
    length = _scalar_input(n, 1, "dft_length")
    if length is None:
        length = 2 * (rows - 1) if (inverse and onesided) else rows
    if length < 1:
        raise n.error(f"dft_length must be positive, got {length}")
    if onesided and not inverse and comps == 2:
        raise n.error("a one-sided forward DFT needs a real signal")
    m = twiddles(rows, comps, length, inverse, onesided)
    x64 = _wide(b, x)
    idx = indices(x.rank)
    src = list(idx)
    src[ax], src[-1] = "n", "c"
    out = list(idx)
    out[ax], out[-1] = "k", "d"
    shape = list(x.shape)
    shape[ax], shape[-1] = m.shape[2], m.shape[3]
    coef = Value("", m.shape, m.dtype, m)
    text = (
        f"{{out}}[{', '.join(out)} : {', '.join(map(str, shape))}] = "
        f"+({b.ref(x64)}[{', '.join(src)}] * {b.ref(coef)}[n, c, k, d])"
    )
    return [_narrow(b, b.contraction(text, tuple(shape), m.dtype), x.dtype)]


@op("STFT", static=(1, 3))
def stft(b: Builder, n: Node) -> list[Value | None]:
    """STFT: frame_step, an optional window (known or computed), frame_length, one-sided."""
    x, window = n.input(0), n.opt(2)
    comps = _signal(n, x)
    if x.rank != 3:
        raise n.error(f"the signal must be [batch, length, 1 or 2], got shape {list(x.shape)}")
    step = _scalar_input(n, 1, "frame_step")
    if step is None or step < 1:
        raise n.error("frame_step must be a positive value known when compiling")
    length = _scalar_input(n, 3, "frame_length")
    if window is not None and (window.rank != 1 or window.dtype != x.dtype):
        raise n.error(
            f"the window must be a vector of {x.dtype}, got {window.dtype}{list(window.shape)}"
        )
    span = window.shape[0] if window is not None else (length or x.shape[1])
    if length is None:
        length = span
    onesided = bool(n.attr("onesided", 1))
    if onesided and comps == 2:
        raise n.error("a one-sided STFT needs a real signal")
    frames = 1 + (x.shape[1] - length) // step
    if length < 1 or frames < 1:
        raise n.error(f"frame_length {length} does not fit the signal's {x.shape[1]} samples")
    m = twiddles(span, comps, length, False, onesided)
    if window is not None and window.const is not None:
        m = m * np.asarray(window.const, np.float64)[:, None, None, None]
    coef = Value("", m.shape, m.dtype, m)
    if window is not None and window.const is None:
        w = b.ref(_wide(b, window))
        coef = b.contraction(
            f"{{out}}[n, c, k, d : {', '.join(map(str, m.shape))}] = "
            f"+({b.ref(coef)}[n, c, k, d] * {w}[n])",
            m.shape,
            m.dtype,
        )
    shape = (x.shape[0], frames, m.shape[2], 2)
    # frames past the signal's end read nothing there (zero padding, as the reference)
    text = (
        f"{{out}}[i, f, k, d : {', '.join(map(str, shape))}] = "
        f"+({b.ref(_wide(b, x))}[i, {step} * f + n, c] * {b.ref(coef)}[n, c, k, d])"
    )
    return [_narrow(b, b.contraction(text, shape, m.dtype), x.dtype)]


def _wide(b: Builder, v: Value) -> Value:
    """``v`` in float64 (the precision the transforms are summed in)."""
    if v.dtype == np.float64:
        return v
    return b.eltwise(cast(b.ref(v), np.dtype(np.float64)), v.shape, np.float64)


def _narrow(b: Builder, v: Value, dtype: np.dtype) -> Value:
    if v.dtype == dtype:
        return v
    return b.eltwise(cast(b.ref(v), dtype), v.shape, dtype)
