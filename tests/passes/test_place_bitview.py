"""``place`` gives a bitview's result its source's bytes (no copy at run time),
only where that is safe, and the results stay NumPy's."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Special
from stripeml.passes.place import Place, bitview_aliases

from .memcheck import assert_placed_soundly

RNG = np.random.default_rng(11)

# uint8 activations computed by a kernel, read as int32 words by a dot4 GEMM
# (a quantised layer's shape of work), then a chain of views of a kernel's result.
QGEMM = """function (A[M, K], W4[K4, N]) -> (C, E) {
    X = as_uint(A + 1, 8);
    X4 = view_int(X, 32);
    C[m, n : M, N] = +(dot4(X4[m, k], W4[k, n]));
    V = as_uint(A * 2, 8);
    V4 = view_int(V, 32);
    V8 = view_uint(V4, 8);
    E = V8 + 1;
}"""


def _inputs():
    a = RNG.integers(0, 200, size=(24, 64), dtype=np.int32)
    w4 = RNG.integers(-(2**31), 2**31, size=(16, 40)).astype(np.int32)
    return a, w4


def _want(a, w4):
    x = (a + 1).astype(np.uint8)
    xb = x.reshape(24, 16, 4).astype(np.int64)
    wb = w4.view(np.int8).reshape(16, 40, 4).astype(np.int64)
    c = np.einsum("mkt,knt->mn", xb, wb)
    e = (a * 2).astype(np.uint8) + 1
    return c, e


def _offsets(program):
    return {r.into: r.offset for r in program.root.refs}


def test_views_share_their_source_bytes_and_results_hold():
    a, w4 = _inputs()
    exe = stripeml.compile(QGEMM, target="cpu").lower(a, w4)
    program = exe.program
    views = [s for s in program.root.stmts if isinstance(s, Special) and s.op == "bitview"]
    assert views
    off = _offsets(program)
    shared = [s for s in views if off.get(s.inputs[0]) is not None
              and off[s.inputs[0]] == off.get(s.outputs[0])]  # fmt: skip
    assert shared, [
        (s.inputs, s.outputs, off.get(s.inputs[0]), off.get(s.outputs[0])) for s in views
    ]
    assert_placed_soundly(program)  # the independent checker accepts exactly these
    c, e = exe(a, w4)
    want_c, want_e = _want(a, w4)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(e, want_e)


@pytest.mark.parametrize("written_after", [False, True])
def test_no_sharing_when_the_source_is_written_after_the_view(written_after):
    """A source written again after the view (or a view written twice) must keep
    its own bytes: sharing would change what the view's readers see."""
    a, w4 = _inputs()
    program = stripeml.compile(QGEMM, target="cpu").lower(a, w4).program
    root = program.root
    allocs = [r for r in root.refs if r.dir == "none"]
    k, view = next((k, s) for k, s in enumerate(root.stmts)
                   if isinstance(s, Special) and s.op == "bitview")  # fmt: skip
    assert view.outputs[0] in bitview_aliases(root, allocs)
    if written_after:
        # a copy into the view's source after the view: its source is written later
        extra = Special("copy", (view.outputs[0],), (view.inputs[0],))
    else:
        extra = Special("copy", (view.inputs[0],), (view.outputs[0],))  # the view written twice
    stmts = (*root.stmts[: k + 1], extra, *root.stmts[k + 1 :])
    changed = root.with_stmts(stmts)
    assert view.outputs[0] not in bitview_aliases(changed, allocs)


def test_a_plain_place_run_is_a_fixed_point():
    a, w4 = _inputs()
    program = stripeml.compile(QGEMM, target="cpu").lower(a, w4).program
    again = Place(root_only=True).run(program)
    assert _offsets(again) == _offsets(program)
