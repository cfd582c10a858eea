"""Special statements ``copy``, ``reshape`` and ``gather``, at the root and in blocks."""

from __future__ import annotations

import numpy as np
import pytest

from stripeml.errors import ExecutionError
from stripeml.ir.nodes import Special
from stripeml.runtime.interp import run

from .helpers import run_all
from .programs_ir import block, program, root_ref, special_program, view

rng = np.random.default_rng(3)


def test_copy_root():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    out = run_all(special_program("copy", ("f32", (3, 4)), ("f32", (3, 4))), {"X": x})["Y"]
    np.testing.assert_array_equal(out, x)


def test_copy_between_layouts():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    xr = root_ref("in", "X", "f32", (3, 4))
    yr = root_ref("out", "Y", "f32", (3, 4), strides=(1, 3))  # column-major
    out = run(program([xr, yr], [Special("copy", ("X",), ("Y",))]), {"X": x})["Y"]
    np.testing.assert_array_equal(out, x)


def test_reshape_root():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    out = run_all(special_program("reshape", ("i32", (2, 3, 4)), ("i32", (6, 4))), {"X": x})["Y"]
    np.testing.assert_array_equal(out, x.reshape(6, 4))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_root(axis):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    dim = x.shape[axis]
    idx = rng.integers(-dim, dim, (2, 4)).astype(np.int32)
    expected = np.take(x, idx, axis=axis)
    p = special_program(
        "gather", ("f32", (5, 3)), ("f32", expected.shape), (("axis", axis),), ("i32", (2, 4))
    )
    np.testing.assert_array_equal(run_all(p, {"X": x, "I": idx})["Y"], expected)


def test_gather_out_of_range():
    p = special_program("gather", ("f32", (5,)), ("f32", (2,)), (("axis", 0),), ("i64", (2,)))
    with pytest.raises(ExecutionError):
        run(p, {"X": np.zeros(5, np.float32), "I": np.array([0, 5])})


def test_gather_out_of_range_on_the_cpu():
    """The cpu's direct gather (into the result's buffer) checks indices the same way."""
    from .helpers import run_cpu

    p = special_program("gather", ("f32", (5,)), ("f32", (2,)), (("axis", 0),), ("i64", (2,)))
    for bad in ([0, 5], [-6, 1]):
        with pytest.raises(ExecutionError):
            run_cpu(p, {"X": np.zeros(5, np.float32), "I": np.array(bad)})
    got = run_cpu(p, {"X": np.arange(5, dtype=np.float32), "I": np.array([-1, 2])})
    if got is not None:
        np.testing.assert_array_equal(got["Y"], [4.0, 2.0])


def test_specials_per_point_of_a_block():
    """``reshape`` and ``gather`` run once per point of the enclosing block."""
    x = rng.standard_normal((3, 6)).astype(np.float32)
    xr, yr = root_ref("in", "X", "f32", (3, 6)), root_ref("out", "Y", "f32", (3, 2, 3))
    k = block(
        {"r": 3},
        [
            view("in", "X", xr.shape, "r, 0", (1, 6)),
            view("out", "Y", yr.shape, "r, 0, 0", (1, 2, 3)),
        ],
        [Special("reshape", ("X",), ("Y",))],
    )
    np.testing.assert_array_equal(
        run_all(program([xr, yr], [k]), {"X": x})["Y"], x.reshape(3, 2, 3)
    )

    t = rng.standard_normal((5, 2)).astype(np.float32)
    idx = rng.integers(0, 5, (3, 4)).astype(np.int64)
    tr, ir = root_ref("in", "T", "f32", (5, 2)), root_ref("in", "I", "i64", (3, 4))
    gr = root_ref("out", "G", "f32", (3, 4, 2))
    k = block(
        {"r": 3},
        [view("in", "T", tr.shape, "0, 0", (5, 2)), view("in", "I", ir.shape, "r, 0", (1, 4)),
         view("out", "G", gr.shape, "r, 0, 0", (1, 4, 2))],
        [Special("gather", ("T", "I"), ("G",), (("axis", 0),))],
    )  # fmt: skip
    out = run_all(program([tr, ir, gr], [k]), {"T": t, "I": idx})["G"]
    np.testing.assert_array_equal(out, np.take(t, idx, axis=0))


def test_special_output_goes_through_aggregation():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    xr, yr = root_ref("in", "X", "f32", (3, 4)), root_ref("out", "Y", "f32", (1, 4))
    k = block(
        {"r": 3},
        [view("in", "X", xr.shape, "r, 0", (1, 4)),
         view("out", "Y", yr.shape, "0, 0", (1, 4), agg="add")],
        [Special("copy", ("X",), ("Y",))],
    )  # fmt: skip
    out = run_all(program([xr, yr], [k]), {"X": x})["Y"]
    np.testing.assert_allclose(out, x.sum(axis=0, keepdims=True), rtol=1e-6)


def test_a_view_of_one_point_reads_the_elements_its_offsets_name() -> None:
    """``read_view``'s strided read of a one-point view (a folded ``Gather``'s
    table) gives exactly the elements the flat offsets name, for dense,
    strided and broadcast views; and the offsets' path is taken where the view
    would leave its storage."""
    from stripeml.ir.nodes import Refinement, TensorShape
    from stripeml.runtime.interp.memory import RefState
    from stripeml.runtime.interp.specials import element_offsets, read_view

    storage = np.arange(200, dtype=np.float32) * 0.5
    cases = [
        ((4, 5), (5, 1), 3),
        ((3, 4), (40, 2), 7),
        ((2, 3, 4), (0, 4, 1), 11),
        ((6,), (1,), 194),
    ]
    for sizes, strides, base in cases:
        ref = Refinement("in", "A", TensorShape("f32", sizes, strides))
        state = RefState(ref, storage, np.array([base], np.int64), None)
        want = storage[element_offsets(state)].reshape((1, *sizes))
        got = read_view(state)
        assert got.shape == want.shape and np.array_equal(got, want)
        got[...] = -1  # a copy: the storage is untouched
        assert storage[base] == base * 0.5
    ref = Refinement("in", "A", TensorShape("f32", (6,), (1,)))
    with pytest.raises(IndexError):
        read_view(RefState(ref, storage, np.array([195], np.int64), None))


def test_a_copy_into_a_view_of_one_point_stores_what_the_offsets_name() -> None:
    """``run_special``'s strided store (one point, a plain write of distinct
    elements) writes exactly the elements the flat offsets name; a view with
    repeated offsets takes the offsets' path."""
    from stripeml.ir.nodes import Refinement, Special, TensorShape
    from stripeml.runtime.interp.frame import write
    from stripeml.runtime.interp.memory import RefState
    from stripeml.runtime.interp.specials import element_offsets, run_special

    src = np.arange(60, dtype=np.float32) + 0.25
    for sizes, strides, base in [((3, 4), (4, 1), 0), ((3, 4), (9, 2), 5), ((2, 3), (0, 1), 2)]:
        a = Refinement("in", "A", TensorShape("f32", sizes, (sizes[1], 1)))
        b = Refinement("out", "B", TensorShape("f32", sizes, strides))
        got = np.zeros(50, np.float32)
        refs = {
            "A": RefState(a, src, np.array([7], np.int64), None),
            "B": RefState(b, got, np.array([base], np.int64), None),
        }
        run_special(Special("copy", ("A",), ("B",)), refs, write)
        want = np.zeros(50, np.float32)
        values = src[element_offsets(refs["A"])].reshape(-1)
        want[element_offsets(RefState(b, want, np.array([base], np.int64), None)).reshape(-1)] = (
            values
        )
        assert np.array_equal(got, want)
