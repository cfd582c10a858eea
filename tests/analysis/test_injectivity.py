"""Whether a block stores an element twice, against brute-force enumeration of its stores."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stripeml.analysis.injectivity import collision, stores_once
from stripeml.ir import Block, Load, Special, Store, parse

from .brute import kernels, nest_points, nests

HEAD = """block [] #program (
    in A f32(8, 8):(8, 1)
    out O f32(8, 8):(8, 1)
    out V f32(8):(1)
) {
"""


def kernel(text: str) -> Block:
    return parse(HEAD + text + "}\n").root.stmts[0]


def copy_kernel(
    idxs: str, access: str, extra: str = "", out: str = "O", size: str = "1, 1"
) -> Block:
    """A kernel storing one value through ``out[access]`` at each point of ``idxs``."""
    strides = "(8, 1)" if out == "O" else "(1)"
    return kernel(f"""  block [{idxs}] #kernel (
{extra}      out {out}[{access}]:assign f32({size}):{strides}
  ) {{
    $c = const(1.0): f32
    {out} = store($c)
  }}
""")


# -- brute force ------------------------------------------------------------------------


def brute_stores(block: Block, ref: str) -> dict[tuple, set[tuple]]:
    """Element -> the stores that reach it, each ``(statement path, point)``.

    A point is the tuple of ``(index, value)`` over the nest down to the
    statement; loads and stores reach their view's origin, specials every
    element of their views.  Nothing here uses isl.
    """
    out: dict[tuple, set[tuple]] = defaultdict(set)
    top = block.ref(ref)
    for p in nest_points([block]):
        origin = tuple(a.evaluate(p) for a in top.access)
        _visit(block.stmts, (), {ref: (origin, top.shape.sizes)}, p, [block], out)
    return out


def _visit(stmts, path: tuple, views: dict, env: dict, nest: list, out: dict) -> None:
    point = tuple((i.name, env[i.name]) for b in nest for i in b.idxs)
    for k, s in enumerate(stmts):
        here = (*path, k)
        if isinstance(s, Store) and s.ref in views:
            out[views[s.ref][0]].add((here, point))
        elif isinstance(s, Special):
            for name in s.outputs:
                if name in views:
                    origin, sizes = views[name]
                    for off in itertools.product(*(range(n) for n in sizes)):
                        out[tuple(o + x for o, x in zip(origin, off))].add((here, point))
        elif isinstance(s, Block):
            for q in nest_points([s], env):
                inner = {}
                for r in s.refs:
                    if r.dir != "none" and r.from_ in views:
                        base = views[r.from_][0]
                        origin = tuple(b + a.evaluate(q) for b, a in zip(base, r.access))
                        inner[r.into] = (origin, r.shape.sizes)
                if inner:
                    _visit(s.stmts, here, inner, q, [*nest, s], out)


def reaches(stores: dict[tuple, set[tuple]], element: tuple, point: tuple) -> bool:
    return any(p == point for _, p in stores.get(element, ()))


# -- examples ---------------------------------------------------------------------------


def test_a_transpose_stores_once():
    """Each point stores its own element: injective."""
    assert stores_once(copy_kernel("i:8, j:8", "j, i"), "O")


def test_a_reduction_index_collides():
    """``O[0, 0]`` from every ``i``: the smallest pair is the witness."""
    hit = collision(copy_kernel("i:3", "0, 0"), "O")
    assert hit is not None
    assert hit.buffer == "O" and hit.element == (0, 0)
    assert (hit.first, hit.second) == ((("i", 0),), (("i", 1),))
    assert hit.same_store


def test_a_sum_of_indices_collides_only_with_room():
    """``V[i + 2*j]`` is injective for ``i < 2``, not for ``i < 3`` (``0 + 2 = 2 + 0``)."""
    assert stores_once(copy_kernel("i:2, j:3", "i + 2*j", out="V", size="1"), "V")
    hit = collision(copy_kernel("i:3, j:2", "i + 2*j", out="V", size="1"), "V")
    assert hit is not None
    assert hit.element == (2,)
    assert (dict(hit.first), dict(hit.second)) == ({"i": 0, "j": 1}, {"i": 2, "j": 0})


def test_constraints_can_make_a_store_injective():
    """``i + j == 3`` leaves one ``j`` per ``i``: ``O[i, 0]`` is stored once."""
    block = copy_kernel("i:4, j:4", "i, 0", extra="      i + j - 3 >= 0\n      -i - j + 3 >= 0\n")
    assert stores_once(block, "O")


def test_two_statements_storing_one_element_collide_at_one_point():
    block = kernel("""  block [i:8] #kernel (
      out V[i]:assign f32(1):(1)
  ) {
    $c = const(1.0): f32
    V = store($c)
    V = store($c)
  }
""")
    hit = collision(block, "V")
    assert hit is not None and not hit.same_store
    assert hit.first == hit.second == (("i", 0),)


def test_nested_stores_are_traced_and_outer_points_are_not_compared():
    """Tiles of 4 rows: the inner block's stores decide, and split by ``o`` nothing meets."""
    block = kernel("""  block [o:2] #kernel (
      out V[4*o]:assign f32(4):(1)
  ) {
    block [i:4] (
        out V[i]:assign f32(1):(1)
    ) {
      $c = const(1.0): f32
      V = store($c)
    }
  }
""")
    assert stores_once(block, "V")
    overlapping = kernel("""  block [o:2] #kernel (
      out V[3*o]:assign f32(4):(1)
  ) {
    block [i:4] (
        out V[i]:assign f32(1):(1)
    ) {
      $c = const(1.0): f32
      V = store($c)
    }
  }
""")
    hit = collision(overlapping, "V")
    assert hit is not None and hit.element == (3,)
    assert (dict(hit.first), dict(hit.second)) == ({"o": 0, "i": 3}, {"o": 1, "i": 0})
    inner = overlapping.stmts[0]
    assert isinstance(inner, Block)
    assert stores_once(inner, "V", outer=(overlapping,))


def test_unknown_view_is_a_key_error():
    with pytest.raises(KeyError):
        collision(copy_kernel("i:8", "i, 0"), "Nope")


def test_loads_are_not_stores():
    block = kernel("""  block [i:8] #kernel (
      in A[0, 0] f32(1, 1):(8, 1)
      out V[i]:assign f32(1):(1)
  ) {
    $a = load(A)
    V = store($a)
  }
""")
    assert stores_once(block, "V")
    assert stores_once(block, "A")
    assert isinstance(block.stmts[0], Load)


# -- properties -------------------------------------------------------------------------


def _check_against_brute(block: Block, ref: str, smallest: bool) -> None:
    """The verdict of :func:`collision` is brute force's, and its witness a real collision
    (with ``smallest``: the lexicographically first, for a view with one store)."""
    stores = brute_stores(block, ref)
    colliding = {e for e, s in stores.items() if len(s) > 1}
    hit = collision(block, ref)
    assert (hit is None) == (not colliding), (hit, colliding)
    if hit is None:
        return
    assert hit.element in colliding
    assert reaches(stores, hit.element, hit.first)
    assert reaches(stores, hit.element, hit.second)
    if hit.same_store:
        assert hit.first != hit.second
    if smallest:
        assert hit.first == min(min(p for _, p in stores[e]) for e in colliding)


def _written_views(block: Block) -> list[str]:
    return [r.into for r in block.refs if r.dir in ("out", "inout")]


@settings(max_examples=300, deadline=None)
@given(block=kernels(), data=st.data())
def test_collision_matches_brute_force_on_kernels(block, data):
    views = _written_views(block)
    if not views:
        return
    _check_against_brute(block, data.draw(st.sampled_from(views)), smallest=True)


@settings(max_examples=200, deadline=None)
@given(block=nests(), data=st.data())
def test_collision_matches_brute_force_on_nests(block, data):
    views = _written_views(block)
    if not views:
        return
    _check_against_brute(block, data.draw(st.sampled_from(views)), smallest=False)


# -- the quick test: a store plainly injective needs no isl ----------------------------


@pytest.mark.parametrize(
    ("idxs", "access", "injective"),
    [
        ("i:2, j:3", "3*i + j", True),  # a mixed radix: 3 > 1 * (3 - 1)
        ("i:2, j:4", "3*i + j", False),  # j reaches 3: (0, 3) and (1, 0) meet
        ("i:4, j:2", "i + 4*j", True),  # the larger coefficient on the second index
        ("i:3, j:2", "-3*i + j + 6", True),  # a negative coefficient, reflected
        ("i:3, j:2", "i", False),  # j moves nothing
        ("i:3, j:1", "i", True),  # an index of range 1 moves nothing either
    ],
)
def test_the_quick_test_agrees_with_brute_force(idxs, access, injective, monkeypatch) -> None:
    from stripeml.analysis import injectivity

    block = copy_kernel(idxs, access, out="V", size="1")
    (store,) = [a for a in injectivity.accesses(block) if a.write]
    assert injectivity._plainly_injective(store) == injective
    want = not any(len(s) > 1 for s in brute_stores(block, "V").values())
    assert want == injective
    asked = []
    real = injectivity.pair_set
    monkeypatch.setattr(injectivity, "pair_set", lambda *a: asked.append(a) or real(*a))
    assert stores_once(block, "V") == injective
    assert bool(asked) != injective  # isl only where the quick test could not say
