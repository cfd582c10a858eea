"""The verifier: valid samples pass; each rule, when broken, raises VerifyError naming the block."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stripeml.errors import VerifyError
from stripeml.ir import (
    Affine,
    Block,
    Constant,
    Constraint,
    Index,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Special,
    Store,
    TensorShape,
    verify,
    walk_blocks,
)
from stripeml.ir.verifier import BLOCK_RULES, REF_RULES, STMT_RULES

from . import strategies as strat
from .samples import (
    SAMPLES,
    aff,
    every_statement,
    idx,
    matmul,
    padded_conv,
    param,
    program,
    tiled_cached,
    view,
)
from .strategies import programs

MATMUL = "block 'root/matmul'"
F32 = TensorShape.dense("f32", (1, 1))


def fails(p: Program, *fragments: str) -> str:
    with pytest.raises(VerifyError) as info:
        verify(p)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def kernel(p: Program) -> Block:
    return p.root.stmts[0]


def with_kernel(p: Program, **changes) -> Program:
    return Program(replace(p.root, stmts=(replace(kernel(p), **changes),) + p.root.stmts[1:]))


def with_ref(p: Program, name: str, **changes) -> Program:
    refs = tuple(replace(r, **changes) if r.into == name else r for r in kernel(p).refs)
    return with_kernel(p, refs=refs)


def with_root_ref(p: Program, name: str, **changes) -> Program:
    refs = tuple(replace(r, **changes) if r.into == name else r for r in p.root.refs)
    return Program(replace(p.root, refs=refs))


def matmul_with(*stmts) -> Program:
    return with_kernel(matmul(2, 3, 4), stmts=stmts)


def test_rule_tables_are_documented():
    rules = BLOCK_RULES + REF_RULES + [r for rs in STMT_RULES.values() for r in rs]
    assert all(r.__doc__ for r in rules)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_samples_are_valid(name: str):
    verify(SAMPLES[name]())


# -- bounds (isl) ---------------------------------------------------------------------


def test_padded_conv_in_bounds_only_with_constraints():
    verify(padded_conv(10, 3, constrained=True))
    fails(padded_conv(10, 3, constrained=False), "block 'root/conv'", "ref 'I'", "can be negative")
    only_lower = with_kernel(padded_conv(), constraints=(Constraint(aff(-1, x=1, kx=1)),))
    fails(only_lower, "ref 'I'", "can exceed the parent size 10")


def test_access_out_of_bounds():
    p = matmul(2, 3, 4)
    fails(with_ref(p, "A", access=(idx("m") + 1, idx("k"))), MATMUL, "ref 'A'", "dim 0", "exceed")
    fails(with_ref(p, "B", access=(idx("k"), idx("n") - 1)), "ref 'B'", "dim 1", "negative")
    fails(with_ref(p, "C", shape=TensorShape("f32", (1, 2), (4, 1))), "ref 'C'", "dim 1")
    # Constraints that exclude the out-of-range points make it valid.
    shifted = with_ref(p, "A", access=(idx("m") + 1, idx("k")))
    verify(with_kernel(shifted, constraints=(Constraint(aff(0, m=-1)),)))


def test_nested_bounds_use_outer_domain_and_index_offsets():
    p = tiled_cached(4, 8)
    outer = kernel(p)
    fails(with_kernel(p, idxs=(Index("io", 5),)), "block 'root/scale_tiled'", "ref 'A'", "exceed")
    # An inner block over i in [8*io, 8*io + 8) reading the whole A directly.
    a = p.root.refs[0]
    inner = Block(
        idxs=(Index("i", 8, idx("io") * 8),),
        refs=(view("in", "A", outer.refs[0], (idx("i") - idx("io") * 8,)),),
        stmts=(Load("$a", "A"),),
        name="offset",
    )
    verify(with_kernel(p, stmts=outer.stmts + (inner,)))
    bad = replace(inner, refs=(view("in", "A", outer.refs[0], (idx("i"),)),))
    fails(
        with_kernel(p, stmts=(bad,)), "block 'root/scale_tiled/offset'", "exceed the parent size 8"
    )
    assert a.shape.sizes == (32,)


def test_index_arithmetic_fits_int64():
    p = matmul(2, 3, 4)
    # Within int64 over the index ranges (m < 2): valid, if excluded by constraints.
    near = Constraint(aff(2**63 - 2, m=1))
    verify(with_kernel(p, constraints=(near,)))
    # m can be 1, so 2**63 - 1 + m wraps in 64-bit arithmetic.
    over = Constraint(aff(2**63 - 1, m=1))
    fails(with_kernel(p, constraints=(over,)), MATMUL, "past the int64 range")
    big = Constraint(aff(0, m=2**62, k=2**62))
    fails(with_kernel(p, constraints=(big,)), MATMUL, "past the int64 range")
    wide = with_ref(p, "A", access=(idx("m") * 2**62 * 4 - idx("m") * 2**64, idx("k")))
    verify(wide)  # the terms cancel exactly: m * 0
    fails(with_kernel(p, idxs=(Index("m", 2**63 + 1), Index("n", 4), Index("k", 3))), "can reach")
    # A buffer spanning more bytes than int64 holds.
    huge = TensorShape("f32", (4,), (-(2**61),))
    fails(with_root_ref(p, "A", shape=huge), "ref 'A'", "spans past the int64 range")


def test_constants_are_64_bit():
    verify(matmul_with(Constant("$c", 2**64 - 1, "u64"), Constant("$d", -(2**63), "i64")))
    fails(matmul_with(Constant("$c", -(2**80), "i64")), "constant", "past the 64-bit range")


# -- the root ----------------------------------------------------------------------------


def test_root_shape():
    p = matmul(2, 3, 4)
    fails(Program(replace(p.root, tags=frozenset())), "block 'root'", "#program")
    fails(Program(replace(p.root, idxs=(Index("i", 2),))), "no indices")
    fails(Program(replace(p.root, constraints=(Constraint(Affine()),))), "no constraints")
    fails(Program(replace(p.root, stmts=(Load("$a", "A"),))), "only blocks and specials")


def test_root_refs():
    p = matmul(2, 3, 4)
    fails(with_root_ref(p, "A", dir="inout"), "block 'root', ref 'A'", "in, out or none")
    fails(with_root_ref(p, "A", from_="B", access=(Affine(), Affine())), "refines nothing")
    fails(with_root_ref(p, "C", agg="add"), "no aggregation")


def test_const_refs():
    p = matmul(2, 3, 4)
    verify(with_root_ref(p, "A", const=True))  # a constant parameter
    fails(with_root_ref(p, "C", const=True), "block 'root', ref 'C'", "may be const")
    fails(with_ref(p, "A", const=True), "may be const")  # a view, not a parameter


def test_text_fields_are_single_line():
    fails(with_kernel(matmul(), comment="a\nb"), "comment")
    fails(with_kernel(matmul(), name="a\nb"), "name")


# -- indices and constraints ----------------------------------------------------------------


def test_index_names_unique_along_nest():
    p = matmul(2, 3, 4)
    fails(
        with_kernel(p, idxs=(Index("m", 2), Index("m", 4), Index("k", 3))), "'m' is declared twice"
    )
    outer = kernel(tiled_cached())
    fill = replace(outer.stmts[0], idxs=(Index("io", 8),))
    fails(with_kernel(tiled_cached(), stmts=(fill,)), "root/scale_tiled/fill", "shadows")
    fails(with_kernel(p, idxs=(Index("", 2), Index("n", 4), Index("k", 3))), "empty name")


def test_index_ranges_positive():
    p = matmul(2, 3, 4)
    fails(with_kernel(p, idxs=(Index("m", 0), Index("n", 4), Index("k", 3))), "range 0")


def test_index_affine_only_outer_indices():
    p = matmul(2, 3, 4)
    idxs = (Index("m", 2), Index("n", 4, idx("k")), Index("k", 3))
    fails(with_kernel(p, idxs=idxs), MATMUL, "offset uses ['k']")


def test_constraints_use_visible_indices():
    fails(
        with_kernel(matmul(), constraints=(Constraint(aff(0, q=1)),)),
        MATMUL,
        "unknown indices ['q']",
    )


# -- refinements -----------------------------------------------------------------------------


def test_ref_names_unique():
    p = matmul(2, 3, 4)
    a = kernel(p).refs[0]
    fails(with_kernel(p, refs=kernel(p).refs + (a,)), MATMUL, "'A' is declared twice")


def test_ref_shape():
    p = matmul(2, 3, 4)
    fails(with_ref(p, "A", dir="sideways"), "ref 'A'", "unknown direction")
    fails(with_root_ref(p, "A", shape=TensorShape("f31", (2, 3), (3, 1))), "unknown dtype 'f31'")
    fails(with_root_ref(p, "A", shape=TensorShape("f32", (2, 3), (1,))), "2 sizes but 1 strides")
    fails(with_root_ref(p, "A", shape=TensorShape("f32", (2, -3), (3, 1))), "negative size")
    fails(with_root_ref(p, "A", location=""), "empty memory location")
    fails(with_root_ref(p, "A", offset=-4), "negative offset")


def test_allocations():
    p = tiled_cached()
    fails(with_ref(p, "T", from_="A", access=(Affine(),)), "ref 'T'", "refines nothing")
    fails(with_ref(p, "T", agg="add"), "ref 'T'", "no aggregation")


def test_view_parent():
    p = matmul(2, 3, 4)
    fails(with_ref(p, "A", from_=""), MATMUL, "ref 'A'", "must name the parent")
    fails(with_ref(p, "A", from_="Z"), "refines 'Z'")
    fails(with_ref(p, "A", access=(idx("m"),)), "access has 1 dims")
    fails(with_ref(p, "A", shape=TensorShape("f32", (1, 1), (1, 1))), "strides (1, 1) differ")
    fails(with_ref(p, "A", shape=TensorShape("f64", (1, 1), (3, 1))), "dtype f64 differs")


def test_view_direction():
    p = tiled_cached()
    fill = kernel(p).stmts[0]
    bad_in = replace(fill, refs=(replace(fill.refs[0], dir="out", agg="assign"), fill.refs[1]))
    fails(with_kernel(p, stmts=(bad_in,)), "root/scale_tiled/fill", "must be in, not out")
    scale = kernel(p).stmts[1]
    bad_out = replace(scale, refs=(scale.refs[0], replace(scale.refs[1], dir="in", agg="")))
    fails(with_kernel(p, stmts=(bad_out,)), "root/scale_tiled/scale", "must be out, not in")
    # Children of a `none` buffer and of root refs may take any view direction.
    fill_inout = replace(fill, refs=(fill.refs[0], replace(fill.refs[1], dir="inout")))
    verify(with_kernel(p, stmts=(fill_inout,)))
    verify(with_ref(matmul(2, 3, 4), "C", dir="inout"))
    # ... except program inputs, which are read-only.
    fails(with_ref(matmul(2, 3, 4), "A", dir="out", agg="add"), "program input 'A' is read-only")


def test_aggregation():
    p = matmul(2, 3, 4)
    fails(with_ref(p, "C", agg=""), "ref 'C'", "needs an aggregation")
    fails(with_ref(p, "C", agg="sum"), "needs an aggregation")
    fails(with_ref(p, "A", agg="add"), "ref 'A'", "no aggregation")
    scale = kernel(tiled_cached()).stmts[1]
    bad = replace(scale, refs=(scale.refs[0], replace(scale.refs[1], agg="add")))
    fails(with_kernel(tiled_cached(), stmts=(bad,)), "'add' differs from the parent's 'assign'")


def test_access_names():
    fails(with_ref(matmul(), "A", access=(idx("m"), idx("q"))), "ref 'A'", "unknown indices ['q']")


# -- statements ------------------------------------------------------------------------------


def test_load():
    fails(matmul_with(Load("$a", "Z")), MATMUL, "statement 0 '$a = load(Z)'", "does not declare")
    fails(matmul_with(Load("$c", "C")), "loads from 'C', an out ref")
    fails(matmul_with(Load("a", "A")), "start with '$'")


def test_store():
    fails(matmul_with(Load("$a", "A"), Store("A", "$a")), "statement 1", "stores to 'A', an in ref")
    fails(matmul_with(Store("C", "$nope")), "'$nope' is used before it is defined")
    fails(matmul_with(Load("$a", "A"), Store("Z", "$a")), "does not declare")
    ints = (Constant("$i", 1, "i32"), Store("C", "$i"))
    fails(matmul_with(*ints), "stores a i32 value to 'C' of dtype f32")


def test_scalars_ssa_and_local():
    fails(matmul_with(Load("$a", "A"), Load("$a", "B")), "statement 1", "assigned twice")
    fails(matmul_with(Store("C", "$a"), Load("$a", "A")), "statement 0", "before it is defined")
    p = tiled_cached()
    outer = kernel(p)
    child = Block(
        refs=(view("out", "B", outer.refs[1], (Affine(),)),),
        stmts=(Store("B", "$x"),),
        name="child",
    )
    fails(
        with_kernel(p, stmts=(Constant("$x", 1.0, "f32"), child)),
        "root/scale_tiled/child",
        "'$x' is used before it is defined in this block",
    )


def test_load_index():
    verify(matmul_with(LoadIndex("$i", aff(1, m=2, k=-1))))
    fails(matmul_with(LoadIndex("$i", aff(0, q=1))), "unknown indices ['q']")


def test_constant():
    verify(matmul_with(Constant("$z", -math.inf, "f64"), Constant("$b", False, "bool")))
    fails(matmul_with(Constant("$z", 1.0, "float")), "unknown dtype 'float'")
    fails(matmul_with(Constant("$z", "1", "f32")), "not a bool, int or float")  # type: ignore[arg-type]
    fails(matmul_with(Constant("$z", math.inf, "i32")), "needs a float dtype")


def scalars(*defs: tuple[str, str]) -> tuple[Constant, ...]:
    return tuple(Constant(n, 0, t) for n, t in defs)


F = scalars(("$f", "f32"), ("$g", "f32"), ("$i", "i32"), ("$b", "bool"), ("$e", "f64"))


@pytest.mark.parametrize(
    "stmt, fragment",
    [
        (Intrinsic("frobnicate", ("$f",), "$o", "f32"), "unknown intrinsic 'frobnicate'"),
        (Intrinsic("add", ("$f",), "$o", "f32"), "add takes 2 inputs, got 1"),
        (Intrinsic("add", ("$f", "$i"), "$o", "f32"), "must all be the result dtype f32"),
        (Intrinsic("max", ("$f", "$g"), "$o", "f64"), "must all be the result dtype f64"),
        (Intrinsic("cmp_lt", ("$f", "$g"), "$o", "f32"), "cmp_lt yields bool"),
        (Intrinsic("cmp_eq", ("$f", "$i"), "$o", "bool"), "must share a dtype"),
        (Intrinsic("and", ("$b", "$i"), "$o", "bool"), "takes and yields bool"),
        (Intrinsic("not", ("$b",), "$o", "i32"), "takes and yields bool"),
        (Intrinsic("select", ("$i", "$f", "$g"), "$o", "f32"), "select condition is i32"),
        (Intrinsic("select", ("$b", "$f", "$i"), "$o", "f32"), "select branches"),
        (Intrinsic("exp", ("$i",), "$o", "i32"), "floats only"),
        (Intrinsic("add", ("$f", "$g"), "$o", "f128"), "unknown dtype 'f128'"),
        (Intrinsic("add", ("$f", "$zz"), "$o", "f32"), "'$zz' is used before"),
        (Intrinsic("bit_and", ("$f", "$g"), "$o", "f32"), "bit_and is defined on integers only, not f32"),
        (Intrinsic("bit_not", ("$f",), "$o", "f32"), "bit_not is defined on integers only"),
        (Intrinsic("shl", ("$i", "$i"), "$o", "i64"), "shl inputs ['i32', 'i32'] must all be"),
        (Intrinsic("shr", ("$b", "$b"), "$o", "bool"), "shr is defined on integers only, not bool"),
        (Intrinsic("bit_xor", ("$i", "$b"), "$o", "i32"), "must all be the result dtype i32"),
        (Intrinsic("bitcast", ("$f",), "$o", "i64"), "bitcast from f32 (32 bits) to i64 (64 bits)"),
        (Intrinsic("bitcast", ("$e",), "$o", "f32"), "changes the width"),
        (Intrinsic("bitcast", ("$i",), "$o", "bool"), "bitcast to bool is not defined"),
    ],
)  # fmt: skip
def test_intrinsic_typing(stmt: Intrinsic, fragment: str):
    fails(matmul_with(*F, stmt), MATMUL, f"statement {len(F)}", fragment)


def test_intrinsic_valid_typing():
    ok = (
        Intrinsic("cmp_ge", ("$f", "$g"), "$c", "bool"),
        Intrinsic("or", ("$c", "$b"), "$d", "bool"),
        Intrinsic("select", ("$d", "$f", "$g"), "$s", "f32"),
        Intrinsic("cast", ("$i",), "$h", "f16"),
        Intrinsic("mod", ("$i", "$i"), "$m", "i32"),
        Intrinsic("sigmoid", ("$s",), "$t", "f32"),
        Intrinsic("bit_and", ("$i", "$i"), "$u", "i32"),
        Intrinsic("shr", ("$u", "$i"), "$v", "i32"),
        Intrinsic("bit_not", ("$b",), "$w", "bool"),
        Intrinsic("bitcast", ("$v",), "$x", "f32"),
        Intrinsic("bitcast", ("$e",), "$y", "u64"),
        Intrinsic("bitcast", ("$w",), "$z", "u8"),
    )
    verify(matmul_with(*F, *ok))


def root_special(p: Program, special: Special) -> Program:
    return Program(replace(p.root, stmts=p.root.stmts[:1] + (special,)))


def test_special():
    p = every_statement()
    fails(
        root_special(p, Special("sort", ("T",), ("Y",))),
        "block 'root', statement 1",
        "unknown special",
    )
    fails(root_special(p, Special("copy", ("T", "X"), ("Y",))), "copy takes 1 inputs and 1 outputs")
    fails(root_special(p, Special("copy", ("Q",), ("Y",))), "reads 'Q', which this block")
    fails(root_special(p, Special("copy", ("T",), ("X",))), "writes 'X', an in ref")
    fails(root_special(p, Special("gather", ("R", "I"), ("G",))), "integer param 'axis'")
    fails(root_special(p, Special("gather", ("R", "I"), ("G",), (("axis", 1.0),))), "param 'axis'")


def test_special_shapes():
    p = every_statement()
    fails(root_special(p, Special("copy", ("T",), ("R",))), "copy between sizes (6,) and (2, 3)")
    small = with_root_ref(p, "R", shape=TensorShape.dense("f32", (2, 2)))
    fails(root_special(small, Special("reshape", ("T",), ("R",))), "reshape from 6 to 4 elements")
    fails(root_special(p, Special("gather", ("R", "I"), ("G",), (("axis", 1),))), "expected (2, 2)")
    fails(
        root_special(p, Special("gather", ("R", "I"), ("G",), (("axis", 2),))),
        "axis 2 out of range",
    )
    fails(root_special(p, Special("gather", ("R", "X"), ("G",), (("axis", 0),))), "not an integer")
    verify(root_special(p, Special("gather", ("R", "I"), ("G",), (("axis", -2),))))


def _with_special(special: Special) -> Program:
    p = SAMPLES["scatter_topk"]()
    return Program(replace(p.root, stmts=(special,)))


def test_scatter_topk_params():
    """Integer params required; word params absent or one of their words."""
    scatter = Special("scatter", ("X", "I", "U"), ("S",), (("axis", 1),))
    verify(_with_special(scatter))  # reduce defaults to none
    fails(_with_special(replace(scatter, params=())), "scatter needs an integer param 'axis'")
    fails(
        _with_special(replace(scatter, params=(("axis", 1), ("reduce", "sum")))),
        "scatter param 'reduce' must be one of 'none', 'add', 'mul', 'max', 'min', not 'sum'",
    )
    fails(
        _with_special(replace(scatter, params=(("axis", 1), ("reduce", 1)))),
        "param 'reduce' must be one of",
    )
    fails(_with_special(replace(scatter, inputs=("X", "I"))), "scatter takes 3 inputs")
    topk = Special("topk", ("N",), ("K",), (("axis", 1), ("k", 3)))
    verify(_with_special(topk))
    fails(_with_special(replace(topk, params=(("axis", 1),))), "topk needs an integer param 'k'")
    fails(
        _with_special(replace(topk, params=(("axis", 1), ("k", 3), ("order", "biggest")))),
        "topk param 'order' must be one of 'largest', 'smallest', not 'biggest'",
    )
    fails(_with_special(Special("scatter_nd", ("S", "J", "V"), ("N",), (("reduce", ("add",)),))))


def test_scatter_shapes():
    p = SAMPLES["scatter_topk"]()

    def sp(x="X", i="I", u="U", y="S", axis=1):
        return _with_special(Special("scatter", (x, i, u), (y,), (("axis", axis),)))

    fails(sp(i="U"), "scatter indices have dtype f32, not an integer")
    fails(sp(u="I"), "scatter updates have dtype i64, not the source's f32")
    fails(sp(y="K"), "scatter result dtype i64 differs")
    fails(sp(axis=2), "scatter axis 2 out of range for rank 2")
    fails(sp(i="J", u="V"), "scatter updates have sizes (3, 5), not the indices' (3, 1)")
    verify(sp(axis=-1))
    verify(sp(axis=0))
    tall = with_root_ref(p, "I", shape=TensorShape.dense("i64", (6, 2)))
    tall = with_root_ref(tall, "U", shape=TensorShape.dense("f32", (6, 2)))
    tall = Program(replace(tall.root, stmts=sp().root.stmts))
    fails(tall, "indices of sizes (6, 2) exceed the source's (4, 5) off axis 1")
    flat = with_root_ref(p, "I", shape=TensorShape.dense("i64", (8,)))
    flat = Program(replace(flat.root, stmts=sp().root.stmts))
    fails(flat, "scatter indices have rank 1, not the source's 2")


def test_scatter_nd_shapes():
    def sp(x="S", i="J", u="V", y="N"):
        return _with_special(Special("scatter_nd", (x, i, u), (y,)))

    verify(sp())
    fails(sp(i="V"), "scatter_nd indices have dtype f32")
    fails(sp(u="U"), "scatter_nd updates have sizes (4, 2), expected (3, 5)")
    p = with_root_ref(SAMPLES["scatter_topk"](), "J", shape=TensorShape.dense("i32", (3, 3)))
    fails(Program(replace(p.root, stmts=sp().root.stmts)), "tuples of length 3 exceed")
    p = with_root_ref(SAMPLES["scatter_topk"](), "J", shape=TensorShape.dense("i32", ()))
    fails(Program(replace(p.root, stmts=sp().root.stmts)), "scatter_nd indices have rank 0")


def test_topk_shapes():
    def sp(axis=1, k=3, y="K", x="N"):
        return _with_special(Special("topk", (x,), (y,), (("axis", axis), ("k", k))))

    verify(sp(axis=-1))
    fails(sp(y="S"), "topk result dtype f32 is not i64")
    fails(sp(k=6), "topk k=6 is not in [0, 5] (the size of axis 1)")
    fails(sp(k=-1), "topk k=-1 is not in [0, 5]")
    fails(sp(axis=0), "topk result has sizes (4, 3), expected (3, 5)")
    fails(sp(axis=-3), "topk axis -3 out of range for rank 2")


def test_specials_inside_kernels():
    """In a kernel, a special reads in/inout/none refs and writes out/inout/none refs."""
    x, y = param("in", "X", (4,)), param("out", "Y", (4,))
    k = Block(
        refs=(view("in", "X", x, (Affine(),), (4,)), view("out", "Y", y, (Affine(),), (4,))),
        stmts=(Special("copy", ("X",), ("Y",)),),
        name="k",
    )
    verify(program((x, y), k))
    back = replace(k, stmts=(Special("copy", ("Y",), ("X",)),))
    fails(program((x, y), back), "block 'root/k', statement 0", "reads 'Y', an out ref")


def test_not_a_program():
    with pytest.raises(VerifyError):
        verify(Block())  # type: ignore[arg-type]


def test_unnamed_blocks_are_labelled_by_position():
    p = with_kernel(matmul(2, 3, 4), name="", stmts=(Load("$a", "Z"),))
    fails(p, "block 'root/<0>' (// C[m, n : M, N]")


# -- properties -------------------------------------------------------------------------------

coeffs = st.integers(-3, 3)


@settings(max_examples=150, deadline=None)
@given(
    st.tuples(st.integers(1, 4), st.integers(1, 4)),
    st.lists(st.tuples(coeffs, coeffs, st.integers(-4, 4)), max_size=2),
    st.tuples(coeffs, coeffs, st.integers(-3, 6)),
    st.integers(1, 3),
    st.integers(1, 9),
)
def test_bounds_agree_with_enumeration(ranges, cons, access, size, parent_size):
    """The isl bounds verdict equals brute force over the points of a small block."""
    a = param("in", "A", (parent_size,))
    expr = aff(access[2], x=access[0], y=access[1])
    block = Block(
        idxs=(Index("x", ranges[0]), Index("y", ranges[1])),
        constraints=tuple(Constraint(aff(c, x=cx, y=cy)) for cx, cy, c in cons),
        refs=(view("in", "A", a, (expr,), (size,)),),
        name="k",
    )
    points = [
        (x, y)
        for x, y in itertools.product(range(ranges[0]), range(ranges[1]))
        if all(cx * x + cy * y + c >= 0 for cx, cy, c in cons)
    ]
    ok = all(0 <= expr.evaluate({"x": x, "y": y}) <= parent_size - size for x, y in points)
    p = program((a,), block)
    if ok:
        verify(p)
    else:
        fails(p, "block 'root/k', ref 'A'")


def as_root(p: Program) -> Program:
    root = replace(p.root, tags=p.root.tags | {"program"}, idxs=(), constraints=())
    return Program(root)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(programs, programs.map(as_root)))
def test_random_programs_only_raise_verify_error(p: Program):
    try:
        verify(p)
    except VerifyError:
        pass


REF_FIELDS = {
    "dir": strat.refinements.map(lambda r: r.dir),
    "from_": st.sampled_from(["", "A", "B", "C", "T", "Q"]),
    "access": st.lists(
        st.builds(aff, st.integers(-40, 40), m=coeffs, k=coeffs, io=coeffs, i=coeffs), max_size=3
    ).map(tuple),
    "agg": strat.refinements.map(lambda r: r.agg),
    "shape": strat.shapes,
    "offset": st.one_of(st.none(), st.integers(-2, 2**70)),
}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(SAMPLES)), st.data())
def test_mutated_samples_only_raise_verify_error(name: str, data: st.DataObject):
    """Replace one field of one refinement of a sample: VerifyError or valid, never a crash."""
    p = SAMPLES[name]()
    blocks = [b for b in walk_blocks(p.root) if b.refs]
    target = data.draw(st.sampled_from(blocks))
    ref = data.draw(st.sampled_from(target.refs))
    key = data.draw(st.sampled_from(sorted(REF_FIELDS)))
    new_ref = replace(ref, **{key: data.draw(REF_FIELDS[key])})
    new_block = replace(target, refs=tuple(new_ref if r is ref else r for r in target.refs))

    def rebuild(block: Block) -> Block:
        if block is target:
            return new_block
        return block.with_stmts(
            tuple(rebuild(s) if isinstance(s, Block) else s for s in block.stmts)
        )

    try:
        verify(Program(rebuild(p.root)))
    except VerifyError:
        pass


def _verdict(p: Program) -> str:
    try:
        verify(p)
    except VerifyError as exc:
        return str(exc)
    return "valid"


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(SAMPLES)), st.data())
def test_box_bounds_agree_with_isl(name: str, data: st.DataObject):
    """The verifier's exact shortcut for box nests (no constraints, no index offsets)
    gives the same verdict and message as asking isl, on samples whose view
    accesses are shifted at random."""
    from stripeml.ir import verifier

    p = SAMPLES[name]()
    views = [(b, r) for b in walk_blocks(p.root) for r in b.refs if r.from_ and r.access]
    if not views:
        return
    block, ref = data.draw(st.sampled_from(views))
    shifts = data.draw(
        st.lists(st.integers(-3, 3), min_size=len(ref.access), max_size=len(ref.access))
    )
    moved = replace(ref, access=tuple(a + s for a, s in zip(ref.access, shifts)))

    def swap(b: Block) -> Block:
        if b is block:
            return replace(b, refs=tuple(moved if r is ref else r for r in b.refs))
        return replace(b, stmts=tuple(swap(s) if isinstance(s, Block) else s for s in b.stmts))

    q = Program(swap(p.root))
    fast = _verdict(q)
    original = verifier.Scope.box
    verifier.Scope.box = lambda self: None  # isl for every nest
    try:
        slow = _verdict(q)
    finally:
        verifier.Scope.box = original
    assert fast == slow
