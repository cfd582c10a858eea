"""stripeml.grad of random contractions, against central finite differences.

Hypothesis draws one contraction with the generator of
``tests/test_random_contractions.py`` (``tests/fuzz/gen_contraction.py``:
random affine index polynomials with offsets, constraints, sizes that are
expressions of the dimensions), of a kind the rules differentiate:

* one operand, aggregated by ``+``, ``>``, ``<`` or ``*``;
* two operands, ``+(A * B)`` or ``+(A + B)``;
* three, ``+(A == B ? (C))`` (``A`` and ``B`` hold small integers, so the
  condition holds now and then; only ``C`` is differentiated);

sometimes with ``default D`` (then ``D`` is differentiated too), followed by a
random elementwise tail (none, ``tanh``, ``sin``, ``x * sigmoid(x)``, or a
second output read from the first).  The gradient of ``sum(out * cotangent)``
is compared, element by element, with central differences of the forward
program, both in float64 on ``interp``.

Max and min read each element at most once per output element (every
reduction index is anchored in its own dimension), and the inputs are random
floats, so ties have probability 0 and finite differences see a smooth
function.  Deterministic: ``derandomize=True``; the number of examples is
``STRIPEML_HYPOTHESIS_EXAMPLES`` (default 150).
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

import stripeml
from stripeml.autodiff import grad

try:
    from fuzz.choose import DrawChooser
    from fuzz.contraction import Access, Spec
    from fuzz.gen_contraction import DIM_NAMES, Slot, gen_contraction
except ImportError:  # tests/ imported as a package
    from tests.fuzz.choose import DrawChooser
    from tests.fuzz.contraction import Access, Spec
    from tests.fuzz.gen_contraction import DIM_NAMES, Slot, gen_contraction

#: elementwise tails: (statements reading O, the function's outputs)
TAILS: dict[str, tuple[str, str]] = {
    "none": ("", "O"),
    "tanh": ("Y = tanh(O);", "Y"),
    "sin": ("Y = sin(O) * O;", "Y"),
    "silu": ("Y = O * sigmoid(O);", "Y"),
    "two": ("Y = tanh(O) + O;", "O, Y"),
}


@st.composite
def programs(draw) -> tuple[Spec, dict[str, tuple[int, ...]], str, tuple[str, ...]]:
    """A contraction with a tail: the spec, the input shapes, the Tile source
    and the parameters to differentiate."""
    kind = draw(st.sampled_from(("one", "one", "two", "cond")))
    if kind == "one":
        ranks, combo = [draw(st.integers(1, 3))], "none"
        agg = draw(st.sampled_from(("+", ">", "<", "*")))
    elif kind == "two":
        ranks = draw(st.lists(st.integers(1, 3), min_size=2, max_size=2))
        combo, agg = draw(st.sampled_from(("*", "+"))), "+"
    else:
        ranks = draw(st.lists(st.integers(1, 2), min_size=3, max_size=3))
        combo, agg = "cond", "+"
    dim_iter = iter(DIM_NAMES)
    slots = [
        Slot("ABC"[t], tuple(next(dim_iter) for _ in range(rank))) for t, rank in enumerate(ranks)
    ]
    default = None
    if draw(st.integers(0, 3)) == 0:
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        default = Slot("D", ("V", "W", "Z")[: len(shape)], shape)
    ch = DrawChooser(draw)
    spec, shapes = gen_contraction(ch, "O", slots, combo, agg, {}, default=default)
    params = list(spec.params)
    if default is not None:
        assert default.shape is not None
        params.append((default.name, default.dims))
        shapes[default.name] = default.shape
    tail, outs = TAILS[draw(st.sampled_from(sorted(TAILS)))]
    decl = ", ".join(f"{n}[{', '.join(d)}]" for n, d in params)
    body = "\n    ".join(s for s in (spec.statement(), tail) if s)
    source = f"function ({decl}) -> ({outs}) {{\n    {body}\n}}\n"
    wrt = tuple(n for n, _ in params if not (combo == "cond" and n in ("A", "B")))
    return spec, shapes, source, wrt


def make_inputs(spec: Spec, shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if spec.combo == "cond" and name in ("A", "B"):
            out[name] = rng.integers(0, 2, shape).astype(np.float64)
        elif spec.agg == "*" and name != "D":
            # factors near 1 (a product of up to 36 stays tame), a zero now and then
            arr = rng.uniform(0.8, 1.2, shape)
            arr[rng.uniform(size=shape) < 0.1] = 0.0
            out[name] = arr
        else:
            out[name] = rng.uniform(-1.0, 1.0, shape)
    return out


def _solved_twice() -> tuple[Spec, dict[str, tuple[int, ...]], str, tuple[str, ...]]:
    """``C[i + r, r + 1]``: two solved indices, the second reaching the first."""
    spec = Spec(
        (("A", ("P",)), ("B", ("Q", "R")), ("C", ("S", "T"))),
        Access("O", ("i",)),
        ("V",),
        "+",
        "cond",
        (Access("A", ("i",)), Access("B", ("s", "i")), Access("C", ("i + r", "r + 1"))),
        (),
        "D",
    )
    source = (
        "function (A[P], B[Q, R], C[S, T], D[V]) -> (O) {\n"
        "    O[i : V] = +(A[i] == B[s, i] ? (C[i + r, r + 1])), default D;\n}\n"
    )
    assert spec.statement() in source
    return spec, {"A": (1,), "B": (1, 1), "C": (1, 2), "D": (1,)}, source, ("C", "D")


def _outs(f: stripeml.api.Function, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    res = f(**inputs)
    return res if isinstance(res, tuple) else (res,)


@settings(
    max_examples=int(os.environ.get("STRIPEML_HYPOTHESIS_EXAMPLES", 150)),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(drawn=programs(), seed=st.integers(0, 2**32 - 1))
@example(drawn=_solved_twice(), seed=0)  # once found here (test_solved_indices.py)
def test_random_contraction_gradient(drawn, seed):
    spec, shapes, source, wrt = drawn
    note(source)
    note(f"shapes: {shapes}, wrt: {wrt}")
    inputs = make_inputs(spec, shapes, seed)
    f = stripeml.compile(source, target="interp")
    outs = _outs(f, inputs)
    rng = np.random.default_rng(seed + 1)
    cots = [rng.standard_normal(o.shape) for o in outs]
    g = grad(f, wrt)
    note(g.source)
    got = g(*(inputs[p] for p in f.params), *cots)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(wrt)

    def loss(values: dict[str, np.ndarray]) -> float:
        return float(sum(np.sum(o * c) for o, c in zip(_outs(f, values), cots)))

    eps = 1e-6
    scale = 1.0 + max((float(np.max(np.abs(o))) for o in outs if o.size), default=0.0)
    for w, dw in zip(wrt, got):
        assert dw.shape == inputs[w].shape and dw.dtype == np.float64
        want = np.zeros_like(inputs[w])
        for k in np.ndindex(inputs[w].shape):
            plus = {**inputs, w: inputs[w].copy()}
            minus = {**inputs, w: inputs[w].copy()}
            plus[w][k] += eps
            minus[w][k] -= eps
            want[k] = (loss(plus) - loss(minus)) / (2 * eps)
        np.testing.assert_allclose(dw, want, rtol=1e-5, atol=1e-6 * scale, err_msg=f"d/d{w}")
