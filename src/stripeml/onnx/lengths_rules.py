"""The static half of :mod:`.lengths`: whether a Tile program keeps every
position of its marked axes in place, and the masks its reductions over
those positions need (docs/onnx.md, "Shorter lengths through the first
length's program")."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

import numpy as np

from ..tile import ast
from ..tile.exprs import names_of

__all__ = ["Marks", "len_name", "masks", "numbers", "size_positions", "where_numbers", "write"]

_NUMBER = re.compile(r"(?<![A-Za-z_0-9.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def numbers(source: str) -> tuple[list[str], list[str], list[int]]:
    """``source`` as (the text between numbers, the numbers, each number's offset)."""
    texts, numbers, starts = [], [], []
    last = 0
    for m in _NUMBER.finditer(source):
        texts.append(source[last : m.start()])
        numbers.append(m.group())
        starts.append(m.start())
        last = m.end()
    texts.append(source[last:])
    return texts, numbers, starts


def where_numbers(source: str, starts: Sequence[int], which: set[int]) -> set[tuple[int, int]]:
    """The (line, column), 1-based, of the numbers ``which`` (indices into
    ``starts``, their offsets in ``source``)."""
    line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
    out = set()
    for k in which:
        line = bisect.bisect_right(line_starts, starts[k]) - 1
        out.add((line + 1, starts[k] - line_starts[line] + 1))
    return out


def size_positions(tree: ast.Function) -> set[tuple[int, int]]:
    """Where ``tree`` writes sizes: its parameters' dimensions, contractions'
    output sizes and ``reshape``'s sizes ((line, column), 1-based)."""
    out: set[tuple[int, int]] = set()

    def add(e: object) -> None:
        if isinstance(e, ast.IntLit):
            out.add((e.pos.line, e.pos.column))

    for p in tree.params:
        for d in p.dims or ():
            add(d)
    for s in tree.stmts:
        if isinstance(s, ast.Contraction):
            for e in s.sizes:
                add(e)
        elif isinstance(s, ast.Builtin) and s.func == "reshape":
            for e in s.args[1:]:
                add(e)
    return out


#: Per aggregation, the fill a masked operand takes.
_FILLS = {"add": "0", "max": "-inf", "min": "inf", "mul": "1"}


#: A tensor's marked axes: axis -> the length (group) that sizes it.
Marks = dict[str, dict[int, int]]


def masks(
    tree: ast.Function, marks: Marks, shapes: dict[str, tuple[int, ...]], consts: set[str]
) -> (
    tuple[dict[int, list[tuple[str, int, str, int]]], list[tuple[str, int]], dict[int, int]] | None
):
    """Per statement (its index), the operands to mask: ``(tensor, axis, fill,
    length)``; the constant index tensors ``gather`` reads along a marked axis
    (with that axis's length); and per length the least it takes (a fixed
    position read, such as the first token's, must exist).  None when a
    statement does not keep positions."""
    out: dict[int, list[tuple[str, int, str, int]]] = {}
    gathered: list[tuple[str, int]] = []
    least: dict[int, int] = {}
    for si, s in enumerate(tree.stmts):
        if isinstance(s, ast.Assignment):
            continue  # element-wise: position for position (its numbers were checked)
        if isinstance(s, ast.Builtin):
            if not _builtin_keeps(s, marks, shapes, consts, gathered):
                return None
            continue
        got = _contraction_masks(s, marks, least)
        if got is None:
            return None
        if got:
            out[si] = got
    return out, gathered, least


def _contraction_masks(
    c: ast.Contraction, marks: Marks, least: dict[int, int]
) -> list[tuple[str, int, str, int]] | None:
    """The operands of ``c`` to mask, or None when ``c`` does not keep positions.

    Every marked axis (of the output or of an operand) must be indexed by a
    plain index, or, on an operand, a fixed position (``least`` is raised
    past it), and an index moves positions of one length only.  An output
    index on a marked output axis carries a position over, and may index only
    marked axes; any other index on a marked operand axis is a reduction over
    positions: every operand must be read along it, on marked axes only, and
    is masked with the aggregation's identity."""
    out_axes = marks.get(c.output, {})
    carried: dict[str, int] = {}  # index -> its length
    free: set[str] = set()  # output indices on unmarked axes
    for k, e in enumerate(c.out_indices):
        if k in out_axes:
            if not isinstance(e, ast.Name) or carried.get(e.name, out_axes[k]) != out_axes[k]:
                return None
            carried[e.name] = out_axes[k]
        else:
            free |= _names(e)
    group = dict(carried)
    reduced: dict[str, list[tuple[int, str, int]]] = {}  # index -> (operand, tensor, axis)
    for n, op in enumerate(c.operands):
        axes = marks.get(op.tensor, {})
        for k, e in enumerate(op.indices):
            if k not in axes:
                continue
            if isinstance(e, ast.IntLit):
                least[axes[k]] = max(least.get(axes[k], 1), e.value + 1)
                continue
            if not isinstance(e, ast.Name) or e.name in free:
                return None
            if group.setdefault(e.name, axes[k]) != axes[k]:
                return None
            if e.name not in carried:
                reduced.setdefault(e.name, []).append((n, op.tensor, k))
    if not group:
        return []
    for op in c.operands:  # a position index only on marked axes, alone
        axes = marks.get(op.tensor, {})
        for k, e in enumerate(op.indices):
            if _names(e) & group.keys() and (k not in axes or not isinstance(e, ast.Name)):
                return None
    for t in c.constraints:
        if (_names(t.poly) | _names(t.bound)) & group.keys():
            return None
    if not reduced:
        return []
    if c.default is not None or c.agg not in _FILLS:
        return None
    if c.combo not in ("none", "mul", "add") or (c.combo == "none" and len(c.operands) != 1):
        return None
    if c.agg in ("max", "min", "mul") and c.combo != "none":
        return None
    masked: list[tuple[str, int, str, int]] = []
    for index, reads in reduced.items():
        if {n for n, _, _ in reads} != set(range(len(c.operands))):
            return None  # an operand the reduction does not move would count N times
        for _, tensor, axis in reads:
            mask = (tensor, axis, _FILLS[c.agg], group[index])
            if mask not in masked:
                masked.append(mask)
    return masked


def _names(e: ast.Expr) -> set[str]:
    return {n.name for n in names_of(e)}


def _builtin_keeps(
    s: ast.Builtin,
    marks: Marks,
    shapes: dict[str, tuple[int, ...]],
    consts: set[str],
    gathered: list[tuple[str, int]],
) -> bool:
    names = [a.name for a in s.args if isinstance(a, ast.Name)]
    if not marks.get(s.output) and not any(marks.get(x) for x in names):
        return True
    if s.func.startswith("view_"):
        return True  # the same shape, element for element
    if s.func == "reshape" and s.args and isinstance(s.args[0], ast.Name):
        return _reshape_keeps(s, s.args[0].name, marks, shapes)
    if s.func == "gather" and len(s.args) == 3:
        x, idx, axis = s.args
        if not (isinstance(x, ast.Name) and isinstance(idx, ast.Name)):
            return False
        if not isinstance(axis, ast.IntLit):
            return False
        along = marks.get(x.name, {}).get(axis.value)
        if along is not None:
            if idx.name not in consts:
                return False  # positions chosen at run time
            gathered.append((idx.name, along))
        return True
    return False


def _reshape_keeps(
    s: ast.Builtin, x: str, marks: Marks, shapes: dict[str, tuple[int, ...]]
) -> bool:
    """A reshape keeps positions when it keeps each marked axis whole, in the
    same order, of the same length, with as many elements before the first,
    between each two and after the last on both sides."""
    a, b = marks.get(x, {}), marks.get(s.output, {})
    shape, out = shapes.get(x), shapes.get(s.output)
    if shape is None or out is None or not a:
        return False
    if [a[k] for k in sorted(a)] != [b[k] for k in sorted(b)]:
        return False
    return _between(shape, sorted(a)) == _between(out, sorted(b))


def _between(dims: Sequence[int], cuts: list[int]) -> list[int]:
    """The element counts of ``dims`` before, between and after the axes ``cuts``."""
    counts, last = [], 0
    for c in cuts:
        counts.append(_prod(dims[last:c]))
        last = c + 1
    counts.append(_prod(dims[last:]))
    return counts


def _prod(xs: Sequence[int]) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def len_name(group: int) -> str:
    """The run-time parameter holding length ``group``: ``LEN``, ``LEN1``, ..."""
    return "LEN" if group == 0 else f"LEN{group}"


def write(
    source: str,
    tree: ast.Function,
    masks: dict[int, list[tuple[str, int, str, int]]],
    dtypes: dict[str, np.dtype],
    groups: int,
) -> tuple[str, dict[str, np.ndarray]] | None:
    """``source`` with a parameter per length (:func:`len_name`) and the masks
    written before the statements that read them; the constants the fills need."""
    lines = source.split("\n")
    fills: dict[str, np.ndarray] = {}
    made: set[str] = set()
    for si, todo in sorted(masks.items(), reverse=True):
        row = tree.stmts[si].pos.line - 1
        line = lines[row]
        head, eq, rhs = line.partition(" = ")
        if not eq:
            return None
        before = []
        for tensor, axis, fill, group in todo:
            dtype = dtypes.get(tensor)
            value = None if dtype is None else _fill_name(fill, dtype, fills)
            if value is None:
                return None
            kind = {"0": "", "1": "_one", "-inf": "_lo", "inf": "_hi"}[fill]
            name = f"{tensor}_len{axis}{kind}"
            if name not in made:
                indent = line[: len(line) - len(line.lstrip())]
                cond = f"index({tensor}, {axis}) < {len_name(group)}"
                before.append(f"{indent}{name} = {cond} ? {tensor} : {value};")
                made.add(name)
            rhs = re.sub(rf"\b{re.escape(tensor)}\[", f"{name}[", rhs)
        lines[row] = head + eq + rhs
        lines[row:row] = before
    text = "\n".join(lines)
    head, sep, rest = text.partition(") -> (")
    if not sep:
        return None
    extra = ", ".join([*(f"{len_name(g)}[]" for g in range(groups)), *(f"{n}[]" for n in fills)])
    return f"{head}, {extra}{sep}{rest}", fills


def _fill_name(fill: str, dtype: np.dtype, fills: dict[str, np.ndarray]) -> str | None:
    """The Tile text of ``fill`` for ``dtype``: a literal, or a constant added to ``fills``."""
    if fill in ("0", "1"):
        return fill
    if dtype.kind == "f":
        value = np.array(-np.inf if fill == "-inf" else np.inf, dtype)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = np.array(info.min if fill == "-inf" else info.max, dtype)
    else:
        return None
    name = f"LEN_{'LO' if fill == '-inf' else 'HI'}_{dtype.name.upper()}"
    fills[name] = value
    return name
