"""Hypothesis strategies for Stripe IR nodes (structurally random, not necessarily valid).

``programs()`` draws programs that exercise every field of every node with
awkward values: names that are keywords or need quoting, comments with
newlines and quotes, float specials, unusual directions and locations.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

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
)
from stripeml.ir.dtypes import DTYPES
from stripeml.ir.intrinsics import INTRINSICS
from stripeml.ir.nodes import AGGREGATIONS, DIRECTIONS
from stripeml.ir.printer import KEYWORDS

plain_names = st.sampled_from(["x", "i", "kx", "A", "B_1", "t.0", "_", "ZZ"])
names = st.one_of(
    plain_names,
    plain_names.map(lambda s: "$" + s),
    st.sampled_from(sorted(KEYWORDS) + ["true", "inf", "nan", "", "$", "$0", "1x", "a-b", "é"]),
    st.text(max_size=4),
)
small = st.integers(-3, 40)
ints = st.one_of(small, st.integers(-(2**63), 2**63 - 1))  # IR integers are int64
affines = st.builds(
    Affine.build, st.dictionaries(names, st.integers(-9, 9), max_size=3), st.integers(-99, 99)
)
floats = st.one_of(
    st.floats(allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e300]),
)
scalars = st.one_of(st.booleans(), ints, floats)
param_values = st.one_of(
    ints,
    floats,
    st.booleans(),
    st.text(max_size=6),
    st.tuples(),
    st.lists(small, max_size=3).map(tuple),
)
dtypes = st.one_of(st.sampled_from(sorted(DTYPES)), names)
int_tuples = st.lists(small, max_size=3).map(tuple)

indices = st.builds(Index, names, small, st.one_of(st.none(), affines))
constraints = st.builds(Constraint, affines)
shapes = st.builds(TensorShape, dtypes, int_tuples, int_tuples)
refinements = st.builds(
    Refinement,
    dir=st.one_of(st.sampled_from(DIRECTIONS), names),
    into=names,
    shape=shapes,
    from_=st.one_of(st.just(""), names),
    access=st.lists(affines, max_size=3).map(tuple),
    agg=st.one_of(st.sampled_from(AGGREGATIONS), names),
    location=st.one_of(st.sampled_from(["DRAM", "L1", "SHARED", ""]), names),
    offset=st.one_of(st.none(), ints),
    const=st.booleans(),
)
name_tuples = st.lists(names, max_size=3).map(tuple)
leaf_stmts = st.one_of(
    st.builds(Load, names, names),
    st.builds(Store, names, names),
    st.builds(LoadIndex, names, affines),
    st.builds(Constant, names, scalars, dtypes),
    st.builds(
        Intrinsic, st.one_of(st.sampled_from(sorted(INTRINSICS)), names), name_tuples, names, dtypes
    ),
    st.builds(
        Special,
        st.one_of(st.sampled_from(["copy", "reshape", "gather"]), names),
        name_tuples,
        name_tuples,
        st.lists(st.tuples(names, param_values), max_size=3).map(tuple),
    ),
)
comments = st.one_of(
    st.just(""), st.text(max_size=12), st.sampled_from(['"q"', " lead", "tail ", "a\nb"])
)


def blocks(stmts: st.SearchStrategy) -> st.SearchStrategy[Block]:
    return st.builds(
        Block,
        idxs=st.lists(indices, max_size=3).map(tuple),
        refs=st.lists(refinements, max_size=3).map(tuple),
        stmts=st.lists(stmts, max_size=4).map(tuple),
        constraints=st.lists(constraints, max_size=2).map(tuple),
        tags=st.frozensets(names, max_size=3),
        name=st.one_of(st.just(""), names),
        comment=comments,
    )


statements = st.recursive(leaf_stmts, lambda inner: st.one_of(inner, blocks(inner)), max_leaves=12)
programs = st.builds(Program, blocks(statements))
