"""Stripe IR nodes: immutable values.

A :class:`Program` is a tree of :class:`Block`.  Every node is a frozen
dataclass; children are tuples and tags are frozensets, so nodes hash and
compare structurally and a pass that changes nothing can return the very same
object (``new is old``).  Use :func:`dataclasses.replace` (or the ``with_*``
helpers) to build changed nodes.

Semantics in brief (``docs/stripe-ir.md`` is the full reference):

* A block runs its statements once for every integer point of its index box
  that satisfies all its constraints (``expr >= 0``).  Points are unordered.
* An index ``i: R`` ranges over ``0..R-1``; ``i: R = aff`` ranges over
  ``aff + 0..R-1`` where ``aff`` is affine in the *enclosing* blocks' indices.
* A refinement makes a buffer visible to the block.  A view (``dir`` ``in``,
  ``out``, ``inout``) refines the parent's buffer ``from_``: its origin is at
  ``access`` (one affine per dimension, in this block's and outer indices)
  relative to the parent's origin; its ``shape.strides`` are the parent's.
  ``none`` allocates fresh memory per point of the enclosing block; root-level
  refs are the program's parameters (``in``/``out``) and temporaries (``none``).
  A root ``in`` marked ``const`` holds the same values at every run.
* ``load``/``store`` access the element at a view's origin.  Stores go through
  the ref's aggregation: all values stored to one element by all points of the
  block (and blocks nested in it) are combined with ``agg``; the combined value
  is written when the parent ref has no aggregation.  Elements never stored
  keep their previous contents.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import Union

from .affine import Affine

DIRECTIONS = ("in", "out", "inout", "none")
AGGREGATIONS = ("", "assign", "add", "max", "min", "mul")
DEFAULT_LOCATION = "DRAM"


@dataclass(frozen=True, slots=True)
class Index:
    """A block index: ``name`` ranges over ``affine + [0, range)``."""

    name: str
    range: int
    affine: Affine | None = None


@dataclass(frozen=True, slots=True)
class Constraint:
    """The block's points satisfy ``expr >= 0``."""

    expr: Affine


@dataclass(frozen=True, slots=True)
class TensorShape:
    """Element type and per-dimension size and stride (in elements)."""

    dtype: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.sizes)

    @property
    def elem_count(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    @property
    def extent(self) -> int:
        """Elements of memory spanned: 1 + sum((size - 1) * stride)."""
        if any(s == 0 for s in self.sizes):
            return 0
        return 1 + sum((s - 1) * abs(st) for s, st in zip(self.sizes, self.strides))

    @staticmethod
    def dense(dtype: str, sizes: tuple[int, ...]) -> TensorShape:
        strides = []
        acc = 1
        for s in reversed(sizes):
            strides.append(acc)
            acc *= max(s, 1)
        return TensorShape(dtype, tuple(sizes), tuple(reversed(strides)))


@dataclass(frozen=True, slots=True)
class Refinement:
    """A buffer visible in a block (see the module docstring)."""

    dir: str
    into: str
    shape: TensorShape
    from_: str = ""
    access: tuple[Affine, ...] = ()
    agg: str = ""
    location: str = DEFAULT_LOCATION
    offset: int | None = None
    # A root parameter whose contents are the same at every run (bound when the
    # function was compiled): what is computed from it alone may be computed once.
    const: bool = False

    @property
    def is_view(self) -> bool:
        return bool(self.from_)


@dataclass(frozen=True, slots=True)
class Load:
    """``into = load(ref)``: the element at the view's origin."""

    into: str
    ref: str


@dataclass(frozen=True, slots=True)
class Store:
    """``ref = store(value)``: through the ref's aggregation."""

    ref: str
    value: str


@dataclass(frozen=True, slots=True)
class LoadIndex:
    """``into = index(expr)``: the value of an affine of visible indices (dtype i64)."""

    into: str
    expr: Affine


# The value of a scalar constant (``const(value)``).
Scalar = Union[int, float, bool]


@dataclass(frozen=True, slots=True)
class Constant:
    """``into = const(value): dtype``."""

    into: str
    value: Scalar
    dtype: str


@dataclass(frozen=True, slots=True)
class Intrinsic:
    """``into = op(inputs...): dtype`` on scalars (see :mod:`stripeml.ir.intrinsics`)."""

    op: str
    inputs: tuple[str, ...]
    into: str
    dtype: str


# A special's param: a scalar, a string, or a tuple of params (the text format's values).
ParamValue = Union[int, float, str, tuple["ParamValue", ...]]


@dataclass(frozen=True, slots=True)
class Special:
    """A whole-buffer operation that is not affine (``reshape``, ``gather`` ...)."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[tuple[str, ParamValue], ...] = ()

    def int_param(self, key: str, default: int = 0) -> int:
        """Param ``key`` as an int (``default`` when absent); the verifier checks that
        the params an op needs are integers."""
        value = dict(self.params).get(key, default)
        if isinstance(value, tuple):
            raise TypeError(f"special {self.op!r}: param {key!r} is a tuple, not an integer")
        return int(value)


@dataclass(frozen=True, slots=True)
class Block:
    """A nest level: indices, constraints, refinements, statements, tags."""

    idxs: tuple[Index, ...] = ()
    refs: tuple[Refinement, ...] = ()
    stmts: tuple[Statement, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    tags: frozenset[str] = field(default_factory=frozenset)
    name: str = ""
    comment: str = ""

    def ref(self, name: str) -> Refinement:
        for r in self.refs:
            if r.into == name:
                return r
        raise KeyError(name)

    def idx(self, name: str) -> Index:
        for i in self.idxs:
            if i.name == name:
                return i
        raise KeyError(name)

    def has_tags(self, *tags: str) -> bool:
        return all(t in self.tags for t in tags)

    @property
    def sub_blocks(self) -> tuple[Block, ...]:
        return tuple(s for s in self.stmts if isinstance(s, Block))

    def with_stmts(self, stmts: tuple[Statement, ...]) -> Block:
        return self if stmts == self.stmts else replace(self, stmts=tuple(stmts))


Statement = Union[Load, Store, LoadIndex, Constant, Intrinsic, Special, Block]


@dataclass(frozen=True, slots=True)
class Program:
    """A whole Stripe program: the root block (tagged ``#program``).

    Root refs with ``dir`` ``in`` are the parameters, ``out`` the results (both
    in declared order); ``none`` refs are program-level temporaries.
    """

    root: Block

    @property
    def inputs(self) -> tuple[Refinement, ...]:
        return tuple(r for r in self.root.refs if r.dir == "in")

    @property
    def outputs(self) -> tuple[Refinement, ...]:
        return tuple(r for r in self.root.refs if r.dir == "out")


def walk_blocks(block: Block):
    """Yield ``block`` and every nested block, parents first."""
    yield block
    for s in block.stmts:
        if isinstance(s, Block):
            yield from walk_blocks(s)


def work_estimate(blk: Block) -> int:
    """Scalar statements ``blk`` runs in all (points times statements, nested
    blocks included): what the CPU runtime weighs to decide whether splitting
    a kernel over threads pays off, ``thread``'s ``serial_below`` and the code
    generator's choice of optimisation level."""
    points = 1
    for i in blk.idxs:
        points *= i.range
    inner = sum(work_estimate(s) for s in blk.sub_blocks)
    own = sum(1 for s in blk.stmts if not isinstance(s, Block))
    return points * (own + inner)


def _fast_pickling(cls: type) -> None:
    """Give frozen, slotted node class ``cls`` a pickle state of its field values in
    order, set back with one loop: the dataclass default looks the fields up again
    for every object (a warm start unpickles a model's optimised program, ~7,000
    nodes for ResNet-50: 27 ms that way, 14 ms this way)."""
    names = tuple(f.name for f in fields(cls))
    setter = object.__setattr__
    values = attrgetter(*names)  # a tuple of them (one name: the value)
    single = len(names) == 1

    def getstate(self: object) -> tuple:
        return (values(self),) if single else values(self)

    def setstate(self: object, state: tuple | list) -> None:
        for n, v in zip(names, state, strict=True):
            setter(self, n, v)

    cls.__getstate__ = getstate  # type: ignore[attr-defined]
    cls.__setstate__ = setstate  # type: ignore[attr-defined]


for _cls in (
    Affine,
    Index,
    Constraint,
    TensorShape,
    Refinement,
    Load,
    Store,
    LoadIndex,
    Constant,
    Intrinsic,
    Special,
    Block,
    Program,
):
    _fast_pickling(_cls)
