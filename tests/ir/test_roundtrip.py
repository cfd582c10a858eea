"""The Stripe IR text format: ``parse(format(p)) == p`` and ``format(parse(t)) == t``."""

from __future__ import annotations

import math
import pickle

import pytest
from hypothesis import HealthCheck, given, settings

import stripeml
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
    Refinement,
    Special,
    Store,
    TensorShape,
    format,
    parse,
)

from .samples import SAMPLES, aff, matmul, program
from .strategies import programs


def round_trip(p: Program) -> str:
    text = format(p)
    back = parse(text)
    assert back == p
    assert format(back) == text
    # the disk cache pickles optimised programs (their own state: field values in
    # order); compared as text, the exact form (a NaN constant is not equal to itself)
    again = pickle.loads(pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL))
    assert isinstance(again, Program) and format(again) == text
    return text


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_samples(name: str):
    round_trip(SAMPLES[name]())


def test_public_names():
    assert stripeml.ir.format is format and stripeml.ir.parse is parse


MATMUL_TEXT = """\
block [] #program (
    in A f32(2, 3):(3, 1)
    in B f32(3, 4):(4, 1)
    out C f32(2, 4):(4, 1)
) {
  block matmul [m:2, n:4, k:3] #agg_add #contraction #kernel (  // C[m, n : M, N] = +(A[m, k] * B[k, n])
      in A[m, k] f32(1, 1):(3, 1)
      in B[k, n] f32(1, 1):(4, 1)
      out C[m, n]:add f32(1, 1):(4, 1)
  ) {
    $a = load(A)
    $b = load(B)
    $c = mul($a, $b): f32
    C = store($c)
  }
}
"""


def test_golden_matmul():
    assert round_trip(matmul(2, 3, 4)) == MATMUL_TEXT


def shape(*sizes: int) -> TensorShape:
    return TensorShape.dense("f32", sizes)


def test_every_field():
    """Names, comments, locations, offsets, negative coefficients, from/into variants."""
    inner = Block(
        idxs=(Index("i", 4, aff(-1, io=-3, j=2)), Index("in", 2)),
        constraints=(Constraint(aff(7, i=-1)), Constraint(Affine.build({"in": -2}))),
        refs=(
            Refinement("in", "a", shape(3), from_="A", access=(aff(-2, i=1),)),
            Refinement("out", "B", shape(), from_="B", access=(), agg="max"),
            Refinement("inout", "c d", shape(2), from_="", access=(aff(1),), agg="mul"),
            Refinement("none", "T", shape(4, 4), location="SHARED", offset=256),
            Refinement("none", "U", shape(1), location="DRAM", offset=0),
            Refinement("none", "V", shape(1), location="", offset=-8),
            Refinement("bogus", "W", TensorShape("weird type", (1, 2), (3,))),
        ),
        stmts=(
            Load("$x", "a"),
            LoadIndex("$n", aff(0, i=-1)),
            Store("T", "$x"),
        ),
        tags=frozenset({"z", "a", "with space", "in"}),
        name="inner.0",
        comment='"quoted" at the start',
    )
    root = Block(
        refs=(Refinement("in", "A", shape(8)), Refinement("out", "block", shape(3))),
        stmts=(Block(idxs=(Index("io", 2), Index("j", 3)), stmts=(inner,)),),
        tags=frozenset({"program"}),
        name="a name with spaces",
        comment="multi\nline\tcomment",
    )
    text = round_trip(Program(root))
    assert '"in":2' in text and "@SHARED:256" in text and "@DRAM:0" in text
    assert '@"":-8' in text and 'inout "c d" = ""[1]:mul' in text
    assert "out B[]:max f32():()" in text and '"bogus" W "weird type"(1, 2):(3)' in text


@pytest.mark.parametrize(
    "value, dtype, text",
    [
        (math.inf, "f32", "inf"),
        (-math.inf, "f64", "-inf"),
        (math.nan, "f32", "nan"),
        (-0.0, "f32", "-0.0"),
        (0.1, "f64", "0.1"),
        (1e-300, "f64", "1e-300"),
        (5e-324, "f64", "5e-324"),
        (1.7976931348623157e308, "f64", "1.7976931348623157e+308"),
        (3, "f32", "3"),
        (-(2**63), "i64", str(-(2**63))),
        (2**64 - 1, "u64", str(2**64 - 1)),
        (True, "bool", "true"),
        (False, "bool", "false"),
    ],
)
def test_constants(value, dtype: str, text: str):
    p = program((), Block(stmts=(Constant("$c", value, dtype),)))
    out = round_trip(p)
    assert f"$c = const({text}): {dtype}" in out
    back = parse(out).root.stmts[0].stmts[0]
    assert type(back.value) is type(value)
    if isinstance(value, float) and not math.isnan(value):
        assert math.copysign(1, back.value) == math.copysign(1, value)


def test_specials_and_intrinsics():
    stmts = (
        Special("copy", ("X",), ("Y",)),
        Special("gather", ("X", "I"), ("Y",), (("axis", -1),)),
        Special(
            "custom",
            (),
            (),
            (
                ("f", 2.5),
                ("s", 'a "b"\n'),
                ("t", (1, -2, 3)),
                ("one", (7,)),
                ("e", ()),
                ("b", True),
            ),
        ),
        Block(stmts=(Intrinsic("select", ("$c", "$a", "$b"), "$s", "f16"),)),
        Block(stmts=(Intrinsic("load", (), "$weird", "i8"), Intrinsic("$op", ("$x",), "y", "u8"))),
    )
    text = round_trip(program((), *stmts))
    assert "special gather(X, I) -> (Y) {axis=-1}" in text
    assert "t=(1, -2, 3), one=(7,), e=(), b=true}" in text
    assert '$weird = "load"(): i8' in text


def test_empty_and_minimal_blocks():
    assert round_trip(Program(Block())) == "block [] () {\n}\n"
    round_trip(program((), Block(comment="only a comment")))
    round_trip(program((), Block(constraints=(Constraint(Affine()),))))


def test_whitespace_and_comments_are_free():
    text = """
    // a program written by hand
    block[]#program(in A f32(4):(1) out B f32(4):(1)){block k[i:4]#kernel( // kernel comment
    in A[i] f32(1):(1)   // not a block comment
    out B[i]:assign f32(1):(1)){$a=load(A)
    B=store($a)}}
    """
    p = parse(text)
    kernel = p.root.stmts[0]
    assert kernel.comment == "kernel comment" and p.root.comment == ""
    assert kernel.name == "k" and kernel.refs[1].agg == "assign"
    round_trip(p)


def test_crlf_and_hand_written_constraints():
    text = "block [] #program ( // c\r\n) {\r\n  block [x:4] (\r\n    x >= 1\r\n    3 - x >= -1\r\n  ) {\r\n  }\r\n}\r\n"
    p = parse(text)
    assert p.root.comment == "c"
    inner = p.root.stmts[0]
    assert [c.expr for c in inner.constraints] == [aff(-1, x=1), aff(4, x=-1)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_random_programs_round_trip(p: Program):
    round_trip(p)
