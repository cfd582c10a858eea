"""Domains of nests as isl sets and affines, against brute-force enumeration."""

from __future__ import annotations

import islpy as isl
from hypothesis import given, settings

from stripeml.analysis.domain import (
    bounding_box,
    domain_in,
    inequalities_of,
    nest_domain,
    nest_inequalities,
    nest_names,
    project_onto,
)
from stripeml.ir import Affine, Block, Constraint, Index
from stripeml.ir.isl import constrain, set_space

from .brute import kernels, nest_points


def isl_points(domain) -> set[tuple[int, ...]]:
    found: set[tuple[int, ...]] = set()
    n = domain.dim(isl.dim_type.set)

    def add(p):
        found.add(tuple(p.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(n)))

    domain.to_set().foreach_point(add)
    return found


def brute(blocks) -> set[tuple[int, ...]]:
    names = nest_names(blocks)
    return {tuple(p[n] for n in names) for p in nest_points(blocks)}


X = Affine.index
OUTER = Block(idxs=(Index("o", 3),), constraints=())
INNER = Block(
    idxs=(Index("i", 4, X("o", 2)), Index("j", 3)),
    constraints=(Constraint(X("i") - X("j") - 1),),
)


def test_nest_with_offsets_and_constraints() -> None:
    assert nest_names([OUTER, INNER]) == ("o", "i", "j")
    assert isl_points(nest_domain([OUTER, INNER])) == brute([OUTER, INNER])
    assert isl_points(domain_in(("o", "i", "j"), [OUTER, INNER])) == brute([OUTER, INNER])


def test_renamed_copy_and_free_dimensions() -> None:
    d = domain_in(("p'o", "extra"), [OUTER], rename={"o": "p'o"})
    d = constrain(d, [X("extra"), 1 - X("extra")])
    assert isl_points(d) == {(o, e) for o in range(3) for e in range(2)}


def test_bounding_box() -> None:
    assert bounding_box(nest_domain([OUTER, INNER])) == {"o": (0, 2), "i": (1, 7), "j": (0, 2)}
    empty = Block(idxs=(Index("i", 2),), constraints=(Constraint(X("i") - 5),))
    assert bounding_box(nest_domain([empty])) is None


def test_projection_back_to_affines() -> None:
    tri = Block(idxs=(Index("a", 4), Index("b", 4)), constraints=(Constraint(X("a") - X("b")),))
    d = nest_domain([tri])
    proj = project_onto(d, ["b"])
    assert isl_points(proj) == {(b,) for b in range(4)}
    exprs = inequalities_of(d)
    assert exprs is not None
    back = constrain(isl.BasicSet.universe(set_space(("a", "b"))), exprs)
    assert isl_points(back) == brute([tri])


def test_strided_projection_has_no_affine_form() -> None:
    space = set_space(("i", "j"))
    d = constrain(
        isl.BasicSet.universe(space), [X("j"), 3 - X("j"), X("i") - 2 * X("j"), 2 * X("j") - X("i")]
    )
    assert inequalities_of(project_onto(d, ["i"])) is None


@settings(max_examples=60, deadline=None)
@given(kernels())
def test_random_kernel_domains(block: Block) -> None:
    assert isl_points(nest_domain([block])) == brute([block])
    exprs = nest_inequalities([block])
    names = nest_names([block])
    assert {
        p for p in isl_points(constrain(isl.BasicSet.universe(set_space(names)), exprs))
    } == brute([block])
