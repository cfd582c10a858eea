"""The oracles checked on their own, without stripeml.

* Every case of ``programs.py``: its inputs match the Tile signature, its
  reference runs, returns one array per declared output and leaves its inputs
  alone.
* Programs made only of contractions: the Tile text is read by a small
  parser here and evaluated by the brute-force oracle of
  ``test_random_contractions.py``; the NumPy reference must agree (values
  and dtype).  So each reference is tied to the very program text it claims
  to compute.
* Programs with elementwise statements: a second formulation in scalar Python
  (``math``) loops.
* The vectorised convolution helper against textbook loops; the brute-force
  oracle against ``np.einsum`` and NumPy, and its pruned index ranges against
  a plain -20..20 search.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

try:
    from programs import CASES, CASES_BY_NAME, Case, conv_nd
    from test_random_contractions import (
        Access,
        Spec,
        Unbounded,
        brute_force,
        contractions,
        eval_int,
        index_ranges,
        make_inputs,
    )
except ImportError:  # tests/ imported as a package
    from tests.programs import CASES, CASES_BY_NAME, Case, conv_nd
    from tests.test_random_contractions import (
        Access,
        Spec,
        Unbounded,
        brute_force,
        contractions,
        eval_int,
        index_ranges,
        make_inputs,
    )

# --------------------------------------------------------------------------
# A small reader for the Tile programs of programs.py
# --------------------------------------------------------------------------

_HEADER = re.compile(r"function\s*\((.*?)\)\s*->\s*\((.*?)\)\s*\{(.*)\}", re.S)
_PARAM = re.compile(r"([A-Z]\w*)(\[([^\]]*)\])?")
_ACCESS = re.compile(r"([A-Z]\w*)\[([^\]]*)\]")


def split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def read_program(source: str):
    """``(params, outputs, statements)``; params are ``(name, dims or None)``."""
    m = _HEADER.search(source)
    assert m, source
    params = [(p[0], tuple(split_top(p[2])) if p[1] else None) for p in _PARAM.findall(m[1])]
    outputs = [o.strip() for o in m[2].split(",")]
    stmts = [" ".join(s.split()) for s in m[3].split(";") if s.strip()]
    return params, outputs, stmts


def read_contraction(stmt: str, params) -> Spec | None:
    """The Spec of a contraction statement, or None for an elementwise one."""
    m = re.match(r"([A-Z]\w*)\[([^\]]*)\]\s*=\s*(.*)$", stmt)
    if not m:
        return None
    out, inner, rhs = m[1], m[2], m[3]
    polys, sizes = (split_top(s) for s in inner.split(":")) if ":" in inner else ([], [])
    agg = rhs[0]
    assert rhs[1] == "("
    depth = 0
    for end in range(1, len(rhs)):
        depth += {"(": 1, ")": -1}.get(rhs[end], 0)
        if depth == 0:
            break
    combo_text, rest = rhs[2:end], rhs[end + 1 :]
    accesses = [Access(t, tuple(split_top(ix))) for t, ix in _ACCESS.findall(combo_text)]
    if "?" in combo_text:
        combo = "cond"
    elif "==" in combo_text:
        combo = "=="
    elif len(accesses) == 1:
        combo = "none"
    else:
        first, second = list(_ACCESS.finditer(combo_text))
        combo = combo_text[first.end() : second.start()].strip()
    constraints, default = [], None
    for item in filter(None, split_top(rest)):
        if item.startswith("default "):
            default = item.split()[1]
        else:
            poly, bound = item.split("<")
            constraints.append((poly.strip(), bound.strip()))
    dims_params = tuple((n, d) for n, d in params if d is not None)
    return Spec(
        dims_params,
        Access(out, tuple(polys)),
        tuple(sizes),
        agg,
        combo,
        tuple(accesses),
        tuple(constraints),
        default,
    )


def contraction_only(c: Case) -> bool:
    params, _, stmts = read_program(c.source)
    return all(read_contraction(s, params) is not None for s in stmts)


# --------------------------------------------------------------------------
# Every case
# --------------------------------------------------------------------------


def test_enough_cases() -> None:
    assert len(CASES) >= 50


def test_programs_module_is_independent_of_stripeml() -> None:
    text = (Path(__file__).parent / "programs.py").read_text()
    assert "import stripeml" not in text and "from stripeml" not in text


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_is_well_formed(case: Case) -> None:
    params, outputs, _ = read_program(case.source)
    inputs = case.make_inputs()
    again = case.make_inputs()
    assert [n for n, _ in params] == list(inputs), "inputs in parameter order"
    dims: dict[str, int] = {}
    for (name, dnames), arr in zip(params, inputs.values()):
        assert isinstance(arr, np.ndarray)
        np.testing.assert_array_equal(arr, again[name])  # deterministic
        if dnames is None:
            continue
        assert arr.ndim == len(dnames), name
        for d, s in zip(dnames, arr.shape):
            if d.isdigit():
                assert int(d) == s
            else:
                assert dims.setdefault(d, s) == s, f"dim {d} bound twice"
    # Dimension names must not shadow tensor names.
    tensors = {n for n, _ in params} | set(outputs)
    assert not (set(dims) & tensors)

    copies = {k: v.copy() for k, v in inputs.items()}
    result = case.reference(inputs)
    assert isinstance(result, tuple) and len(result) == len(outputs)
    for r in result:
        assert isinstance(r, np.ndarray)
        if np.issubdtype(r.dtype, np.floating):
            assert np.isfinite(r).all()
    for k in inputs:
        np.testing.assert_array_equal(inputs[k], copies[k])
    # float32 in, float32 out (unless a cast says otherwise).
    in_dtypes = {a.dtype for a in inputs.values()}
    if in_dtypes == {np.dtype(np.float32)} and "as_" not in case.source:
        assert all(r.dtype == np.float32 for r in result), [r.dtype for r in result]


CONTRACTION_CASES = [c for c in CASES if contraction_only(c)]


def test_most_contraction_programs_are_cross_checked() -> None:
    assert len(CONTRACTION_CASES) >= 25


@pytest.mark.parametrize("case", CONTRACTION_CASES, ids=lambda c: c.name)
def test_reference_matches_brute_force_of_tile_text(case: Case) -> None:
    params, outputs, stmts = read_program(case.source)
    arrays = dict(case.make_inputs())
    for stmt in stmts:
        spec = read_contraction(stmt, params)
        assert spec is not None
        arrays[spec.out.tensor] = brute_force(spec, arrays)
    expected = case.reference(case.make_inputs())
    for name, ref in zip(outputs, expected):
        got = arrays[name]
        assert got.dtype == ref.dtype, name
        assert got.shape == ref.shape, name
        np.testing.assert_allclose(ref, got, rtol=max(case.rtol, 1e-6), atol=case.atol)


# --------------------------------------------------------------------------
# Programs with elementwise statements: scalar-loop formulations
# --------------------------------------------------------------------------


def _rows(x: np.ndarray) -> list[list[float]]:
    return x.astype(np.float64).tolist()


def _softmax_row(row: list[float]) -> list[float]:
    m = max(row)
    e = [math.exp(v - m) for v in row]
    s = math.fsum(e)
    return [v / s for v in e]


def loops_avgpool(a):
    x = _rows(a["I"])
    h, w = len(x) // 2, len(x[0]) // 2
    return (
        [
            [sum(x[2 * i + p][2 * j + q] for p in range(2) for q in range(2)) / 4 for j in range(w)]
            for i in range(h)
        ],
    )


def loops_global_avg_pool(a):
    x = a["I"].astype(np.float64)
    n, xx, yy, c = x.shape
    return (
        [
            [
                math.fsum(x[b, i, j, ch] for i in range(xx) for j in range(yy)) / (xx * yy)
                for ch in range(c)
            ]
            for b in range(n)
        ],
    )


def loops_mean(a):
    return ([math.fsum(r) / len(r) for r in _rows(a["X"])],)


def loops_softmax(a):
    return ([_softmax_row(r) for r in _rows(a["X"])],)


def loops_log_softmax(a):
    return ([[math.log(v) for v in _softmax_row(r)] for r in _rows(a["X"])],)


def loops_layernorm(a):
    g, b = a["G"].tolist(), a["B"].tolist()
    out = []
    for r in _rows(a["X"]):
        mu = math.fsum(r) / len(r)
        var = math.fsum((v - mu) ** 2 for v in r) / len(r)
        out.append([g[k] * (v - mu) / math.sqrt(var + 1e-5) + b[k] for k, v in enumerate(r)])
    return (out,)


def loops_mlp(a):
    x, w1, b1, w2, b2 = (a[k].astype(np.float64).tolist() for k in ("X", "W1", "B1", "W2", "B2"))
    out = []
    for row in x:
        h = [
            max(0.0, math.fsum(row[k] * w1[k][j] for k in range(len(row))) + b1[j])
            for j in range(len(b1))
        ]
        z = [math.fsum(h[j] * w2[j][c] for j in range(len(h))) + b2[c] for c in range(len(b2))]
        out.append(_softmax_row(z))
    return (out,)


def loops_sum_of_squares(a):
    return ([math.sqrt(math.fsum(v * v for v in r)) for r in _rows(a["X"])],)


def loops_multi_output(a):
    x, y = a["A"].tolist(), a["B"].tolist()
    return (
        [p + q for p, q in zip(x, y)],
        [p - q for p, q in zip(x, y)],
        math.fsum(p * q for p, q in zip(x, y)),
    )


def loops_unused(a):
    return ([v + 1.0 for v in a["A"].tolist()],)


def loops_weak(a):
    return ([[v * 0.5 + 1 for v in r] for r in _rows(a["X"])],)


def loops_rank0(a):
    s = float(a["S"])
    return ([[v * s for v in r] for r in _rows(a["X"])],)


def loops_col_row(a):
    col, row = a["A"][:, 0].tolist(), a["B"][0].tolist()
    return ([[p - q for q in row] for p in col],)


def loops_rank_promotion(a):
    v = a["V"].tolist()
    return ([[p + v[j] for j, p in enumerate(r)] for r in _rows(a["X"])],)


def loops_leaky(a):
    return ([[v if v > 0 else 0.1 * v for v in r] for r in _rows(a["X"])],)


def loops_unary_minus(a):
    return ([-v + v * v for v in a["X"].tolist()],)


def loops_comparisons(a):
    pairs = list(zip(a["A"].tolist(), a["B"].tolist()))
    ops = [
        lambda p, q: p < q,
        lambda p, q: p > q,
        lambda p, q: p <= q,
        lambda p, q: p >= q,
        lambda p, q: p == q,
        lambda p, q: p != q,
    ]
    return tuple([op(p, q) for p, q in pairs] for op in ops)


def loops_bool_select(a):
    return ([p if c else q for c, p, q in zip(a["C"].tolist(), a["A"].tolist(), a["B"].tolist())],)


def loops_as_float(a):
    return ([float(v) for v in a["A"].tolist()],)


def loops_as_int(a):
    return ([math.trunc(v) for v in a["X"].tolist()],)


def loops_floor_div(a):
    pairs = list(zip(a["A"].tolist(), a["B"].tolist()))
    return ([math.floor(p / q) for p, q in pairs], [math.floor(p / 2) for p, _ in pairs])


def loops_int_dims(a):
    n = len(a["A"])
    return ([v * n + n // 2 for v in a["A"].tolist()],)


def loops_int64(a):
    return ([p * q + 3 for p, q in zip(a["A"].tolist(), a["B"].tolist())],)


def _bytes_of(word: int, signed: bool) -> list[int]:
    """The four little-endian bytes of an int32, read as int8 or uint8."""
    u = int(word) & 0xFFFFFFFF
    out = [(u >> (8 * t)) & 0xFF for t in range(4)]
    return [b - 256 if signed and b > 127 else b for b in out]


def loops_dot4_gemm(a):
    x, w4 = a["X"], a["W4"]
    m, k = x.shape
    n = w4.shape[1]
    out = [[0] * n for _ in range(m)]
    for i in range(m):
        for j in range(n):
            for kw in range(k // 4):
                ws = _bytes_of(w4[kw, j], True)
                out[i][j] += sum(int(x[i, 4 * kw + t]) * ws[t] for t in range(4))
    return (np.array(out, np.int32),)


def loops_dot4_conv(a):
    i_, k4, s = a["I"], a["K4"], a["S"]
    n, xs, c = i_.shape
    taps, c4, co = k4.shape
    out = np.zeros((n, xs, co), np.float32)
    for b in range(n):
        for x in range(xs):
            for o in range(co):
                acc = 0
                for t in range(taps):
                    if 0 <= x + t - 1 < xs:
                        for cw in range(c4):
                            ws = _bytes_of(k4[t, cw, o], True)
                            acc += sum(int(i_[b, x + t - 1, 4 * cw + q]) * ws[q] for q in range(4))
                out[b, x, o] = float(max(acc, 0)) * float(s[o])
    return (out,)


def loops_f64_chain(a):
    return (
        [
            [math.exp(v) * 2.0 - math.sqrt(abs(v)) + math.tanh(v) / 3 for v in r]
            for r in _rows(a["X"])
        ],
    )


_UNARY = {
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "tanh": math.tanh,
    "sigmoid": lambda v: 1.0 / (1.0 + math.exp(-v)),
    "sin": math.sin,
    "cos": math.cos,
    "abs": abs,
    "relu": lambda v: max(v, 0.0),
    "floor": math.floor,
    "ceil": math.ceil,
}
_BINARY = {"pow": math.pow, "max": max, "min": min}


def _loops_fn(name):
    def run(a):
        if name in _UNARY:
            return ([[_UNARY[name](v) for v in r] for r in _rows(a["X"])],)
        y = _rows(a["Y"])
        return (
            [
                [_BINARY[name](v, y[i][j]) for j, v in enumerate(r)]
                for i, r in enumerate(_rows(a["X"]))
            ],
        )

    return run


LOOPS = {
    "avgpool_2x2": loops_avgpool,
    "global_avg_pool": loops_global_avg_pool,
    "mean_dim_constant": loops_mean,
    "softmax": loops_softmax,
    "log_softmax": loops_log_softmax,
    "layernorm": loops_layernorm,
    "mlp_10_statements": loops_mlp,
    "sum_of_squares_then_sqrt": loops_sum_of_squares,
    "multi_output": loops_multi_output,
    "unused_intermediate": loops_unused,
    "weak_scalar_literal_f32": loops_weak,
    "broadcast_rank0_input": loops_rank0,
    "broadcast_col_row": loops_col_row,
    "broadcast_rank_promotion": loops_rank_promotion,
    "ternary_leaky_relu": loops_leaky,
    "unary_minus_and_square": loops_unary_minus,
    "comparisons_bool": loops_comparisons,
    "bool_input_select": loops_bool_select,
    "cast_as_float64": loops_as_float,
    "cast_as_int32_truncates": loops_as_int,
    "int_floor_division": loops_floor_div,
    "int32_dims_in_elementwise": loops_int_dims,
    "int64_elementwise": loops_int64,
    "float64_elementwise_chain": loops_f64_chain,
    "dot4_gemm_uint8_int8": loops_dot4_gemm,
    "dot4_conv_requantize": loops_dot4_conv,
    **{n: _loops_fn(n[3:]) for n in CASES_BY_NAME if n.startswith("fn_")},
}


def test_every_case_has_a_second_formulation() -> None:
    covered = set(LOOPS) | {c.name for c in CONTRACTION_CASES}
    assert covered == set(CASES_BY_NAME), set(CASES_BY_NAME) ^ covered


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_reference_matches_scalar_loops(name: str) -> None:
    case = CASES_BY_NAME[name]
    ref = case.reference(case.make_inputs())
    alt = LOOPS[name](case.make_inputs())
    assert len(ref) == len(alt)
    for r, a in zip(ref, alt):
        a = np.asarray(a)
        assert r.shape == a.shape
        if np.issubdtype(r.dtype, np.floating):
            # The references compute in float32; the loops in float64.
            tol = 1e-12 if r.dtype == np.float64 else 2e-5
            np.testing.assert_allclose(r, a, rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(r, a)


# --------------------------------------------------------------------------
# The convolution helper against textbook loops
# --------------------------------------------------------------------------


def conv_loops(x, k, stride, dilation, pad, out):
    """out[n, o.., co] = sum x[n, o*stride + kpos*dilation - pad, ci] * k[kpos, ci, co]."""
    nsp = x.ndim - 2
    res = np.zeros((x.shape[0], *out, k.shape[-1]))
    for n in range(x.shape[0]):
        for o in itertools.product(*(range(s) for s in out)):
            for kpos in itertools.product(*(range(s) for s in k.shape[:nsp])):
                src = [o[d] * stride + kpos[d] * dilation - pad for d in range(nsp)]
                if all(0 <= src[d] < x.shape[1 + d] for d in range(nsp)):
                    res[(n, *o)] += x[(n, *src)].astype(np.float64) @ k[kpos].astype(np.float64)
    return res


@pytest.mark.parametrize("nsp", [1, 2])
@pytest.mark.parametrize(
    "stride,dilation,pad", [(1, 1, 0), (2, 1, 0), (1, 2, 0), (1, 1, 1), (2, 1, 1), (2, 2, 2)]
)
def test_conv_helper_against_loops(nsp, stride, dilation, pad) -> None:
    rng = np.random.default_rng(nsp * 100 + stride * 10 + dilation + pad)
    x = rng.uniform(-1, 1, (2, *([7] * nsp), 3))
    k = rng.uniform(-1, 1, (*([3] * nsp), 3, 2))
    valid = tuple((7 + pad - dilation * 2 - 1) // stride + 1 for _ in range(nsp))
    same = tuple((7 - 1) // stride + 1 for _ in range(nsp))
    for out in {valid, same}:
        np.testing.assert_allclose(
            conv_nd(x, k, stride, dilation, pad, out),
            conv_loops(x, k, stride, dilation, pad, out),
            rtol=1e-12,
            atol=1e-12,
        )


# --------------------------------------------------------------------------
# The brute-force oracle itself
# --------------------------------------------------------------------------


def test_spec_source_text() -> None:
    spec = Spec(
        (("A", ("P", "Q")), ("B", ("Q", "R"))),
        Access("O", ("i", "j")),
        ("P", "R"),
        "+",
        "*",
        (Access("A", ("i", "r")), Access("B", ("r", "j"))),
        (("i - r", "P"),),
    )
    assert spec.source() == (
        "function (A[P, Q], B[Q, R]) -> (O) {\n"
        "    O[i, j : P, R] = +(A[i, r] * B[r, j]), i - r < P;\n"
        "}\n"
    )
    assert spec.indices() == ["i", "j", "r"]


@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 5), q=st.integers(1, 5), r=st.integers(1, 5), seed=st.integers(0, 1000))
def test_brute_force_matmul_against_einsum(p, q, r, seed) -> None:
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-1, 1, (p, q)), rng.uniform(-1, 1, (q, r))
    spec = Spec(
        (("A", ("P", "Q")), ("B", ("Q", "R"))),
        Access("O", ("i", "j")),
        ("P", "R"),
        "+",
        "*",
        (Access("A", ("i", "k")), Access("B", ("k", "j"))),
    )
    np.testing.assert_allclose(
        brute_force(spec, {"A": a, "B": b}), np.einsum("ik,kj->ij", a, b), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize(
    "einsum,a_idx,b_idx,out_idx",
    [
        ("bik,bkj->bij", ("b", "i", "k"), ("b", "k", "j"), ("b", "i", "j")),
        ("ij,j->i", ("i", "j"), ("j",), ("i",)),
        ("i,j->ij", ("i",), ("j",), ("i", "j")),
        ("ijk,jk->i", ("i", "j", "k"), ("j", "k"), ("i",)),
        ("ij,ij->j", ("i", "j"), ("i", "j"), ("j",)),
    ],
)
def test_brute_force_against_einsum(einsum, a_idx, b_idx, out_idx) -> None:
    rng = np.random.default_rng(7)
    size = {"b": 2, "i": 3, "j": 4, "k": 5}
    dim = {x: x.upper() * 2 for x in size}  # dim names: BB, II, ...
    a = rng.uniform(-1, 1, [size[x] for x in a_idx])
    b = rng.uniform(-1, 1, [size[x] for x in b_idx])
    spec = Spec(
        (("A", tuple(dim[x] for x in a_idx)), ("B", tuple(dim[x] for x in b_idx))),
        Access("O", out_idx),
        tuple(dim[x] for x in out_idx),
        "+",
        "*",
        (Access("A", a_idx), Access("B", b_idx)),
    )
    np.testing.assert_allclose(
        brute_force(spec, {"A": a, "B": b}), np.einsum(einsum, a, b), rtol=1e-12, atol=1e-12
    )


def test_brute_force_aggregations_and_unreached() -> None:
    x = np.array([[3.0, -1.0, 2.0], [-5.0, -4.0, -6.0]])
    for agg, ref in [("+", x.sum(1)), (">", x.max(1)), ("<", x.min(1)), ("*", x.prod(1))]:
        spec = Spec(
            (("A", ("N", "K")),),
            Access("O", ("i + 1",)),
            ("N + 2",),
            agg,
            "none",
            (Access("A", ("i", "k")),),
        )
        np.testing.assert_array_equal(brute_force(spec, {"A": x}), [0.0, *ref, 0.0])


def test_brute_force_unbounded_index_is_reported() -> None:
    spec = Spec(
        (("A", ("N",)),), Access("O", ("i",)), ("N",), "+", "none", (Access("A", ("i + k",)),)
    )
    with pytest.raises(Unbounded):
        index_ranges(spec, {"A": np.zeros(4)})


@settings(max_examples=40, deadline=None)
@given(drawn=contractions(), seed=st.integers(0, 2**32 - 1))
def test_generated_contractions_are_well_formed(drawn, seed) -> None:
    spec, shapes = drawn
    arrays = make_inputs(spec, shapes, seed)
    # Every index is alone, coefficient +-1, in some output or input dimension.
    for x in spec.indices():
        alone = [
            p
            for acc in (spec.out, *spec.operands)
            for p in acc.polys
            if re.fullmatch(rf"-?{x}( [+-] \d)?", p)
        ]
        assert alone, (x, spec.source())
    # Every access mentions an index; sizes are positive.
    for acc in (spec.out, *spec.operands):
        assert all(re.search(r"[a-z]", p) for p in acc.polys)
    dims = {d: s for name, ds in spec.params for d, s in zip(ds, shapes[name])}
    assert all(eval_int(s, dims) >= 1 for s in spec.sizes)
    index_ranges(spec, arrays)  # never Unbounded


@settings(max_examples=30, deadline=None)
@given(drawn=contractions(), seed=st.integers(0, 2**32 - 1))
def test_pruned_ranges_agree_with_plain_search(drawn, seed) -> None:
    spec, shapes = drawn
    names = spec.indices()
    # A plain -20..20 search costs 41**n tuples: keep it to at most three indices.
    assume(len(names) <= 3)
    arrays = make_inputs(spec, shapes, seed)
    pruned = brute_force(spec, arrays)
    plain = brute_force(spec, arrays, ranges={x: range(-20, 21) for x in names})
    np.testing.assert_allclose(pruned, plain, rtol=1e-12, atol=1e-12)
