"""The one access model: ``uses`` (a buffer seen from its block) and ``accesses`` (a block's
views seen from its parent), against brute-force enumeration through nested views."""

from __future__ import annotations

from hypothesis import given, settings

from stripeml.analysis.access import accesses, touched, uses
from stripeml.ir import Affine, Block, parse

from .brute import brute_touches, elements, nest_points, nests


def enumerate_accesses(accs, outer_point: dict) -> set[tuple[int, str, tuple, bool]]:
    """``(stmt, buffer, element, is_write)`` of ``accs`` at one point of the enclosing nest."""
    out = set()
    for a in accs:
        for p in nest_points(a.path, outer_point):
            out.update((a.stmt, a.buffer, e, a.write) for e in elements(a.exprs, a.sizes, p))
    return out


@settings(max_examples=150, deadline=None)
@given(nests())
def test_accesses_through_the_views_of_a_kernel(kernel: Block) -> None:
    """Seen from the parent: every load, store and special below the kernel, no priors."""
    found = enumerate_accesses(accesses(kernel), {})
    want = set()
    for p in nest_points([kernel]):
        views = {
            r.into: (r.from_, tuple(a.evaluate(p) for a in r.access), r.shape.sizes)
            for r in kernel.refs
            if r.dir != "none"
        }
        want |= {(0, b, e, w) for _, b, e, w in brute_touches(kernel.stmts, views, p, False)}
    assert found == want


@settings(max_examples=150, deadline=None)
@given(nests())
def test_uses_of_each_view_at_each_point(kernel: Block) -> None:
    """Seen from the kernel: per point and statement, with the prior reads of inout views."""
    for r in kernel.refs:
        found = uses(kernel.stmts, r.into, r.shape.sizes)
        assert all(a.buffer == r.into for a in found)
        for p in nest_points([kernel]):
            zero = tuple(0 for _ in r.access)
            views = {r.into: (r.into, zero, r.shape.sizes)}
            assert enumerate_accesses(found, p) == brute_touches(kernel.stmts, views, p, True)


def test_the_two_ways_in_name_views_and_kinds() -> None:
    program = parse("""block [] #program (
    in A f32(4):(1)
    out C f32(4):(1)
) {
  block k [i:2] #kernel (
      in A[2*i] f32(2):(1)
      inout C[2*i]:add f32(2):(1)
  ) {
    block [j:2] (
        in X = A[j] f32(1):(1)
        inout Y = C[j]:add f32(1):(1)
        none P f32(1):(1)
    ) {
      $x = load(X)
      Y = store($x)
      P = store($x)
    }
    special copy(A) -> (C)
  }
}
""")
    (kernel,) = program.root.sub_blocks
    seen = [(a.buffer, a.ref, a.kind, len(a.path), a.agg) for a in accesses(kernel)]
    assert seen == [
        ("A", "A", "load", 2, ""),
        ("C", "C", "store", 2, "add"),
        ("A", "A", "read", 1, ""),
        ("C", "C", "write", 1, "add"),
    ]
    c = [
        (a.ref, a.kind, a.stmt, [str(e) for e in a.exprs], a.sizes)
        for a in uses(kernel.stmts, "C", (2,))
    ]
    assert c == [
        ("Y", "prior", 0, ["j"], (1,)),
        ("Y", "store", 0, ["j"], (1,)),
        ("C", "write", 1, ["0"], (2,)),
    ]
    # From the root, the kernel's inout view is a prior read of C's two elements per point.
    (prior, *_) = uses(program.root.stmts, "C", (4,))
    assert (prior.kind, prior.ref, [str(e) for e in prior.exprs]) == ("prior", "C", ["2*i"])
    # Elements of C touched at each point of the kernel: the whole view [2i, 2i + 2).
    box = touched(prior, ())
    assert box.count_val().to_python() == 4
    assert not uses(kernel.sub_blocks[0].stmts, "P", (1,))[0].path  # a direct store


def test_private_buffers_are_not_listed() -> None:
    (kernel,) = parse("""block [] #program (
    in A f32(4):(1)
) {
  block k [i:4] #kernel (
      in A[i] f32(1):(1)
      none T f32(1):(1)
  ) {
    block [] (
        in X = A[0] f32(1):(1)
        out S = T[0]:assign f32(1):(1)
    ) {
      $x = load(X)
      S = store($x)
    }
  }
}
""").root.sub_blocks
    assert [(a.buffer, a.kind) for a in accesses(kernel)] == [("A", "load")]
    (store,) = uses(kernel.stmts, "T", (1,))
    assert (store.ref, store.kind, store.exprs) == ("S", "store", (Affine(),))
