"""The Stripe IR verifier: what valid IR is, written down once.

``verify(program)`` walks the block tree and applies four tables of rules:
:data:`BLOCK_RULES` (one block and what it sees), :data:`REF_RULES` (one
refinement against its parent's), :data:`~stripeml.ir.stmt_rules.STMT_RULES`
(one statement, in order, with the scalars defined so far) and
:data:`TAG_RULES` (the block's tags against the vocabulary of
:mod:`stripeml.ir.tags`, once its contents passed: what is wrong with a
block's structure is reported before what is wrong with its labels).  A rule is a small generator whose
docstring states the rule; it yields a message for each violation.  The first
violation raises :class:`~stripeml.errors.VerifyError` naming the block (the
path of block names, plus its comment) and the refinement or statement.

Rules in a table run in order, so later rules may rely on earlier ones (the
isl bounds check runs only once the names in an access are known to be
visible).  The semantics are in ``docs/stripe-ir.md``.

What a root kernel's refinement, statement and nested-block rules answer
depends on its indices as a set, not on their order, on none of its tags, and
on names only to tell them apart (and whether a scalar's starts with ``$``):
the incremental mode (``seen``, :mod:`.verify_memo`) relies on that to run only
the block-level and tag rules of a kernel that differs from a verified one in
nothing else.  A rule below a kernel must not read more than that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..errors import VerifyError
from .affine import box_interval
from .dtypes import DTYPES, itemsize
from .nodes import AGGREGATIONS, DIRECTIONS, Block, Program, Refinement, Special
from .printer import format_stmt
from .stmt_rules import SPECIALS, STMT_RULES, Env, scalar_def
from .tags import DECLARED
from .verify_memo import parent_facts, shape_key, twin_key
from .verify_scope import Scope, magnitude

VIEW_DIRS = ("in", "out", "inout")
OUTPUT_AGGS = tuple(a for a in AGGREGATIONS if a)


Rule = Callable[..., Iterator[str]]
BLOCK_RULES: list[Rule] = []
REF_RULES: list[Rule] = []
TAG_RULES: list[Rule] = []


def block_rule(fn: Rule) -> Rule:
    BLOCK_RULES.append(fn)
    return fn


def ref_rule(fn: Rule) -> Rule:
    REF_RULES.append(fn)
    return fn


def tag_rule(fn: Rule) -> Rule:
    TAG_RULES.append(fn)
    return fn


def _unknown(names, known) -> list[str]:
    bad = [n for n in names if n not in known]
    return sorted(set(bad)) if bad else bad


# -- blocks ----------------------------------------------------------------------


@block_rule
def root_shape(block: Block, scope: Scope) -> Iterator[str]:
    """The root is tagged #program, has no idxs or constraints, holds blocks and specials."""
    if not scope.is_root:
        return
    if "program" not in block.tags:
        yield "the root block must be tagged #program"
    if block.idxs:
        yield "the root block has no indices"
    if block.constraints:
        yield "the root block has no constraints"
    for k, stmt in enumerate(block.stmts):
        if not isinstance(stmt, (Block, Special)):
            yield f"statement {k} '{format_stmt(stmt)}': the root holds only blocks and specials"


@block_rule
def single_line_text(block: Block, scope: Scope) -> Iterator[str]:
    """Names, comments and tags are single-line text."""
    for what, text in [("name", block.name), ("comment", block.comment)] + [
        ("tag", t) for t in block.tags
    ]:
        if "\n" in text or "\r" in text:
            yield f"the {what} {text!r} spans lines"


@block_rule
def index_declarations(block: Block, scope: Scope) -> Iterator[str]:
    """Index names are non-empty and unique along the nest; ranges are >= 1."""
    seen: set[str] = set()
    for idx in block.idxs:
        if not idx.name:
            yield "an index has an empty name"
        elif idx.name in seen:
            yield f"index '{idx.name}' is declared twice"
        elif idx.name in scope.outer_idxs:
            yield f"index '{idx.name}' shadows an index of an enclosing block"
        seen.add(idx.name)
        if not isinstance(idx.range, int) or idx.range < 1:
            yield f"index '{idx.name}' has range {idx.range!r}; ranges are >= 1"


@block_rule
def index_affines(block: Block, scope: Scope) -> Iterator[str]:
    """An index offset (``i:R = aff``) uses only indices of enclosing blocks."""
    for idx in block.idxs:
        if idx.affine is not None:
            bad = _unknown(idx.affine.names, scope.outer_idxs)
            if bad:
                yield f"index '{idx.name}' offset uses {bad}, not indices of enclosing blocks"


@block_rule
def constraint_names(block: Block, scope: Scope) -> Iterator[str]:
    """Constraints use only this block's and enclosing blocks' indices."""
    for con in block.constraints:
        bad = _unknown(con.expr.names, scope.visible_idxs)
        if bad:
            yield f"constraint '{con.expr} >= 0' uses unknown indices {bad}"


INT64_MAX = 2**63 - 1


@block_rule
def int64_range(block: Block, scope: Scope) -> Iterator[str]:
    """Index arithmetic fits int64: every offset and constraint, over the indices'
    ranges (backends compute them in 64-bit integers, so a wider value would
    wrap; the refinements' accesses and spans are :func:`ref_int64_range`)."""
    mags = scope.magnitudes()
    for idx in block.idxs:
        if mags.get(idx.name, 0) > INT64_MAX:
            yield f"index '{idx.name}' can reach {mags[idx.name]}, past the int64 range"
    for con in block.constraints:
        if magnitude(con.expr, mags) > INT64_MAX:
            yield f"constraint '{con.expr} >= 0' can reach values past the int64 range"


@block_rule
def ref_names(block: Block, scope: Scope) -> Iterator[str]:
    """Refinement names are non-empty and unique in a block."""
    seen: set[str] = set()
    for ref in block.refs:
        if not ref.into:
            yield "a refinement has an empty name"
        elif ref.into in seen:
            yield f"refinement '{ref.into}' is declared twice"
        seen.add(ref.into)


# -- refinements ---------------------------------------------------------------------


@ref_rule
def ref_shape(ref: Refinement, scope: Scope) -> Iterator[str]:
    """A known direction and dtype; one stride per size; sizes >= 0; a location."""
    if ref.dir not in DIRECTIONS:
        yield f"unknown direction {ref.dir!r} (expected one of {', '.join(DIRECTIONS)})"
    if ref.shape.dtype not in DTYPES:
        yield f"unknown dtype {ref.shape.dtype!r}"
    if len(ref.shape.sizes) != len(ref.shape.strides):
        yield f"{len(ref.shape.sizes)} sizes but {len(ref.shape.strides)} strides"
    if any(s < 0 for s in ref.shape.sizes):
        yield f"negative size in {ref.shape.sizes}"
    if not ref.location:
        yield "empty memory location"
    if ref.offset is not None and ref.offset < 0:
        yield f"negative offset {ref.offset}"


@ref_rule
def ref_int64_range(ref: Refinement, scope: Scope) -> Iterator[str]:
    """The refinement's arithmetic fits int64: every access over the indices'
    ranges, and the buffer's size and span in bytes."""
    if ref.access:
        mags = scope.magnitudes()
        for expr in ref.access:
            if magnitude(expr, mags) > INT64_MAX:
                yield f"access '{expr}' can reach values past the int64 range"
    shape = ref.shape
    if shape.dtype not in DTYPES or any(not isinstance(v, int) for v in shape.sizes):
        return  # reported by ref_shape
    span = shape.extent * itemsize(shape.dtype) + (ref.offset or 0)
    if span > INT64_MAX or any(abs(st) > INT64_MAX for st in shape.strides):
        yield f"{shape.sizes} with strides {shape.strides} spans past the int64 range"


@ref_rule
def root_refs(ref: Refinement, scope: Scope) -> Iterator[str]:
    """Root refs are parameters/results/temporaries: dir in/out/none, no from, access or agg."""
    if not scope.is_root:
        return
    if ref.dir not in ("in", "out", "none"):
        yield f"root refinements are in, out or none, not {ref.dir!r}"
    if ref.from_ or ref.access:
        yield "a root refinement refines nothing (no from, no access)"
    if ref.agg:
        yield "a root refinement has no aggregation"


@ref_rule
def const_refs(ref: Refinement, scope: Scope) -> Iterator[str]:
    """Only the program's parameters (root ``in`` refs) may be ``const``."""
    if ref.const and not (scope.is_root and ref.dir == "in"):
        yield "only a program parameter (a root 'in' refinement) may be const"


@ref_rule
def allocations(ref: Refinement, scope: Scope) -> Iterator[str]:
    """A ``none`` ref is fresh memory: no from, no access, no aggregation."""
    if ref.dir == "none" and not scope.is_root:
        if ref.from_ or ref.access:
            yield "an allocation (none) refines nothing (no from, no access)"
        if ref.agg:
            yield "an allocation (none) has no aggregation"


@ref_rule
def view_parent(ref: Refinement, scope: Scope) -> Iterator[str]:
    """A view names a refinement of the parent block, of the same rank, dtype and strides."""
    if scope.is_root or ref.dir not in VIEW_DIRS:
        return
    if not ref.from_:
        yield "a view (in/out/inout) must name the parent buffer it refines"
        return
    parent = scope.parent_ref(ref.from_)
    if parent is None:
        yield f"refines '{ref.from_}', which the parent block does not declare"
        return
    if not (len(ref.access) == ref.shape.rank == parent.shape.rank):
        yield (
            f"access has {len(ref.access)} dims, shape rank {ref.shape.rank}, "
            f"parent '{parent.into}' rank {parent.shape.rank}; all must agree"
        )
    if ref.shape.strides != parent.shape.strides:
        yield f"strides {ref.shape.strides} differ from the parent's {parent.shape.strides}"
    if ref.shape.dtype != parent.shape.dtype:
        yield f"dtype {ref.shape.dtype} differs from the parent's {parent.shape.dtype}"


@ref_rule
def view_direction(ref: Refinement, scope: Scope) -> Iterator[str]:
    """Parent in -> in; parent out -> out; parent inout or none -> in/out/inout.

    At the root, program inputs are read-only; outputs and temporaries may be
    read back by later kernels, so their views take any direction.
    """
    parent = scope.parent_ref(ref.from_) if ref.from_ and ref.dir in VIEW_DIRS else None
    if parent is None or scope.parent is None:
        return
    if scope.parent.is_root:
        if parent.dir == "in" and ref.dir != "in":
            yield f"program input '{parent.into}' is read-only: its views must be in, not {ref.dir}"
        return
    if parent.dir in ("in", "out") and ref.dir != parent.dir:
        yield f"a view of '{parent.into}' ({parent.dir}) must be {parent.dir}, not {ref.dir}"


@ref_rule
def aggregation(ref: Refinement, scope: Scope) -> Iterator[str]:
    """out/inout views aggregate with assign/add/max/min/mul, as their parent does; others don't."""
    if scope.is_root or ref.dir not in DIRECTIONS:
        return
    if ref.dir in ("out", "inout"):
        if ref.agg not in OUTPUT_AGGS:
            yield f"{ref.dir} needs an aggregation in {', '.join(OUTPUT_AGGS)}, not {ref.agg!r}"
        parent = scope.parent_ref(ref.from_)
        if parent is not None and parent.agg and ref.agg != parent.agg:
            yield f"aggregation {ref.agg!r} differs from the parent's {parent.agg!r}"
    elif ref.agg:
        yield f"an {ref.dir} refinement has no aggregation (found {ref.agg!r})"


@ref_rule
def access_names(ref: Refinement, scope: Scope) -> Iterator[str]:
    """Access affines use only this block's and enclosing blocks' indices."""
    for expr in ref.access:
        bad = _unknown(expr.names, scope.visible_idxs)
        if bad:
            yield f"access '{expr}' uses unknown indices {bad}"


@ref_rule
def view_in_bounds(ref: Refinement, scope: Scope) -> Iterator[str]:
    """Over every point of the block: 0 <= access_d and access_d + size_d <= parent size_d (isl)."""
    parent = scope.parent_ref(ref.from_) if ref.from_ and not scope.is_root else None
    if parent is None or len(ref.access) != ref.shape.rank or ref.shape.rank != parent.shape.rank:
        return
    if 0 in ref.shape.sizes:
        return  # an empty view touches nothing
    box = scope.box()
    if box is not None:
        # A box nest: each index runs over [0, range) on its own, so an affine's
        # extremes are at corners, exactly: the same answer as isl, much sooner.
        for d, (expr, size, psize) in enumerate(
            zip(ref.access, ref.shape.sizes, parent.shape.sizes)
        ):
            low, high = box_interval(expr, box)
            if low < 0:
                yield f"dim {d}: access '{expr}' can be negative"
            if high + size > psize:
                yield f"dim {d}: access '{expr}' + size {size} can exceed the parent size {psize}"
        return
    from .isl import exists_point  # lazily, like Scope.domain

    domain = scope.domain()
    for d, (expr, size, psize) in enumerate(zip(ref.access, ref.shape.sizes, parent.shape.sizes)):
        if exists_point(domain, -expr - 1):
            yield f"dim {d}: access '{expr}' can be negative"
        if exists_point(domain, expr + (size - psize - 1)):
            yield f"dim {d}: access '{expr}' + size {size} can exceed the parent size {psize}"


# -- tags ---------------------------------------------------------------------------------


@tag_rule
def declared_tags(block: Block, scope: Scope) -> Iterator[str]:
    """Every tag is declared in the vocabulary (:mod:`stripeml.ir.tags`)."""
    for tag in sorted(block.tags):
        if tag not in DECLARED:
            yield f"undeclared tag #{tag} (the vocabulary is in stripeml/ir/tags.py)"


# -- driver -------------------------------------------------------------------------------


def _fail(where: str, message: str) -> VerifyError:
    return VerifyError(f"{where}: {message}")


def _verify_block(scope: Scope, seen: dict | None = None) -> None:
    block = scope.block
    for rule in BLOCK_RULES:
        for message in rule(block, scope):
            raise _fail(scope.where, message)
    for ref in block.refs:
        if seen is not None:
            # A root refinement's rules read only it (the root has no indices): one
            # verified before is not verified again.
            known = ("root ref", id(ref))
            if known in seen:
                continue
        for rule in REF_RULES:
            for message in rule(ref, scope):
                raise _fail(f"{scope.where}, ref '{ref.into}'", message)
        if seen is not None:
            seen[known] = ref  # keeps the id alive
    env = Env(scope)
    outer = scope.visible_idxs
    for k, stmt in enumerate(block.stmts):
        if isinstance(stmt, Block):
            label = stmt.name or f"<{k}>"
            if seen is not None:
                _verify_kernel(Scope(stmt, scope, label, outer), seen)
                continue
            _verify_block(Scope(stmt, scope, label, outer))
            continue
        rules = STMT_RULES.get(type(stmt))
        if rules is None:
            raise _fail(f"{scope.where}, statement {k}", f"not a statement: {_text(stmt)}")
        for rule in rules:
            for message in rule(stmt, env):
                raise _fail(f"{scope.where}, statement {k} '{_text(stmt)}'", message)
        defined = scalar_def(stmt, env)
        if defined is not None:
            name, dtype = defined
            env.scalars[name] = dtype
    for rule in TAG_RULES:
        for message in rule(block, scope):
            raise _fail(scope.where, message)


def _verify_kernel(scope: Scope, seen: dict) -> None:
    """A root kernel in the incremental mode (:mod:`.verify_memo`): nothing when
    verified before under the same facts (a pass that only placed or added other
    buffers re-verifies nothing); its block-level and tag rules that the key does
    not decide (:data:`_KEYED_BLOCK_RULES`) when a twin was; those of every block
    of its nest when one equal up to names was; else all."""
    stmt, root = scope.block, scope.parent
    assert root is not None
    same = (id(stmt), id(root.block.refs))
    if same in seen:
        return
    facts = parent_facts(stmt, root, seen)
    key = (id(stmt), facts)
    if key in seen:
        seen[same] = (stmt, root.block.refs)
        return
    twin = twin_key(stmt, facts)
    if twin in seen:
        _verify_block_only(scope)
    else:
        shape = shape_key(stmt, facts)
        if shape is not None and shape in seen:
            _verify_nest_only(scope)
        else:
            _verify_block(scope)
            if shape is not None:
                seen[shape] = True
    seen[key] = seen[twin] = seen[same] = (stmt, root.block.refs)  # keeps the ids alive


#: The block rules whose answers the incremental mode's keys decide
#: (:mod:`.verify_memo`): they read a block's indices (names, ranges, offsets, as
#: a set), its constraints, its refinements' names (whether empty or repeated)
#: and those of the blocks around it in the nest, which :func:`~.verify_memo.twin_key`
#: holds by identity and :func:`~.verify_memo.shape_key` by value (its
#: refinement names renamed one to one), never its name, comment or tags, and a
#: root kernel's outer indices are none (the root has none).  A kernel whose
#: key matches a verified one's passes them as that one did, so only the other
#: block rules (any added later among them) and the tag rules run on it.
_KEYED_BLOCK_RULES = frozenset(
    {root_shape, index_declarations, index_affines, constraint_names, int64_range, ref_names}
)


def _verify_block_only(scope: Scope) -> None:
    """The block-level and tag rules of ``scope``'s block that its key does not
    decide (:data:`_KEYED_BLOCK_RULES`), not those of its refinements or
    statements."""
    block = scope.block
    for rule in BLOCK_RULES:
        if rule in _KEYED_BLOCK_RULES:
            continue
        for message in rule(block, scope):
            raise _fail(scope.where, message)
    for rule in TAG_RULES:
        for message in rule(block, scope):
            raise _fail(scope.where, message)


def _verify_nest_only(scope: Scope) -> None:
    """:func:`_verify_block_only` of ``scope``'s block and of every block nested in it."""
    _verify_block_only(scope)
    outer = scope.visible_idxs
    for k, stmt in enumerate(scope.block.stmts):
        if isinstance(stmt, Block):
            _verify_nest_only(Scope(stmt, scope, stmt.name or f"<{k}>", outer))


def _text(stmt: Any) -> str:
    """A statement as the message quotes it (printed only when one is reported)."""
    try:
        return format_stmt(stmt)
    except TypeError:
        return repr(stmt)


def verify(program: Program, seen: dict | None = None) -> None:
    """Raise :class:`VerifyError` if ``program`` is not valid Stripe IR.

    ``seen`` (a dict kept across calls, as the pass manager does) skips the
    kernels that an earlier call verified under the same root refinements."""
    if not isinstance(program, Program) or not isinstance(program.root, Block):
        raise VerifyError(f"not a Stripe program: {type(program).__name__}")
    root = program.root
    _verify_block(Scope(root, None, root.name or "root"), seen)


__all__ = ["BLOCK_RULES", "REF_RULES", "SPECIALS", "STMT_RULES", "TAG_RULES", "verify"]
