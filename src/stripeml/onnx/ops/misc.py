"""Assorted operators: ReverseSequence, Det and MelWeightMatrix.

* **ReverseSequence** reverses the first ``sequence_lens[b]`` steps of each
  batch entry ``b``.  The lengths are a run-time tensor, so each element's
  source step, ``t < L[b] ? L[b] - 1 - t : t``, is computed in Tile and the
  data is read through one ``gather`` of those positions from its (batch,
  time) rows flattened into one axis: no host callback, and a position is
  always inside its own batch entry's rows (a length is clamped to
  ``[0, T]`` first, as Python slicing clamps it in the reference).
* **Det** is Gaussian elimination with partial pivoting (LAPACK's ``getrf``,
  which ``numpy.linalg.det`` calls), unrolled over the matrix size (known
  when compiling): per column a max contraction finds the pivot's magnitude,
  a min contraction its first row, a ``gather`` reads that row, and one
  elementwise statement swaps it in and eliminates below it.  It runs in
  float64, as NumPy computes a float32 determinant, and rounds once to the
  input's type; a zero pivot column is skipped (the determinant is then 0).
* **MelWeightMatrix** depends only on its inputs' values, which must be known
  when compiling: the matrix is computed then, by the reference's own
  arithmetic (``onnx.reference.ops.op_mel_weight_matrix``), and is a constant.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import axis as norm_axis
from ._util import cast, checked_shape
from .shape import empty, permute, reshape

F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)


def _const(arr: np.ndarray) -> Value:
    arr = np.asarray(arr)
    return Value("", arr.shape, arr.dtype, arr)


# -- ReverseSequence -----------------------------------------------------------


@op("ReverseSequence")
def reverse_sequence(b: Builder, n: Node) -> list[Value | None]:
    """ReverseSequence: run-time or constant `sequence_lens`, any `batch_axis`/`time_axis`; a `gather`.

    Each element's source step is computed in Tile; lengths are clamped to
    the time axis as the reference's slices clamp them."""
    x, lens = n.input(0), n.input(1)
    if x.rank < 2:
        raise n.error(f"the input must have rank 2 or more, got shape {list(x.shape)}")
    bax = norm_axis(n, int(n.attr("batch_axis", 1)), x.rank, "batch_axis")
    tax = norm_axis(n, int(n.attr("time_axis", 0)), x.rank, "time_axis")
    if bax == tax:
        raise n.error(f"batch_axis and time_axis must differ, both are {bax}")
    if lens.dtype.kind not in "iu":
        raise n.error(f"sequence_lens must be integers, got {lens.dtype}")
    nb, nt = x.shape[bax], x.shape[tax]
    if lens.shape != (nb,):
        raise n.error(
            f"sequence_lens must have shape [{nb}] (the batch axis {bax} of the input "
            f"{list(x.shape)}), got {list(lens.shape)}"
        )
    e = empty(x.shape, x.dtype)
    if e is not None:
        return [e]
    # Work on (batch, time, rest...) or (time, batch, rest...): the two leading
    # axes are flattened into the one the gather reads.
    if (bax, tax) in ((0, 1), (1, 0)):
        perm = list(range(x.rank))
    else:
        perm = [bax, tax] + [a for a in range(x.rank) if a not in (bax, tax)]
    xt = permute(b, x, perm)
    batch_first = perm[0] == bax
    rest = xt.shape[2:]
    if lens.is_const:
        pos = _const(_reverse_positions(np.asarray(lens.const), nt, batch_first))
    else:
        pos = _reverse_positions_tile(b, lens, nb, nt, batch_first)
    rows = reshape(b, xt, (nb * nt, *rest))
    out = b.statement(f"{{out}} = gather({b.ref(rows)}, {b.ref(pos)}, 0)", xt.shape, x.dtype)
    inverse = [perm.index(a) for a in range(x.rank)]
    return [permute(b, out, inverse)]


def _reverse_positions(lens: np.ndarray, nt: int, batch_first: bool) -> np.ndarray:
    """The row each output row reads, for lengths known when compiling."""
    sl = lens.astype(np.int64)
    length = np.clip(np.where(sl < 0, sl + nt, sl), 0, nt)[:, None]  # (batch, 1)
    t = np.arange(nt, dtype=np.int64)[None, :]
    src = np.where(t < length, length - 1 - t, t)
    nb = len(sl)
    if batch_first:
        return src + np.arange(nb, dtype=np.int64)[:, None] * nt
    return (src * nb + np.arange(nb, dtype=np.int64)[:, None]).T.copy()


def _reverse_positions_tile(b: Builder, lens: Value, nb: int, nt: int, batch_first: bool) -> Value:
    """The row each output row reads, computed in Tile from run-time lengths."""
    shape_l = (nb, 1) if batch_first else (1, nb)
    ll = reshape(b, lens, shape_l)
    sl = cast(b.ref(ll), I64)
    clamped = b.eltwise(f"max(min({sl} < 0 ? {sl} + {nt} : {sl}, {nt}), 0)", shape_l, I64)
    t = _const(np.arange(nt, dtype=np.int64).reshape((1, nt) if batch_first else (nt, 1)))
    L, T = clamped.name, b.ref(t)
    if batch_first:
        base = _const((np.arange(nb, dtype=np.int64) * nt).reshape(nb, 1))
        expr = f"({T} < {L} ? {L} - 1 - {T} : {T}) + {b.ref(base)}"
        return b.eltwise(expr, (nb, nt), I64)
    base = _const(np.arange(nb, dtype=np.int64).reshape(1, nb))
    expr = f"({T} < {L} ? {L} - 1 - {T} : {T}) * {nb} + {b.ref(base)}"
    return b.eltwise(expr, (nt, nb), I64)


# -- Det -----------------------------------------------------------------------

#: The largest matrix Det unrolls (about 20 statements per column; compiling a 64 x 64 one for the CPU takes some seconds).
MAX_DET_SIZE = 64


@op("Det")
def det(b: Builder, n: Node) -> list[Value | None]:
    """Det: determinants of square float matrices (batched), LU with partial pivoting in float64.

    Unrolled over the columns (the size is known when compiling; at most
    ``MAX_DET_SIZE``); the result is rounded once to the input's type."""
    x = n.input(0)
    if x.dtype.kind != "f":
        raise n.error(f"the input must be a float tensor, got {x.dtype}")
    if x.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise n.error(f"the input must hold square matrices [..., M, M], got {list(x.shape)}")
    m = x.shape[-1]
    if m > MAX_DET_SIZE:
        raise n.error(f"matrices of size {m} are larger than Det unrolls (at most {MAX_DET_SIZE})")
    batch = x.shape[:-2]
    nb = int(np.prod(batch, dtype=np.int64))
    if nb == 0:
        return [empty(batch, x.dtype)]
    if m == 0:  # the empty product
        return [_const(np.ones(batch, x.dtype))]
    a = reshape(b, x, (nb, m, m))
    a = b.eltwise(cast(b.ref(a), F64), (nb, m, m), F64)
    acc: Value | None = None  # the product of the pivots so far, signed by the swaps
    for k in range(m - 1):
        a, factor = _eliminate(b, a, k, nb, m)
        acc = factor if acc is None else b.eltwise(f"{acc.name} * {factor.name}", (nb, 1), F64)
    last = b.contraction(
        f"{{out}}[q, 0 : {nb}, 1] = =({a.name}[q, {m - 1}, {m - 1}])", (nb, 1), F64
    )
    product = last.name if acc is None else f"{acc.name} * {last.name}"
    d = b.eltwise(cast(product, x.dtype), (nb, 1), x.dtype)
    return [reshape(b, d, batch)]


def _eliminate(b: Builder, a: Value, k: int, nb: int, m: int) -> tuple[Value, Value]:
    """Step ``k`` of the elimination of ``a`` (``[nb, m, m]``, float64): the
    matrix after it and the step's factor of the determinant (``[nb, 1]``: the
    pivot, negated when rows were swapped).  Rows and columns before ``k`` keep
    whatever they hold: later steps never read them."""
    A = a.name
    col = b.contraction(f"{{out}}[q, i : {nb}, {m}] = =({A}[q, i, {k}])", (nb, m), F64)
    C = col.name
    # the pivot row: the first largest |A[i, k]| of rows k..m-1 (-1 above them)
    mag = b.eltwise(f"index({C}, 1) >= {k} ? abs({C}) : -1.0", (nb, m), F64)
    top = b.contraction(f"{{out}}[q, 0 : {nb}, 1] = >({mag.name}[q, i])", (nb, 1), F64)
    first = b.eltwise(f"{mag.name} == {top.name} ? index({mag.name}, 1) : {m}", (nb, m), I64)
    low = b.contraction(f"{{out}}[q, 0 : {nb}, 1] = <({first.name}[q, i])", (nb, 1), I64)
    # no row matched (a NaN in the column): keep row k, the result is NaN anyway
    p = b.eltwise(f"{low.name} < {m} ? {low.name} : {k}", (nb, 1), I64)
    base = _const((np.arange(nb, dtype=np.int64) * m).reshape(nb))
    at = b.eltwise(f"{reshape(b, p, (nb,)).name} + {b.ref(base)}", (nb,), I64)
    rows = reshape(b, a, (nb * m, m))
    prow = b.statement(f"{{out}} = gather({rows.name}, {at.name}, 0)", (nb, m), F64)
    krow = b.contraction(f"{{out}}[q, j : {nb}, {m}] = =({A}[q, {k}, j])", (nb, m), F64)
    piv = b.contraction(f"{{out}}[q, 0 : {nb}, 1] = =({prow.name}[q, {k}])", (nb, 1), F64)
    ckk = b.contraction(f"{{out}}[q, 0 : {nb}, 1] = =({C}[q, {k}])", (nb, 1), F64)
    # column k after the swap, and each row's multiple of the pivot row to subtract
    P, V = p.name, piv.name
    swapped = f"(index({C}, 1) == {P} ? {ckk.name} : {C})"
    factor = b.eltwise(f"index({C}, 1) > {k} && {V} != 0.0 ? {swapped} / {V} : 0.0", (nb, m), F64)
    f3 = reshape(b, factor, (nb, m, 1)).name
    p3 = reshape(b, p, (nb, 1, 1)).name
    k3 = reshape(b, krow, (nb, 1, m)).name
    r3 = reshape(b, prow, (nb, 1, m)).name
    nxt = b.eltwise(f"(index({A}, 1) == {p3} ? {k3} : {A}) - {f3} * {r3}", (nb, m, m), F64)
    signed = b.eltwise(f"{P} != {k} ? -{V} : {V}", (nb, 1), F64)
    return nxt, signed


# -- MelWeightMatrix -----------------------------------------------------------


def _scalar(n: Node, i: int, what: str) -> Any:
    got = n.const_input(i, what)
    if got is None:
        raise n.error(f"input {i} ({what}) is required")
    arr = np.asarray(got)
    if arr.size != 1:
        raise n.error(f"{what} must be a single value, got shape {list(arr.shape)}")
    return arr.reshape(())[()]


@op("MelWeightMatrix", static=(0, 1, 2, 3, 4))
def mel_weight_matrix(b: Builder, n: Node) -> list[Value | None]:
    """MelWeightMatrix: a constant, computed when compiling as the reference does; `output_datatype`.

    All five inputs must be known when compiling."""
    from onnx.helper import tensor_dtype_to_np_dtype

    num_mel_bins = _scalar(n, 0, "num_mel_bins")
    dft_length = _scalar(n, 1, "dft_length")
    sample_rate = _scalar(n, 2, "sample_rate")
    lower = _scalar(n, 3, "lower_edge_hertz")
    upper = _scalar(n, 4, "upper_edge_hertz")
    for what, v in (("num_mel_bins", num_mel_bins), ("dft_length", dft_length),
                    ("sample_rate", sample_rate)):  # fmt: skip
        if np.asarray(v).dtype.kind not in "iu":
            raise n.error(f"{what} must be an integer, got {np.asarray(v).dtype}")
    for what, v in (("lower_edge_hertz", lower), ("upper_edge_hertz", upper)):
        if np.asarray(v).dtype.kind != "f":
            raise n.error(f"{what} must be a float, got {np.asarray(v).dtype}")
        if not np.isfinite(v):
            raise n.error(f"{what} must be finite, got {float(v)}")
    if num_mel_bins < 0:
        raise n.error(f"num_mel_bins must not be negative, got {int(num_mel_bins)}")
    if dft_length < 1:
        raise n.error(f"dft_length must be positive, got {int(dft_length)}")
    if sample_rate < 1:
        raise n.error(f"sample_rate must be positive, got {int(sample_rate)}")
    try:
        dtype = np.dtype(tensor_dtype_to_np_dtype(int(n.attr("output_datatype", 1))))
    except Exception:  # noqa: BLE001 - onnx's own error for an unknown element type
        raise n.error(
            f"output_datatype {n.attr('output_datatype')} is not an element type"
        ) from None
    if dtype.kind not in "fiu" and dtype.name not in ("bfloat16",):
        raise n.error(f"output_datatype {dtype} is not a numeric type")
    bins = int(dft_length) // 2 + 1
    checked_shape(n, (bins, int(num_mel_bins)), "the matrix's shape")
    try:
        matrix = _mel_matrix(num_mel_bins, dft_length, sample_rate, lower, upper)
    except IndexError:
        raise n.error(
            f"the edges {float(lower)} Hz to {float(upper)} Hz fall outside the "
            f"{bins} frequency bins of a {int(dft_length)}-point DFT at {int(sample_rate)} Hz"
        ) from None
    out = matrix.astype(dtype)
    return [Value("", out.shape, out.dtype, out)]


def _mel_matrix(
    num_mel_bins: Any,
    dft_length: Any,
    sample_rate: Any,
    lower_edge_hertz: Any,
    upper_edge_hertz: Any,
) -> np.ndarray:
    """The reference's ``MelWeightMatrix._run``, operation for operation (the
    inputs keep their NumPy types, so each step rounds as it does there), in
    float64; an edge outside the spectrum is its ``IndexError``."""
    num_spectrogram_bins = dft_length // 2 + 1
    frequency_bins = np.arange(0, num_mel_bins + 2)
    low_frequency_mel = 2595 * np.log1p(lower_edge_hertz / 700) / np.log(10)
    high_frequency_mel = 2595 * np.log1p(upper_edge_hertz / 700) / np.log(10)
    mel_step = (high_frequency_mel - low_frequency_mel) / frequency_bins.shape[0]
    frequency_bins = frequency_bins * mel_step + low_frequency_mel
    frequency_bins = 700 * np.expm1(frequency_bins / 2595 * np.log(10))
    frequency_bins = ((dft_length + 1) * frequency_bins) // sample_rate
    frequency_bins = frequency_bins.astype(int)
    output = np.zeros((int(num_spectrogram_bins), int(num_mel_bins)))
    for i in range(int(num_mel_bins)):
        lower_frequency_value = frequency_bins[i]  # left
        center_frequency_point = frequency_bins[i + 1]  # center
        higher_frequency_point = frequency_bins[i + 2]  # right
        low_to_center = center_frequency_point - lower_frequency_value
        if low_to_center == 0:
            output[center_frequency_point, i] = 1
        else:
            for j in range(lower_frequency_value, center_frequency_point + 1):
                output[j, i] = float(j - lower_frequency_value) / float(low_to_center)
        center_to_high = higher_frequency_point - center_frequency_point
        if center_to_high > 0:
            for j in range(center_frequency_point, higher_frequency_point):
                output[j, i] = float(higher_frequency_point - j) / float(center_to_high)
    return output
