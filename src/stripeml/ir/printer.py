"""Stripe IR text format: the printer.

``format(program)`` renders a :class:`~stripeml.ir.nodes.Program` as text that
:func:`stripeml.ir.parse` reads back to an equal program; the grammar is in
``docs/stripe-ir.md``.  In short::

    block NAME? [i:R, j:R = AFFINE] #tag ... (  // comment
        AFFINE >= 0
        DIR INTO (= FROM)?[ACCESS]? (:AGG)? DTYPE(SIZES):(STRIDES) (@LOC(:OFFSET)?)?
    ) {
      $x = load(A)
      A = store($x)
      $i = index(AFFINE)
      $c = const(VALUE): DTYPE
      $y = OP($x, ...): DTYPE
      special OP(IN, ...) -> (OUT, ...) {key=VALUE, ...}
      block ...
    }

Names that are not identifiers (``[A-Za-z_][A-Za-z0-9_.]*`` or ``$`` followed
by ``[A-Za-z0-9_.]+``), or that are keywords, are written as double-quoted
strings.  Floats print with ``repr`` (``inf``, ``-inf`` and ``nan`` included),
so they read back exactly.
"""

from __future__ import annotations

import re

import numpy as np

from .affine import Affine
from .nodes import (
    DEFAULT_LOCATION,
    DIRECTIONS,
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
    Statement,
    Store,
    TensorShape,
)

# Words that start an item or a right-hand side; a name spelled like one is quoted.
KEYWORDS = frozenset(
    {"block", "special", "in", "out", "inout", "none", "load", "store", "index", "const"}
)
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*|\$[A-Za-z0-9_.]+")

REF_INDENT = 4
STMT_INDENT = 2

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def format_string(text: str) -> str:
    """Quote ``text``: ``\\"``, ``\\\\``, ``\\n``, ``\\t``, ``\\r`` and ``\\u{HEX}`` escapes."""
    out = ['"']
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif not ch.isprintable():
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


#: Names as written, remembered: a program names its buffers, indices and scalars
#: again and again (bounded, so a long-lived process does not grow it forever).
_NAMES: dict[str, str] = {}
_NAMES_MAX = 1 << 16


def format_name(name: str) -> str:
    """A name as written: bare when it is an identifier and not a keyword, else quoted."""
    text = _NAMES.get(name)
    if text is None:
        if name not in KEYWORDS and IDENT_RE.fullmatch(name):
            text = name
        else:
            text = format_string(name)
        if len(_NAMES) >= _NAMES_MAX:
            _NAMES.clear()
        _NAMES[name] = text
    return text


def format_affine(expr: Affine) -> str:
    """``2*x - y + 3``: terms in name order, then the constant; ``0`` when empty."""
    terms = expr.terms
    if len(terms) == 1 and not expr.const and terms[0][1] == 1:
        return format_name(terms[0][0])  # a plain index: most accesses
    parts: list[str] = []
    for name, coeff in expr.terms:
        mag = abs(coeff)
        term = format_name(name) if mag == 1 else f"{mag}*{format_name(name)}"
        if not parts:
            parts.append(term if coeff > 0 else f"-{term}")
        else:
            parts.append(f"+ {term}" if coeff > 0 else f"- {term}")
    if not parts:
        return str(expr.const)
    if expr.const:
        parts.append(f"+ {expr.const}" if expr.const > 0 else f"- {-expr.const}")
    return " ".join(parts)


def format_value(value: object) -> str:
    """A constant or special-parameter value: bool, int, float, str or tuple."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, tuple):
        if len(value) == 1:
            return f"({format_value(value[0])},)"
        return "(" + ", ".join(format_value(v) for v in value) + ")"
    raise TypeError(f"cannot print value {value!r} of type {type(value).__name__}")


def _ints(values: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(int(v)) for v in values) + ")"


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(format_name(n) for n in names)


def format_index(idx: Index) -> str:
    """``i:8`` or ``i:8 = 8*io``."""
    text = f"{format_name(idx.name)}:{idx.range}"
    if idx.affine is not None:
        text += f" = {format_affine(idx.affine)}"
    return text


def format_constraint(con: Constraint) -> str:
    """``x + kx - 1 >= 0``."""
    return f"{format_affine(con.expr)} >= 0"


#: Shapes as written (`` f32(1, 1):(64, 1)``), remembered: a program's views repeat
#: a few shapes thousands of times (bounded like :data:`_NAMES`).
_SHAPES: dict[tuple[str, tuple[int, ...], tuple[int, ...]], str] = {}


def _shape_text(shape: TensorShape) -> str:
    key = (shape.dtype, shape.sizes, shape.strides)
    text = _SHAPES.get(key)
    if text is None:
        text = f" {format_name(shape.dtype)}{_ints(shape.sizes)}:{_ints(shape.strides)}"
        if len(_SHAPES) >= _NAMES_MAX:
            _SHAPES.clear()
        _SHAPES[key] = text
    return text


def format_ref(ref: Refinement) -> str:
    """One refinement line (without indentation)."""
    direction = ref.dir if ref.dir in DIRECTIONS else format_string(ref.dir)
    text = f"{direction} {format_name(ref.into)}"
    if ref.from_ != ref.into and (ref.from_ or ref.access):
        text += f" = {format_name(ref.from_)}"
    if ref.from_ or ref.access:
        text += "[" + ", ".join(format_affine(a) for a in ref.access) + "]"
    if ref.agg:
        text += f":{format_name(ref.agg)}"
    text += _shape_text(ref.shape)
    if ref.location != DEFAULT_LOCATION or ref.offset is not None:
        text += f" @{format_name(ref.location)}"
        if ref.offset is not None:
            text += f":{ref.offset}"
    if ref.const:
        text += " const"
    return text


def format_stmt(stmt: Statement) -> str:
    """One statement on one line; a nested block gives only its header line."""
    if isinstance(stmt, Load):
        return f"{format_name(stmt.into)} = load({format_name(stmt.ref)})"
    if isinstance(stmt, Store):
        return f"{format_name(stmt.ref)} = store({format_name(stmt.value)})"
    if isinstance(stmt, LoadIndex):
        return f"{format_name(stmt.into)} = index({format_affine(stmt.expr)})"
    if isinstance(stmt, Constant):
        return f"{format_name(stmt.into)} = const({format_value(stmt.value)}): {format_name(stmt.dtype)}"
    if isinstance(stmt, Intrinsic):
        return (
            f"{format_name(stmt.into)} = {format_name(stmt.op)}({_names(stmt.inputs)}): "
            f"{format_name(stmt.dtype)}"
        )
    if isinstance(stmt, Special):
        text = f"special {format_name(stmt.op)}({_names(stmt.inputs)}) -> ({_names(stmt.outputs)})"
        if stmt.params:
            params = ", ".join(f"{format_name(k)}={format_value(v)}" for k, v in stmt.params)
            text += " {" + params + "}"
        return text
    if isinstance(stmt, Block):
        return block_header(stmt)
    raise TypeError(f"not a Stripe statement: {stmt!r}")


def block_header(block: Block) -> str:
    """``block NAME [idxs] #tags (  // comment`` (the comment only when set)."""
    text = "block "
    if block.name:
        text += format_name(block.name) + " "
    text += "[" + ", ".join(format_index(i) for i in block.idxs) + "]"
    for tag in sorted(block.tags):
        text += f" #{format_name(tag)}"
    text += " ("
    if block.comment:
        text += "  // " + format_comment(block.comment)
    return text


def format_comment(comment: str) -> str:
    """The comment text: raw when it is printable and does not start with a quote."""
    if comment.isprintable() and not comment.startswith('"'):
        return comment
    return format_string(comment)


def format_block(block: Block, indent: int = 0) -> str:
    """The block as text, every line prefixed by ``indent`` spaces, no final newline."""
    pad = " " * indent
    lines = [pad + block_header(block)]
    items = [format_constraint(c) for c in block.constraints]
    items += [format_ref(r) for r in block.refs]
    if not items and not block.comment:
        lines[0] += ") {"
    else:
        lines += [pad + " " * REF_INDENT + item for item in items]
        lines.append(pad + ") {")
    inner = indent + STMT_INDENT
    for stmt in block.stmts:
        if isinstance(stmt, Block):
            lines.append(format_block(stmt, inner))
        else:
            lines.append(" " * inner + format_stmt(stmt))
    lines.append(pad + "}")
    return "\n".join(lines)


#: The program printed last and its text: the compiler prints a program's final
#: form more than once (the executable's ``ir``, the kernel cache's key), and
#: nodes are immutable, so the same object has the same text.
_LAST: tuple[Program, str] | None = None


def remember(program: Program, text: str) -> None:
    """Say that ``text`` is ``program``'s text (a program read back with its text
    from a cache), so printing it again costs nothing."""
    global _LAST
    _LAST = (program, text)


def format(program: Program) -> str:  # noqa: A001 - the pinned public name
    """The program as Stripe IR text (ends with a newline)."""
    global _LAST
    last = _LAST
    if last is not None and last[0] is program:
        return last[1]
    text = format_block(program.root) + "\n"
    _LAST = (program, text)
    return text
