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

__all__ = ["masks", "numbers", "size_positions", "where_numbers", "write"]

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


def masks(
    tree: ast.Function,
    marks: dict[str, tuple[int, ...]],
    shapes: dict[str, tuple[int, ...]],
    consts: set[str],
) -> tuple[dict[int, list[tuple[str, int, str]]], list[str], int] | None:
    """Per statement (its index), the operands to mask: ``(tensor, axis,
    fill)``; the constant index tensors ``gather`` reads along a marked axis;
    and the least length the program takes (a fixed position read, such as
    the first token's, must exist).  None when a statement does not keep
    positions."""
    masks: dict[int, list[tuple[str, int, str]]] = {}
    gathered: list[str] = []
    least = [1]
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
            masks[si] = got
    return masks, gathered, least[0]


def _contraction_masks(
    c: ast.Contraction, marks: dict[str, tuple[int, ...]], least: list[int]
) -> list[tuple[str, int, str]] | None:
    """The operands of ``c`` to mask, or None when ``c`` does not keep positions.

    Every marked axis (of the output or of an operand) must be indexed by a
    plain index, or, on an operand, a fixed position (``least`` is raised
    past it).  An output index on a marked output axis carries a position
    over, and may index only marked axes; any other index on a marked operand
    axis is a reduction over positions: every operand must be read along it,
    on marked axes only, and is masked with the aggregation's identity."""
    out_axes = marks.get(c.output, ())
    carried: set[str] = set()
    free: set[str] = set()  # output indices on unmarked axes
    for k, e in enumerate(c.out_indices):
        if k in out_axes:
            if not isinstance(e, ast.Name):
                return None
            carried.add(e.name)
        else:
            free |= _names(e)
    reduced: dict[str, list[tuple[int, str, int]]] = {}  # index -> (operand, tensor, axis)
    for n, op in enumerate(c.operands):
        axes = marks.get(op.tensor, ())
        for k, e in enumerate(op.indices):
            if k not in axes:
                continue
            if isinstance(e, ast.IntLit):
                least[0] = max(least[0], e.value + 1)
                continue
            if not isinstance(e, ast.Name) or e.name in free:
                return None
            if e.name not in carried:
                reduced.setdefault(e.name, []).append((n, op.tensor, k))
    if not reduced and not carried:
        return []
    position = carried | set(reduced)
    for op in c.operands:  # a position index only on marked axes, once each
        axes = marks.get(op.tensor, ())
        for k, e in enumerate(op.indices):
            used = _names(e) & position
            if used and (k not in axes or not isinstance(e, ast.Name)):
                return None
    for t in c.constraints:
        if (_names(t.poly) | _names(t.bound)) & position:
            return None
    if not reduced:
        return []
    if c.default is not None or c.agg not in _FILLS:
        return None
    if c.combo not in ("none", "mul", "add") or (c.combo == "none" and len(c.operands) != 1):
        return None
    if c.agg in ("max", "min", "mul") and c.combo != "none":
        return None
    out: list[tuple[str, int, str]] = []
    for reads in reduced.values():
        if {n for n, _, _ in reads} != set(range(len(c.operands))):
            return None  # an operand the reduction does not move would count N times
        for _, tensor, axis in reads:
            mask = (tensor, axis, _FILLS[c.agg])
            if mask not in out:
                out.append(mask)
    return out


def _names(e: ast.Expr) -> set[str]:
    if isinstance(e, ast.Name):
        return {e.name}
    if isinstance(e, ast.Unary):
        return _names(e.operand)
    if isinstance(e, ast.Binary):
        return _names(e.lhs) | _names(e.rhs)
    if isinstance(e, ast.Ternary):
        return _names(e.cond) | _names(e.then) | _names(e.other)
    if isinstance(e, ast.Call):
        out: set[str] = set()
        for a in e.args:
            out |= _names(a)
        return out
    return set()


def _builtin_keeps(
    s: ast.Builtin,
    marks: dict[str, tuple[int, ...]],
    shapes: dict[str, tuple[int, ...]],
    consts: set[str],
    gathered: list[str],
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
        if axis.value in marks.get(x.name, ()):
            if idx.name not in consts:
                return False  # positions chosen at run time
            gathered.append(idx.name)
        return True
    return False


def _reshape_keeps(
    s: ast.Builtin, x: str, marks: dict[str, tuple[int, ...]], shapes: dict[str, tuple[int, ...]]
) -> bool:
    """A reshape keeps positions when its input and output each have one marked
    axis, with as many elements before it, and after it, on both sides."""
    a, b = marks.get(x, ()), marks.get(s.output, ())
    shape, out = shapes.get(x), shapes.get(s.output)
    if len(a) != 1 or len(b) != 1 or shape is None or out is None:
        return False
    return _prod(shape[: a[0]]) == _prod(out[: b[0]]) and _prod(shape[a[0] + 1 :]) == _prod(
        out[b[0] + 1 :]
    )


def _prod(xs: Sequence[int]) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def write(
    source: str,
    tree: ast.Function,
    masks: dict[int, list[tuple[str, int, str]]],
    dtypes: dict[str, np.dtype],
) -> tuple[str, dict[str, np.ndarray]] | None:
    """``source`` with a ``LEN`` parameter and the masks written before the
    statements that read them; the constants the fills need."""
    lines = source.split("\n")
    fills: dict[str, np.ndarray] = {}
    made: set[str] = set()
    for si, todo in sorted(masks.items(), reverse=True):
        s = tree.stmts[si]
        row = s.pos.line - 1
        line = lines[row]
        head, eq, rhs = line.partition(" = ")
        if not eq:
            return None
        before = []
        for tensor, axis, fill in todo:
            dtype = dtypes.get(tensor)
            if dtype is None:
                return None
            value = _fill_name(fill, dtype, fills)
            if value is None:
                return None
            name = f"{tensor}_len{axis}{'' if fill in ('0', '1') else '_' + fill.strip('-') + ('lo' if fill.startswith('-') else 'hi')}"
            if name not in made:
                indent = line[: len(line) - len(line.lstrip())]
                before.append(
                    f"{indent}{name} = index({tensor}, {axis}) < LEN ? {tensor} : {value};"
                )
                made.add(name)
            rhs = re.sub(rf"\b{re.escape(tensor)}\[", f"{name}[", rhs)
        lines[row] = head + eq + rhs
        lines[row:row] = before
    text = "\n".join(lines)
    head, sep, rest = text.partition(") -> (")
    if not sep:
        return None
    extra = ", ".join(["LEN[]", *(f"{n}[]" for n in fills)])
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
