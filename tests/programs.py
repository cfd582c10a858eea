"""End-to-end Tile programs and their NumPy references.

Each :class:`Case` pairs a Tile program (DESIGN §3) with an input generator
and a reference written independently with NumPy: nothing here imports
stripeml.  References return outputs in declared order with the dtypes NumPy
promotion gives (float32 stays float32; Python scalars are weak, as in Tile).

Sizes are small on purpose: the product of all index ranges of any
contraction stays far below two million, so a slow reference interpreter runs
every case quickly.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    inputs: Callable[[np.random.Generator], Arrays]
    reference: Callable[[Arrays], tuple[np.ndarray, ...]]
    rtol: float = 1e-5
    atol: float = 1e-6

    def make_inputs(self) -> Arrays:
        """The inputs for this case, deterministic per case name."""
        return self.inputs(np.random.default_rng(zlib.crc32(self.name.encode())))


CASES: list[Case] = []


def add(
    name: str,
    source: str,
    inputs: Callable[[np.random.Generator], Arrays],
    reference: Callable[[Arrays], tuple[np.ndarray, ...]],
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    CASES.append(Case(name, source, inputs, reference, rtol, atol))


# Looser tolerances for float32 reductions (summation order is the compiler's choice).
SUM32 = {"rtol": 1e-4, "atol": 1e-5}
F64 = {"rtol": 1e-12, "atol": 1e-12}


def f32(rng: np.random.Generator, *shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(np.float32)


def f64(rng: np.random.Generator, *shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(np.float64)


def ints(rng: np.random.Generator, dtype, *shape: int, lo: int = -5, hi: int = 5) -> np.ndarray:
    """Integers in ``[lo, hi]``."""
    return rng.integers(lo, hi + 1, shape).astype(dtype)


# --------------------------------------------------------------------------
# NumPy building blocks (vectorised; the self-check compares them with loops)
# --------------------------------------------------------------------------


def conv_nd(
    x: np.ndarray, k: np.ndarray, stride: int = 1, dilation: int = 1, pad: int = 0, out=None
) -> np.ndarray:
    """Channels-last convolution: ``x[n, *spatial, ci]``, ``k[*kspatial, ci, co]``.

    ``pad`` zeros are added before each spatial axis (and enough after it);
    ``out`` gives the output spatial sizes (default: the "valid" size).
    """
    nsp = x.ndim - 2
    ks = k.shape[:nsp]
    if out is None:
        out = tuple(
            (x.shape[1 + d] + pad - dilation * (ks[d] - 1) - 1) // stride + 1 for d in range(nsp)
        )
    need = [(out[d] - 1) * stride + dilation * (ks[d] - 1) + 1 for d in range(nsp)]
    widths = (
        [(0, 0)] + [(pad, max(0, need[d] - pad - x.shape[1 + d])) for d in range(nsp)] + [(0, 0)]
    )
    xp = np.pad(x, widths)
    acc = np.zeros((x.shape[0], *out, k.shape[-1]), dtype=np.result_type(x, k))
    for kpos in np.ndindex(*ks):
        sl = tuple(
            slice(kpos[d] * dilation, kpos[d] * dilation + (out[d] - 1) * stride + 1, stride)
            for d in range(nsp)
        )
        patch = xp[(slice(None), *sl, slice(None))]
        acc += np.tensordot(patch, k[kpos], axes=([patch.ndim - 1], [0])).astype(acc.dtype)
    return acc


def softmax_rows(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------
# Matrix products
# --------------------------------------------------------------------------

MATMUL = """
function (A[M, K], B[K, N]) -> (C) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
}
"""

add(
    "matmul_square",
    MATMUL,
    lambda rng: {"A": f32(rng, 8, 8), "B": f32(rng, 8, 8)},
    lambda a: (a["A"] @ a["B"],),
    **SUM32,
)
add(
    "matmul_nonsquare_odd",
    MATMUL,
    lambda rng: {"A": f32(rng, 7, 5), "B": f32(rng, 5, 3)},
    lambda a: (a["A"] @ a["B"],),
    **SUM32,
)
add(
    "matmul_f64",
    MATMUL,
    lambda rng: {"A": f64(rng, 9, 13), "B": f64(rng, 13, 6)},
    lambda a: (a["A"] @ a["B"],),
    **F64,
)
add(
    "matmul_int32",
    MATMUL,
    lambda rng: {"A": ints(rng, np.int32, 6, 7), "B": ints(rng, np.int32, 7, 5)},
    lambda a: (a["A"] @ a["B"],),
)
add(
    "matmul_vector_rows_1",
    MATMUL,
    lambda rng: {"A": f32(rng, 1, 9), "B": f32(rng, 9, 1)},
    lambda a: (a["A"] @ a["B"],),
    **SUM32,
)
add(
    "batched_matmul",
    """
function (X[BT, M, K], Y[BT, K, N]) -> (Z) {
    Z[b, m, n : BT, M, N] = +(X[b, m, k] * Y[b, k, n]);
}
""",
    lambda rng: {"X": f32(rng, 3, 4, 6), "Y": f32(rng, 3, 6, 5)},
    lambda a: (np.matmul(a["X"], a["Y"]),),
    **SUM32,
)
add(
    "matvec",
    """
function (A[M, K], V[K]) -> (O) {
    O[m : M] = +(A[m, k] * V[k]);
}
""",
    lambda rng: {"A": f32(rng, 6, 11), "V": f32(rng, 11)},
    lambda a: (a["A"] @ a["V"],),
    **SUM32,
)
add(
    "dot_rank0",
    """
function (A[N], B[N]) -> (O) {
    O[] = +(A[i] * B[i]);
}
""",
    lambda rng: {"A": f32(rng, 13), "B": f32(rng, 13)},
    lambda a: (np.asarray(np.dot(a["A"], a["B"]), dtype=np.float32),),
    **SUM32,
)
add(
    "dot_len1",
    """
function (A[N], B[N]) -> (O) {
    O[0 : 1] = +(A[i] * B[i]);
}
""",
    lambda rng: {"A": f32(rng, 10), "B": f32(rng, 10)},
    lambda a: (np.array([np.dot(a["A"], a["B"])], dtype=np.float32),),
    **SUM32,
)
add(
    "outer_product",
    """
function (A[N], B[M]) -> (O) {
    O[i, j : N, M] = =(A[i] * B[j]);
}
""",
    lambda rng: {"A": f32(rng, 5), "B": f32(rng, 7)},
    lambda a: (np.outer(a["A"], a["B"]),),
)
add(
    "sum_of_squares_then_sqrt",
    """
function (X[N, M]) -> (R) {
    Q[i : N] = +(X[i, j] * X[i, j]);
    R = sqrt(Q);
}
""",
    lambda rng: {"X": f32(rng, 5, 8)},
    lambda a: (np.sqrt((a["X"] * a["X"]).sum(axis=1)),),
    **SUM32,
)
add(
    "trace_and_diagonal",
    """
function (A[N, N]) -> (T, D) {
    T[] = +(A[i, i]);
    D[i : N] = =(A[i, i]);
}
""",
    lambda rng: {"A": f32(rng, 6, 6)},
    lambda a: (np.asarray(np.trace(a["A"]), dtype=np.float32), np.diagonal(a["A"]).copy()),
    **SUM32,
)

# --------------------------------------------------------------------------
# Convolutions (channels last)
# --------------------------------------------------------------------------

add(
    "conv1d_valid",
    """
function (I[N, X, CI], K[KX, CI, CO]) -> (O) {
    O[n, x, co : N, X - KX + 1, CO] = +(I[n, x + kx, ci] * K[kx, ci, co]);
}
""",
    lambda rng: {"I": f32(rng, 2, 10, 3), "K": f32(rng, 3, 3, 4)},
    lambda a: (conv_nd(a["I"], a["K"]),),
    **SUM32,
)
add(
    "conv1d_dilated",
    """
function (I[N, X, CI], K[T, CI, CO]) -> (O) {
    O[n, x, co : N, X - 2 * (T - 1), CO] = +(I[n, x + 2 * t, ci] * K[t, ci, co]);
}
""",
    lambda rng: {"I": f32(rng, 2, 11, 3), "K": f32(rng, 3, 3, 2)},
    lambda a: (conv_nd(a["I"], a["K"], dilation=2),),
    **SUM32,
)
add(
    "conv1d_stride2_same_pad",
    """
function (I[N, X, CI], K[KX, CI, CO]) -> (O) {
    O[n, x, co : N, (X - 1) / 2 + 1, CO] = +(I[n, 2 * x + kx - 1, ci] * K[kx, ci, co]);
}
""",
    lambda rng: {"I": f32(rng, 2, 9, 3), "K": f32(rng, 3, 3, 4)},
    lambda a: (conv_nd(a["I"], a["K"], stride=2, pad=1, out=((9 - 1) // 2 + 1,)),),
    **SUM32,
)
add(
    "conv2d_valid",
    """
function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X - KX + 1, Y - KY + 1, CO] = +(I[n, x + kx, y + ky, ci] * K[kx, ky, ci, co]);
}
""",
    lambda rng: {"I": f32(rng, 2, 6, 5, 3), "K": f32(rng, 3, 2, 3, 4)},
    lambda a: (conv_nd(a["I"], a["K"]),),
    **SUM32,
)
add(
    "conv2d_same_pad",
    """
function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * K[kx, ky, ci, co]);
}
""",
    lambda rng: {"I": f32(rng, 2, 5, 6, 3), "K": f32(rng, 3, 3, 3, 2)},
    lambda a: (conv_nd(a["I"], a["K"], pad=1, out=(5, 6)),),
    **SUM32,
)
add(
    "conv2d_stride2",
    """
function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, (X - KX) / 2 + 1, (Y - KY) / 2 + 1, CO] =
        +(I[n, 2 * x + kx, 2 * y + ky, ci] * K[kx, ky, ci, co]);
}
""",
    lambda rng: {"I": f32(rng, 2, 7, 8, 3), "K": f32(rng, 3, 3, 3, 4)},
    lambda a: (conv_nd(a["I"], a["K"], stride=2),),
    **SUM32,
)
add(
    "conv2d_dilated",
    """
function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X - 2 * (KX - 1), Y - 2 * (KY - 1), CO] =
        +(I[n, x + 2 * kx, y + 2 * ky, ci] * K[kx, ky, ci, co]);
}
""",
    lambda rng: {"I": f32(rng, 1, 8, 7, 2), "K": f32(rng, 3, 2, 2, 3)},
    lambda a: (conv_nd(a["I"], a["K"], dilation=2),),
    **SUM32,
)


def _depthwise(a: Arrays) -> tuple[np.ndarray, ...]:
    x, k = a["I"], a["K"]
    kx, ky, c = k.shape
    # A depthwise conv is a grouped conv with one input channel per group:
    # a dense conv with a block-diagonal kernel.
    dense = np.zeros((kx, ky, c, c), dtype=k.dtype)
    for ch in range(c):
        dense[:, :, ch, ch] = k[:, :, ch]
    return (conv_nd(x, dense),)


add(
    "depthwise_conv2d",
    """
function (I[N, X, Y, C], K[KX, KY, C]) -> (O) {
    O[n, x, y, c : N, X - KX + 1, Y - KY + 1, C] = +(I[n, x + kx, y + ky, c] * K[kx, ky, c]);
}
""",
    lambda rng: {"I": f32(rng, 2, 6, 6, 3), "K": f32(rng, 3, 3, 3)},
    _depthwise,
    **SUM32,
)

# --------------------------------------------------------------------------
# Pooling and reductions
# --------------------------------------------------------------------------


def _pool2(x: np.ndarray, how: str) -> np.ndarray:
    h, w = (x.shape[0] // 2) * 2, (x.shape[1] // 2) * 2
    blocks = x[:h, :w].reshape(h // 2, 2, w // 2, 2)
    return getattr(blocks, how)(axis=(1, 3))


add(
    "maxpool_2x2_odd",
    """
function (I[X, Y]) -> (O) {
    O[x, y : X / 2, Y / 2] = >(I[2 * x + i, 2 * y + j]), i < 2, j < 2;
}
""",
    # Shifted negative: the max of an all-negative window must not be 0.
    lambda rng: {"I": f32(rng, 7, 6, lo=-3.0, hi=-0.5)},
    lambda a: (_pool2(a["I"], "max"),),
)
add(
    "avgpool_2x2",
    """
function (I[X, Y]) -> (O) {
    S[x, y : X / 2, Y / 2] = +(I[2 * x + i, 2 * y + j]), i < 2, j < 2;
    O = S / 4;
}
""",
    lambda rng: {"I": f32(rng, 8, 6)},
    lambda a: (_pool2(a["I"], "sum") / 4,),
    **SUM32,
)
add(
    "minpool_1d_stride3",
    """
function (I[X]) -> (O) {
    O[x : X / 3] = <(I[3 * x + i]), i < 3;
}
""",
    lambda rng: {"I": f32(rng, 11, lo=0.5, hi=3.0)},
    lambda a: (a["I"][:9].reshape(3, 3).min(axis=1),),
)
add(
    "global_avg_pool",
    """
function (I[N, X, Y, C]) -> (O) {
    S[n, c : N, C] = +(I[n, x, y, c]);
    O = S / (X * Y);
}
""",
    lambda rng: {"I": f32(rng, 2, 5, 4, 3)},
    lambda a: (a["I"].sum(axis=(1, 2)) / (5 * 4),),
    **SUM32,
)
add(
    "mean_dim_constant",
    """
function (X[N, K]) -> (O) {
    S[n : N] = +(X[n, k]);
    O = S / K;
}
""",
    lambda rng: {"X": f32(rng, 4, 9)},
    lambda a: (a["X"].sum(axis=1) / 9,),
    **SUM32,
)
add(
    "reduce_3d_two_axes",
    """
function (X[P, Q, R]) -> (O) {
    O[j : Q] = +(X[i, j, k]);
}
""",
    lambda rng: {"X": f32(rng, 4, 5, 6)},
    lambda a: (a["X"].sum(axis=(0, 2)),),
    **SUM32,
)
add(
    "cumsum",
    """
function (I[N]) -> (O) {
    O[i : N] = +(I[k]), i - k < N;
}
""",
    lambda rng: {"I": f32(rng, 12)},
    lambda a: (np.cumsum(a["I"]),),
    **SUM32,
)
add(
    "prod_aggregation",
    """
function (I[N, K]) -> (O) {
    O[i : N] = *(I[i, k]);
}
""",
    lambda rng: {"I": f32(rng, 5, 6, lo=0.7, hi=1.3)},
    lambda a: (np.prod(a["I"], axis=1),),
    **SUM32,
)
add(
    "min_aggregation",
    """
function (I[N, K]) -> (O) {
    O[i : N] = <(I[i, k]);
}
""",
    # All positive: the min must not be 0.
    lambda rng: {"I": f32(rng, 5, 7, lo=0.5, hi=4.0)},
    lambda a: (a["I"].min(axis=1),),
)
add(
    "max_aggregation_negative",
    """
function (I[N, K]) -> (O) {
    O[i : N] = >(I[i, k]);
}
""",
    lambda rng: {"I": f32(rng, 5, 7, lo=-4.0, hi=-0.5)},
    lambda a: (a["I"].max(axis=1),),
)
add(
    "int32_row_sum",
    """
function (A[N, K]) -> (O) {
    O[i : N] = +(A[i, k]);
}
""",
    lambda rng: {"A": ints(rng, np.int32, 6, 9, lo=-100, hi=100)},
    lambda a: (a["A"].sum(axis=1, dtype=np.int32),),
)
add(
    "int64_dot_large",
    """
function (A[N], B[N]) -> (O) {
    O[] = +(A[i] * B[i]);
}
""",
    # Products near 1e12: needs 64-bit accumulation.
    lambda rng: {
        "A": ints(rng, np.int64, 9, lo=-1_000_000, hi=1_000_000),
        "B": ints(rng, np.int64, 9, lo=-1_000_000, hi=1_000_000),
    },
    lambda a: (np.asarray(np.dot(a["A"], a["B"]), dtype=np.int64),),
)

# --------------------------------------------------------------------------
# Softmax family, normalisation, a whole layer
# --------------------------------------------------------------------------

add(
    "softmax",
    """
function (X[N, K]) -> (O) {
    M[n, 0 : N, 1] = >(X[n, k]);
    E = exp(X - M);
    S[n, 0 : N, 1] = +(E[n, k]);
    O = E / S;
}
""",
    lambda rng: {"X": f32(rng, 4, 7, lo=-3.0, hi=3.0)},
    lambda a: (softmax_rows(a["X"]),),
    **SUM32,
)
add(
    "log_softmax",
    """
function (X[N, K]) -> (O) {
    M[n, 0 : N, 1] = >(X[n, k]);
    E = exp(X - M);
    S[n, 0 : N, 1] = +(E[n, k]);
    O = X - M - log(S);
}
""",
    lambda rng: {"X": f32(rng, 3, 8, lo=-3.0, hi=3.0)},
    lambda a: (np.log(softmax_rows(a["X"])),),
    **SUM32,
)


def _layernorm(a: Arrays) -> tuple[np.ndarray, ...]:
    x = a["X"]
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (a["G"] * (x - mu) / np.sqrt(var + 1e-5) + a["B"],)


add(
    "layernorm",
    """
function (X[N, K], G[K], B[K]) -> (O) {
    S[n, 0 : N, 1] = +(X[n, k]);
    Mu = S / K;
    D = X - Mu;
    Q[n, 0 : N, 1] = +(D[n, k] * D[n, k]);
    Var = Q / K;
    O = G * D / sqrt(Var + 0.00001) + B;
}
""",
    lambda rng: {"X": f32(rng, 4, 10, lo=-2.0, hi=2.0), "G": f32(rng, 10), "B": f32(rng, 10)},
    _layernorm,
    rtol=1e-4,
    atol=1e-4,
)


def _mlp(a: Arrays) -> tuple[np.ndarray, ...]:
    h = np.maximum(a["X"] @ a["W1"] + a["B1"], 0)
    return (softmax_rows(h @ a["W2"] + a["B2"]),)


add(
    "mlp_10_statements",
    """
function (X[N, K], W1[K, H], B1[H], W2[H, C], B2[C]) -> (P) {
    Z1[n, h : N, H] = +(X[n, k] * W1[k, h]);
    A1 = Z1 + B1;
    R1 = relu(A1);
    Z2[n, c : N, C] = +(R1[n, h] * W2[h, c]);
    L = Z2 + B2;
    M[n, 0 : N, 1] = >(L[n, c]);
    Sh = L - M;
    E = exp(Sh);
    S[n, 0 : N, 1] = +(E[n, c]);
    P = E / S;
}
""",
    lambda rng: {
        "X": f32(rng, 3, 6),
        "W1": f32(rng, 6, 8),
        "B1": f32(rng, 8),
        "W2": f32(rng, 8, 5),
        "B2": f32(rng, 5),
    },
    _mlp,
    **SUM32,
)

# --------------------------------------------------------------------------
# Data movement with `=`, unreached elements, default
# --------------------------------------------------------------------------

add(
    "transpose",
    """
function (I[M, N]) -> (O) {
    O[n, m : N, M] = =(I[m, n]);
}
""",
    lambda rng: {"I": f32(rng, 4, 7)},
    lambda a: (a["I"].T.copy(),),
)
add(
    "strided_slice_odd_positions",
    """
function (I[N]) -> (O) {
    O[i : N / 2] = =(I[2 * i + 1]);
}
""",
    lambda rng: {"I": f32(rng, 9)},
    lambda a: (a["I"][1::2][: 9 // 2].copy(),),
)
add(
    "reverse",
    """
function (I[N]) -> (O) {
    O[i : N] = =(I[N - 1 - i]);
}
""",
    lambda rng: {"I": f32(rng, 8)},
    lambda a: (a["I"][::-1].copy(),),
)
add(
    "broadcast_by_contraction",
    """
function (V[M]) -> (O) {
    O[i, j : 3, M] = =(V[j]);
}
""",
    lambda rng: {"V": f32(rng, 5)},
    lambda a: (np.tile(a["V"], (3, 1)),),
)


def _spread(a: Arrays) -> np.ndarray:
    out = np.zeros(2 * a["I"].shape[0], dtype=a["I"].dtype)
    out[0::2] = a["I"]
    return out


add(
    "unreached_elements_zero",
    """
function (I[N]) -> (O) {
    O[2 * i : 2 * N] = =(I[i]);
}
""",
    lambda rng: {"I": f32(rng, 6, lo=1.0, hi=2.0)},
    lambda a: (_spread(a),),
)


def _spread_default(a: Arrays) -> tuple[np.ndarray, ...]:
    out = a["D"].copy()
    out[0::2] = a["I"]
    return (out,)


add(
    "default_tensor",
    """
function (I[N], D[M]) -> (O) {
    O[2 * i : 2 * N] = =(I[i]), default D;
}
""",
    lambda rng: {"I": f32(rng, 6, lo=1.0, hi=2.0), "D": f32(rng, 12, lo=-2.0, hi=-1.0)},
    _spread_default,
)


def _shifted_sum(a: Arrays) -> tuple[np.ndarray, ...]:
    x = a["I"]
    out = np.zeros(x.shape[0] + 3, dtype=x.dtype)
    out[2 : 2 + x.shape[0]] = x.sum(axis=1)
    return (out,)


add(
    "shifted_sum_unreached_ends",
    """
function (I[N, K]) -> (O) {
    O[i + 2 : N + 3] = +(I[i, k]);
}
""",
    lambda rng: {"I": f32(rng, 5, 4, lo=0.5, hi=1.5)},
    _shifted_sum,
    **SUM32,
)

# --------------------------------------------------------------------------
# Combinations
# --------------------------------------------------------------------------

add(
    "combo_add",
    """
function (A[N], B[M]) -> (O) {
    O[i : N] = +(A[i] + B[j]);
}
""",
    lambda rng: {"A": f32(rng, 5), "B": f32(rng, 7)},
    lambda a: (a["A"] * 7 + a["B"].sum(),),
    **SUM32,
)
add(
    "combo_eq_bool",
    """
function (A[N], B[M]) -> (O) {
    O[i, j : N, M] = =(A[i] == B[j]);
}
""",
    lambda rng: {"A": ints(rng, np.int32, 6, lo=0, hi=3), "B": ints(rng, np.int32, 5, lo=0, hi=3)},
    lambda a: (a["A"][:, None] == a["B"][None, :],),
)
add(
    "cond_one_hot_select",
    """
function (L[N], R[C], V[C]) -> (O) {
    O[i, c : N, C] = =(L[i] == R[c] ? (V[c]));
}
""",
    lambda rng: {
        "L": ints(rng, np.int32, 7, lo=0, hi=4),
        "R": np.arange(5, dtype=np.int32),
        "V": f32(rng, 5, lo=1.0, hi=2.0),
    },
    lambda a: (np.where(a["L"][:, None] == a["R"][None, :], a["V"][None, :], np.float32(0)),),
)
add(
    "cond_gather_sum",
    """
function (L[N], J[K], V[K]) -> (O) {
    O[i : N] = +(L[i] == J[k] ? (V[k]));
}
""",
    lambda rng: {
        "L": ints(rng, np.int32, 6, lo=0, hi=4),
        "J": ints(rng, np.int32, 9, lo=0, hi=3),
        "V": f32(rng, 9),
    },
    lambda a: (
        np.where(a["L"][:, None] == a["J"][None, :], a["V"][None, :], np.float32(0)).sum(axis=1),
    ),
    **SUM32,
)

# --------------------------------------------------------------------------
# Elementwise: broadcasting, weak scalars, ternary, comparisons
# --------------------------------------------------------------------------


def _weak(a: Arrays) -> tuple[np.ndarray, ...]:
    out = a["X"] * 0.5 + 1
    assert out.dtype == np.float32
    return (out,)


add(
    "weak_scalar_literal_f32",
    """
function (X[N, M]) -> (O) {
    O = X * 0.5 + 1;
}
""",
    lambda rng: {"X": f32(rng, 3, 4)},
    _weak,
)
add(
    "broadcast_rank0_input",
    """
function (X[N, M], S) -> (O) {
    O = X * S;
}
""",
    lambda rng: {"X": f32(rng, 3, 4), "S": np.array(0.75, dtype=np.float32)},
    lambda a: (a["X"] * a["S"],),
)
add(
    "broadcast_col_row",
    """
function (A[N, 1], B[1, M]) -> (O) {
    O = A - B;
}
""",
    lambda rng: {"A": f32(rng, 4, 1), "B": f32(rng, 1, 6)},
    lambda a: (a["A"] - a["B"],),
)
add(
    "broadcast_rank_promotion",
    """
function (X[N, M], V[M]) -> (O) {
    O = X + V;
}
""",
    lambda rng: {"X": f32(rng, 3, 5), "V": f32(rng, 5)},
    lambda a: (a["X"] + a["V"],),
)
add(
    "ternary_leaky_relu",
    """
function (X[N, M]) -> (O) {
    O = X > 0 ? X : 0.1 * X;
}
""",
    lambda rng: {"X": f32(rng, 4, 6)},
    lambda a: (np.where(a["X"] > 0, a["X"], 0.1 * a["X"]),),
)
add(
    "unary_minus_and_square",
    """
function (X[N]) -> (O) {
    O = -X + X * X;
}
""",
    lambda rng: {"X": f32(rng, 7)},
    lambda a: (-a["X"] + a["X"] * a["X"],),
)
add(
    "comparisons_bool",
    """
function (A[N], B[N]) -> (LT, GT, LE, GE, EQ, NE) {
    LT = A < B;
    GT = A > B;
    LE = A <= B;
    GE = A >= B;
    EQ = A == B;
    NE = A != B;
}
""",
    lambda rng: {
        "A": ints(rng, np.int32, 12, lo=0, hi=3),
        "B": ints(rng, np.int32, 12, lo=0, hi=3),
    },
    lambda a: (
        a["A"] < a["B"],
        a["A"] > a["B"],
        a["A"] <= a["B"],
        a["A"] >= a["B"],
        a["A"] == a["B"],
        a["A"] != a["B"],
    ),
)
add(
    "bool_input_select",
    """
function (C[N], A[N], B[N]) -> (O) {
    O = C ? A : B;
}
""",
    lambda rng: {"C": rng.integers(0, 2, 8).astype(bool), "A": f32(rng, 8), "B": f32(rng, 8)},
    lambda a: (np.where(a["C"], a["A"], a["B"]),),
)

# --------------------------------------------------------------------------
# Functions (one case each, on domains where they are defined)
# --------------------------------------------------------------------------

UNARY = """
function (X[N, M]) -> (O) {
    O = FN(X);
}
"""

for _fn, _ref, _lo, _hi in [
    ("exp", np.exp, -3.0, 3.0),
    ("log", np.log, 0.1, 5.0),
    ("sqrt", np.sqrt, 0.0, 5.0),
    ("tanh", np.tanh, -3.0, 3.0),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), -5.0, 5.0),
    ("sin", np.sin, -4.0, 4.0),
    ("cos", np.cos, -4.0, 4.0),
    ("abs", np.abs, -3.0, 3.0),
    ("relu", lambda x: np.maximum(x, 0), -3.0, 3.0),
    ("floor", np.floor, -3.0, 3.0),
    ("ceil", np.ceil, -3.0, 3.0),
]:
    add(
        f"fn_{_fn}",
        UNARY.replace("FN", _fn),
        lambda rng, lo=_lo, hi=_hi: {"X": f32(rng, 4, 5, lo=lo, hi=hi)},
        lambda a, ref=_ref: (ref(a["X"]),),
    )

BINARY = """
function (X[N, M], Y[N, M]) -> (O) {
    O = FN(X, Y);
}
"""

add(
    "fn_pow",
    BINARY.replace("FN", "pow"),
    lambda rng: {"X": f32(rng, 4, 5, lo=0.5, hi=2.0), "Y": f32(rng, 4, 5, lo=-2.0, hi=2.0)},
    lambda a: (np.power(a["X"], a["Y"]),),
)
add(
    "fn_max",
    BINARY.replace("FN", "max"),
    lambda rng: {"X": f32(rng, 4, 5), "Y": f32(rng, 4, 5)},
    lambda a: (np.maximum(a["X"], a["Y"]),),
)
add(
    "fn_min",
    BINARY.replace("FN", "min"),
    lambda rng: {"X": f32(rng, 4, 5), "Y": f32(rng, 4, 5)},
    lambda a: (np.minimum(a["X"], a["Y"]),),
)

# --------------------------------------------------------------------------
# Casts and integer / float64 programs
# --------------------------------------------------------------------------

add(
    "cast_as_float64",
    """
function (A[N]) -> (O) {
    O = as_float(A, 64);
}
""",
    lambda rng: {"A": ints(rng, np.int32, 9, lo=-1000, hi=1000)},
    lambda a: (a["A"].astype(np.float64),),
)
add(
    "cast_as_int32_truncates",
    """
function (X[N]) -> (O) {
    O = as_int(X, 32);
}
""",
    lambda rng: {"X": np.array([-2.7, -1.5, -0.2, 0.0, 0.3, 1.5, 2.9, 4.99], dtype=np.float32)},
    lambda a: (a["X"].astype(np.int32),),
)
add(
    "int_floor_division",
    """
function (A[N], B[N]) -> (Q, H) {
    Q = A / B;
    H = A / 2;
}
""",
    lambda rng: {
        "A": np.array([7, -7, 7, -7, 0, 5, -1, 9], dtype=np.int32),
        "B": np.array([2, 2, -2, -2, 3, 5, 3, -4], dtype=np.int32),
    },
    lambda a: (a["A"] // a["B"], a["A"] // 2),
)
add(
    "int32_dims_in_elementwise",
    """
function (A[N]) -> (O) {
    O = A * N + N / 2;
}
""",
    lambda rng: {"A": ints(rng, np.int32, 7)},
    lambda a: (a["A"] * 7 + 7 // 2,),
)
add(
    "int64_elementwise",
    """
function (A[N], B[N]) -> (O) {
    O = A * B + 3;
}
""",
    lambda rng: {
        "A": ints(rng, np.int64, 6, lo=-3_000_000, hi=3_000_000),
        "B": ints(rng, np.int64, 6, lo=-3_000_000, hi=3_000_000),
    },
    lambda a: (a["A"] * a["B"] + 3,),
)
add(
    "float64_elementwise_chain",
    """
function (X[N, M]) -> (O) {
    O = exp(X) * 2.0 - sqrt(abs(X)) + tanh(X) / 3;
}
""",
    lambda rng: {"X": f64(rng, 4, 5, lo=-2.0, hi=2.0)},
    lambda a: (np.exp(a["X"]) * 2.0 - np.sqrt(np.abs(a["X"])) + np.tanh(a["X"]) / 3,),
    **F64,
)

# --------------------------------------------------------------------------
# Program structure
# --------------------------------------------------------------------------

add(
    "multi_output",
    """
function (A[N], B[N]) -> (S, D, P) {
    S = A + B;
    D = A - B;
    P[] = +(A[i] * B[i]);
}
""",
    lambda rng: {"A": f32(rng, 6), "B": f32(rng, 6)},
    lambda a: (a["A"] + a["B"], a["A"] - a["B"], np.asarray(np.dot(a["A"], a["B"]), np.float32)),
    **SUM32,
)
add(
    "unused_intermediate",
    """
function (A[N]) -> (O) {
    T = A * 2.0;
    U[] = +(A[i]);
    O = A + 1.0;
}
""",
    lambda rng: {"A": f32(rng, 5)},
    lambda a: (a["A"] + 1.0,),
)


def _packed_int8(w: np.ndarray) -> np.ndarray:
    """int8 weights ``W[K, N]`` packed four rows to an int32 word: ``W4[K / 4, N]``,
    byte ``t`` of ``W4[k, n]`` being ``W[4 k + t, n]`` (little-endian)."""
    k, n = w.shape
    return np.ascontiguousarray(w.reshape(k // 4, 4, n).transpose(0, 2, 1)).view("<i4")[..., 0]


# Integer GEMM of quantised models: uint8 activations viewed as int32 words, int8
# weights packed four to a word; dot4 multiplies byte by byte and sums exactly.
add(
    "dot4_gemm_uint8_int8",
    """
function (X[M, K], W4[K4, N]) -> (C) {
    X4 = view_int(X, 32);
    C[m, n : M, N] = +(dot4(X4[m, k], W4[k, n]));
}
""",
    lambda rng: {
        "X": ints(rng, np.uint8, 7, 12, lo=0, hi=255),
        "W4": _packed_int8(ints(rng, np.int8, 12, 9, lo=-128, hi=127)),
    },
    lambda a: (
        (
            a["X"].astype(np.int64)
            @ a["W4"].view(np.int8).reshape(3, 9, 4).transpose(0, 2, 1).reshape(12, 9)
        ).astype(np.int32),
    ),
)

add(
    "dot4_conv_requantize",
    """
function (I[N, X, C], K4[T, C4, CO], S[CO]) -> (Y) {
    I4 = view_int(I, 32);
    A[n, x, co : N, X, CO] = +(dot4(I4[n, x + t - 1, c], K4[t, c, co])), t < T;
    Y = as_float(max(A, 0), 32) * S;
}
""",
    lambda rng: {
        "I": ints(rng, np.uint8, 2, 6, 8, lo=0, hi=255),
        "K4": np.stack([_packed_int8(ints(rng, np.int8, 8, 5, lo=-128, hi=127)) for _ in range(3)]),
        "S": f32(rng, 5, lo=0.001, hi=0.01),
    },
    lambda a: (
        np.maximum(
            sum(
                np.einsum(
                    "nxc,cd->nxd",
                    np.pad(a["I"].astype(np.int64), ((0, 0), (1, 1), (0, 0)))[:, t : t + 6],
                    a["K4"][t].view(np.int8).reshape(2, 5, 4).transpose(0, 2, 1).reshape(8, 5),
                )
                for t in range(3)
            ),
            0,
        ).astype(np.float32)
        * a["S"],
    ),
    **SUM32,
)

CASES_BY_NAME: dict[str, Case] = {c.name: c for c in CASES}
assert len(CASES_BY_NAME) == len(CASES), "duplicate case names"
