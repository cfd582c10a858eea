"""Reverse-mode differentiation of a Tile function into a Tile function.

:func:`gradient_source` reads a checked Tile syntax tree and writes the text of
a new Tile function ``(params..., cotangents...) -> (gradients...)``: the
forward statements it needs (elementwise ones split into one operation per
statement, so each derivative rule can name its operands and result), then,
in reverse order, each statement's adjoint, accumulating every tensor's
cotangent over all its uses.  Rules: docs/autodiff.md.

Shapes are symbolic here (the program is shape-polymorphic, like its source):
each tensor's shape is a tuple of Tile size expressions (text) over the
function's dimensions.  A broadcast between two sizes that are not the same
expression (``N`` against ``M``) is resolved in Tile's own size arithmetic
(see :func:`_max_size`), so nothing waits for the inputs' shapes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..errors import StripeError
from ..tile import ast
from ..tile.exprs import CAST_BITS, VIEW_BITS, format_expr

_P = ast.Pos(0, 0)
_AGG_TOKEN = {v: k for k, v in ast.AGG_OPS.items()}

Shape = tuple[str, ...]

#: Elementwise functions whose derivative is zero or undefined: no gradient
#: flows through them (their results are piecewise constant, integers or bools).
NO_GRADIENT_FUNCTIONS = frozenset(
    {"floor", "ceil", "round", "index", "as_int", "as_uint", "as_bool"}
    | {"bitcast_float", "bitcast_int", "bitcast_uint"}
)
#: Binary operators whose result carries no gradient (bools, integer bit ops).
NO_GRADIENT_OPS = frozenset(
    {"<", ">", "<=", ">=", "==", "!=", "&&", "||", "&", "|", "^", "<<", ">>"}
)


class AutodiffError(StripeError):
    """A program (or a request) that :func:`stripeml.grad` cannot differentiate."""


@dataclass(frozen=True)
class GradientProgram:
    source: str
    wrt: tuple[str, ...]
    cotangents: tuple[str, ...]  # one per output of f, in order
    gradients: tuple[str, ...]  # the outputs, one per wrt name


@dataclass(frozen=True)
class Adjoint:
    """What :func:`adjoint_statements` returns: Tile statements to append to a
    function's body, and the dimensions they name for parameters declared
    without any (the parameter's declaration must become ``X[X_D0, X_D1]``)."""

    statements: tuple[str, ...]
    param_dims: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class _Op:
    """One forward statement after splitting: an elementwise operation whose
    operands are atoms, or an original contraction / builtin."""

    out: str
    node: ast.Expr | ast.Contraction | ast.Builtin


def _idx(polys: Iterable[str]) -> str:
    return ", ".join(polys)


def _access(tensor: str, polys: Sequence[str]) -> str:
    return f"{tensor}[{_idx(polys)}]"


def _paren(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|\d+", text) else f"({text})"


def _max_size(a: str, b: str) -> str:
    """``max(a, b)`` in Tile size arithmetic, for two sizes that broadcast
    (equal, or one of them 1; both at least 1): ``min = a / ((a + b - 1) / b)``
    and ``max = a + b - min``."""
    a, b = _paren(a), _paren(b)
    return f"{a} + {b} - {a} / (({a} + {b} - 1) / {b})"


def broadcast(shapes: Sequence[Shape]) -> Shape:
    rank = max((len(s) for s in shapes), default=0)
    out: list[str] = []
    for k in range(rank):
        sizes = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        distinct = list(dict.fromkeys(x for x in sizes if x != "1"))
        if not distinct:
            out.append("1")
            continue
        size = distinct[0]
        for other in distinct[1:]:
            size = _max_size(size, other)
        out.append(size)
    return tuple(out)


class _Names:
    """Fresh upper-case names that no name of the source uses."""

    def __init__(self, source: str) -> None:
        self.used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))

    def fresh(self, base: str) -> str:
        name, k = base, 2
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def _tensor_names(e: ast.Expr, tensors: set[str]) -> list[str]:
    out: list[str] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ast.Name) and x.name in tensors:
            out.append(x.name)
        elif isinstance(x, ast.Unary):
            stack.append(x.operand)
        elif isinstance(x, ast.Binary):
            stack += [x.lhs, x.rhs]
        elif isinstance(x, ast.Ternary):
            stack += [x.cond, x.then, x.other]
        elif isinstance(x, ast.Call):
            stack += list(x.args)
    return out


def _atom_text(e: ast.Expr) -> str:
    return _paren(format_expr(e))


class _Differentiator:
    def __init__(
        self,
        fn: ast.Function,
        wrt: Sequence[str],
        name_prefix: str = "D",
        used: Iterable[str] = (),
    ) -> None:
        self.fn = fn
        self.names = _Names(fn.source)
        self.names.used.update(used)
        self.dims: set[str] = set()
        self.tensors: set[str] = set()
        self.shapes: dict[str, Shape | None] = {}
        self.param_decl: dict[str, str] = {}
        self.ops: list[_Op] = []
        self.stmts: list[tuple[str, str, set[str]]] = []  # (out, text, reads)
        self.prefix = name_prefix
        params = {p.name: p for p in fn.params}
        for p in fn.params:
            self.tensors.add(p.name)
            for d in p.dims or ():
                if isinstance(d, ast.Name):
                    self.dims.add(d.name)
        for stmt in fn.stmts:
            self.tensors.add(stmt.output)
        self._params(params)
        self.wrt = tuple(wrt)
        for stmt in fn.stmts:
            self._split(stmt)
        self.active = self._activity()

    # -- forward ------------------------------------------------------------

    def _params(self, params: dict[str, ast.Param]) -> None:
        ranks: dict[str, int] = {}
        for stmt in self.fn.stmts:
            if isinstance(stmt, ast.Contraction):
                for a in stmt.operands:
                    ranks.setdefault(a.tensor, len(a.indices))
        for p in self.fn.params:
            if p.dims is not None:
                shape = tuple(format_expr(d) for d in p.dims)
                self.shapes[p.name] = shape
                self.param_decl[p.name] = f"{p.name}[{_idx(shape)}]"
            elif p.name in ranks:
                shape = tuple(self.names.fresh(f"{p.name}_D{k}") for k in range(ranks[p.name]))
                self.dims.update(shape)
                self.shapes[p.name] = shape
                self.param_decl[p.name] = f"{p.name}[{_idx(shape)}]"
            else:
                self.shapes[p.name] = None
                self.param_decl[p.name] = p.name

    def _shape_of(self, name: str) -> Shape | None:
        return self.shapes.get(name)

    def _need_shape(self, name: str, why: str) -> Shape:
        shape = self.shapes.get(name)
        if shape is None:
            raise AutodiffError(
                f"grad: the shape of '{name}' is not known statically ({why}); declare the "
                "dimensions of every parameter it is computed from (write 'S[N, M]', not 'S')"
            )
        return shape

    def _tensor(self, e: ast.Expr) -> str | None:
        """The tensor ``e`` names, if it is one (not a dimension or a constant)."""
        return e.name if isinstance(e, ast.Name) and e.name in self.tensors else None

    def _split(self, stmt: ast.Statement) -> None:
        if isinstance(stmt, ast.Contraction):
            self.ops.append(_Op(stmt.output, stmt))
            self.shapes[stmt.output] = tuple(format_expr(s) for s in stmt.sizes)
            self._emit(stmt.output, _contraction_text(stmt), _reads_of(stmt))
            return
        if isinstance(stmt, ast.Builtin):
            self.ops.append(_Op(stmt.output, stmt))
            self.shapes[stmt.output] = self._builtin_shape(stmt)
            reads = {
                a.name for a in stmt.args if isinstance(a, ast.Name) and a.name in self.tensors
            }
            self._emit(stmt.output, stmt.text + ";", reads)
            return
        self._flatten(stmt.expr, stmt.output)

    def _flatten(self, e: ast.Expr, out: str | None) -> ast.Expr:
        """Emit ``e`` as one-operation statements; return the atom naming it."""
        if not _tensor_names(e, self.tensors) or isinstance(e, ast.Name):
            if out is None:
                return e
            node: ast.Expr = e
        elif isinstance(e, ast.Call) and e.func == "index":
            node = e
        elif isinstance(e, ast.Call) and e.func in CAST_BITS:
            node = ast.Call(e.func, (self._flatten(e.args[0], None), *e.args[1:]), _P)
        elif isinstance(e, ast.Call):
            node = ast.Call(e.func, tuple(self._flatten(a, None) for a in e.args), _P)
        elif isinstance(e, ast.Unary):
            node = ast.Unary(e.op, self._flatten(e.operand, None), _P)
        elif isinstance(e, ast.Binary):
            node = ast.Binary(e.op, self._flatten(e.lhs, None), self._flatten(e.rhs, None), _P)
        elif isinstance(e, ast.Ternary):
            node = ast.Ternary(
                self._flatten(e.cond, None),
                self._flatten(e.then, None),
                self._flatten(e.other, None),
                _P,
            )
        else:  # pragma: no cover - exhaustive
            raise AutodiffError(f"grad: unexpected expression {e!r}")
        name = out if out is not None else self.names.fresh("T")
        self.tensors.add(name)
        if isinstance(node, ast.Call) and node.func == "index":
            x = node.args[0]
            self.shapes[name] = self._shape_of(x.name) if isinstance(x, ast.Name) else None
        else:
            operands = _tensor_names(node, self.tensors)
            known = [s for s in (self._shape_of(t) for t in operands) if s is not None]
            self.shapes[name] = broadcast(known) if len(known) == len(operands) else None
        self.ops.append(_Op(name, node))
        self._emit(name, f"{name} = {format_expr(node)};", set(_tensor_names(node, self.tensors)))
        return ast.Name(name, _P)

    def _builtin_shape(self, b: ast.Builtin) -> Shape | None:
        if b.func == "reshape":
            return tuple(format_expr(a) for a in b.args[1:])
        if b.func in ("scatter", "scatter_nd") and isinstance(b.args[0], ast.Name):
            return self._shape_of(b.args[0].name)
        if b.func == "gather" and len(b.args) == 3:
            x, i = b.args[0], b.args[1]
            if isinstance(x, ast.Name) and isinstance(i, ast.Name):
                xs, ishape = self._shape_of(x.name), self._shape_of(i.name)
                try:
                    axis = int(format_expr(b.args[2]))
                except ValueError:
                    return None
                if xs is not None and ishape is not None and xs:
                    a = axis % len(xs)
                    return (*xs[:a], *ishape, *xs[a + 1 :])
        return None

    def _emit(self, out: str, text: str, reads: set[str]) -> None:
        self.stmts.append((out, text, reads))

    # -- which tensors carry gradient --------------------------------------

    def _diff_operands(self, op: _Op) -> list[str]:
        """Tensors (with repeats) through which ``op``'s result depends
        differentiably on its operands."""
        node = op.node
        if isinstance(node, ast.Contraction):
            out = [node.default.name] if node.default is not None else []
            if node.combo == "eq":
                return out
            if node.combo == "cond":
                return [node.operands[2].tensor, *out]
            return [a.tensor for a in node.operands] + out
        if isinstance(node, ast.Builtin):
            if node.func == "topk":
                return []
            # gather: the data; scatter, scatter_nd: the data and the updates
            picks = node.args[:1] if node.func in ("gather", "reshape") else node.args[0:3:2]
            return [a.name for a in picks if isinstance(a, ast.Name)]
        return self._diff_atoms(node)

    def _diff_atoms(self, node: ast.Expr) -> list[str]:
        def names(*es: ast.Expr) -> list[str]:
            return [t for t in map(self._tensor, es) if t is not None]

        if isinstance(node, ast.Name):
            return names(node)
        if isinstance(node, ast.Unary):
            return names(node.operand) if node.op == "-" else []
        if isinstance(node, ast.Binary):
            return [] if node.op in NO_GRADIENT_OPS else names(node.lhs, node.rhs)
        if isinstance(node, ast.Ternary):
            return names(node.then, node.other)
        if isinstance(node, ast.Call):
            if node.func in NO_GRADIENT_FUNCTIONS:
                return []
            if node.func == "as_float":
                return names(node.args[0])
            return names(*node.args)
        return []

    def _activity(self) -> dict[str, bool]:
        active = {p.name: p.name in self.wrt for p in self.fn.params}
        for op in self.ops:
            active[op.out] = any(active.get(t, False) for t in self._diff_operands(op))
        return active

    # -- reverse ------------------------------------------------------------

    def run(self) -> GradientProgram:
        cot: dict[str, list[str]] = {}
        cot_params: list[str] = []
        for o in self.fn.outputs:
            shape = self._shape_of(o.name)
            name = self.names.fresh(f"{self.prefix}{o.name}")
            cot_params.append(name)
            if shape is None:
                decl = name
            else:
                dims = []
                for k, s in enumerate(shape):
                    plain = re.fullmatch(r"\d+", s) or s in self.dims
                    dims.append(s if plain else self.names.fresh(f"{name}_D{k}"))
                decl = f"{name}[{_idx(dims)}]"
            self.param_decl[name] = decl
            self.tensors.add(name)
            self.shapes[name] = shape
            if self.active.get(o.name):
                cot.setdefault(o.name, []).append(name)
        self._reverse(cot)
        outs = self._gradients(cot, [self.names.fresh(f"{self.prefix}{w}") for w in self.wrt])
        keep = self._live(outs)
        decls = [self.param_decl[p.name] for p in self.fn.params]
        decls += [self.param_decl[c] for c in cot_params]
        body = "\n".join(f"    {text}" for (out, text, _), k in zip(self.stmts, keep) if k)
        source = f"function ({', '.join(decls)}) -> ({', '.join(outs)}) {{\n{body}\n}}\n"
        return GradientProgram(source, self.wrt, tuple(cot_params), tuple(outs))

    def _reverse(self, cot: dict[str, list[str]]) -> None:
        """The adjoints of every active statement, in reverse order; ``cot``
        holds each tensor's cotangent contributions (the outputs' on entry)."""
        self._refuse_integer_paths(set(cot))
        for op in reversed(self.ops):
            if not self.active.get(op.out) or op.out not in cot:
                continue
            g = self._total(op.out, cot.pop(op.out))
            for tensor, contribution in self._adjoint(op, g):
                if self.active.get(tensor):
                    cot.setdefault(tensor, []).append(contribution)

    def _refuse_integer_paths(self, seeds: set[str]) -> None:
        """Refuse, before any adjoint is written (some need shapes a byte view
        hides), a gradient path from ``seeds`` back to a ``wrt`` parameter that
        crosses an integer-only operation (:func:`_refuse_integer_only`)."""
        reached = set(seeds)
        for op in reversed(self.ops):
            if op.out in reached and self.active.get(op.out):
                _refuse_integer_only(op)
                reached.update(t for t in self._diff_operands(op) if self.active.get(t))

    def _gradients(self, cot: dict[str, list[str]], names: Sequence[str]) -> list[str]:
        """One statement per ``wrt`` parameter, defining ``names[k]`` as its total
        cotangent (zeros of its shape where no path leads to an output)."""
        for w, name in zip(self.wrt, names):
            parts = cot.get(w, [])
            if parts:
                text = " + ".join(parts)
            else:  # no path from w to an output: zeros of w's shape and dtype
                text = f"{w} != {w} ? 0.0 : ({w} == {w} ? 0.0 : {w})"
                parts = [w]
            self._emit(name, f"{name} = {text};", set(parts))
        return list(names)

    def embedded(self, loss: str, names: Sequence[str]) -> Adjoint:
        """The statements to append to the function's own: ``names[k]`` is the
        gradient of ``sum(loss)`` w.r.t. ``wrt[k]`` (an all-ones cotangent)."""
        seed = self.names.fresh(f"ONES_{loss}")
        # 1 in loss's dtype (a ternary of two literals would be float64), NaN included
        ones = f"{loss} != {loss} ? 1.0 : ({loss} == {loss} ? 1.0 : {loss})"
        self._define(seed, ones, self._shape_of(loss))
        cot: dict[str, list[str]] = {loss: [seed]} if self.active.get(loss) else {}
        self._reverse(cot)
        outs = self._gradients(cot, names)
        keep = self._live(outs)
        forward = {p.name for p in self.fn.params} | {st.output for st in self.fn.stmts}
        stmts = [text for (out, text, _), k in zip(self.stmts, keep) if k and out not in forward]
        dims = {
            p.name: self.shapes[p.name] or ()
            for p in self.fn.params
            if p.dims is None and self.shapes.get(p.name) is not None
        }
        return Adjoint(tuple(stmts), dict(dims))

    def _live(self, outs: list[str]) -> list[bool]:
        need = set(outs)
        keep = [False] * len(self.stmts)
        for k in range(len(self.stmts) - 1, -1, -1):
            out, _, reads = self.stmts[k]
            if out in need:
                keep[k] = True
                need |= reads
        return keep

    def _total(self, name: str, parts: list[str]) -> str:
        if len(parts) == 1:
            return parts[0]
        total = self.names.fresh(f"G_{name}")
        self._define(total, " + ".join(parts), self._shape_of(name))
        return total

    def _define(self, name: str, text: str, shape: Shape | None) -> None:
        reads = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)) & self.tensors
        self.tensors.add(name)
        self.shapes[name] = shape
        self._emit(name, f"{name} = {text};", reads)

    def _temp(self, base: str, text: str, shape: Shape | None) -> str:
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) and text in self.tensors:
            return text
        name = self.names.fresh(base)
        self._define(name, text, shape)
        return name

    def _contract(self, base: str, text_after_name: str, reads: set[str], shape: Shape) -> str:
        name = self.names.fresh(base)
        self.tensors.add(name)
        self.shapes[name] = shape
        self._emit(name, f"{name}{text_after_name};", reads)
        return name

    def _reduce_to(self, target: str, text: str, have: Shape) -> str:
        """``text`` (a value of shape ``have``) summed over the axes it broadcast
        ``target`` along: a tensor of ``target``'s shape."""
        want = self._need_shape(target, "to undo a broadcast")
        name = self._temp(f"C_{target}", text, have)
        if have == want:
            return name
        big, small = len(have), len(want)
        if small > big:  # pragma: no cover - an operand is never larger than the result
            raise AutodiffError(f"grad: cannot reduce {have} to {want}")
        acc: list[str] = [f"r{k}" for k in range(big - small)]
        out_idx: list[str] = []
        cons: list[str] = []
        for j in range(small):
            k = big - small + j
            if want[j] == have[k]:
                out_idx.append(f"i{j}")
                acc.append(f"i{j}")
            elif want[j] == "1":
                out_idx.append("0")
                acc.append(f"r{k}")
            else:  # equal or 1, not known until shapes bind
                out_idx.append(f"i{j}")
                acc.append(f"i{j} + t{j}")
                w = _paren(want[j])
                cons.append(f"t{j} < ({_paren(have[k])} + {w} - 1) / {w}")
        clauses = "".join(f", {c}" for c in cons)
        head = f"[{_idx(out_idx)} : {_idx(want)}]" if want else "[]"
        return self._contract(
            f"R_{target}", f"{head} = +({_access(name, acc)}){clauses}", {name}, want
        )

    # -- adjoints -----------------------------------------------------------

    def _adjoint(self, op: _Op, g: str) -> list[tuple[str, str]]:
        node = op.node
        if isinstance(node, ast.Contraction):
            return self._contraction_adjoint(node, g)
        if isinstance(node, ast.Builtin):
            return self._builtin_adjoint(node, g)
        out: list[tuple[str, str]] = []
        for tensor, text in self._partials(node, op.out, g):
            if self.active.get(tensor):
                shape = self._need_shape(op.out, "its operands' gradients are reduced from it")
                out.append((tensor, self._reduce_to(tensor, text, shape)))
        return out

    def _partials(self, node: ast.Expr, o: str, g: str) -> list[tuple[str, str]]:
        """(operand tensor, d out / d operand * g as Tile text at out's shape)."""
        res: list[tuple[str, str]] = []

        def add(e: ast.Expr, text: str) -> None:
            t = self._tensor(e)
            if t is not None:
                res.append((t, text))

        if isinstance(node, ast.Name):
            add(node, g)
        elif isinstance(node, ast.Unary):
            if node.op == "-":
                add(node.operand, f"-{g}")
        elif isinstance(node, ast.Binary):
            a, b = _atom_text(node.lhs), _atom_text(node.rhs)
            if node.op == "+":
                add(node.lhs, g)
                add(node.rhs, g)
            elif node.op == "-":
                add(node.lhs, g)
                add(node.rhs, f"-{g}")
            elif node.op == "*":
                add(node.lhs, f"{g} * {b}")
                add(node.rhs, f"{g} * {a}")
            elif node.op == "/":
                add(node.lhs, f"{g} / {b}")
                add(node.rhs, f"-({g} * {o} / {b})")
            elif node.op == "%":
                add(node.lhs, g)
                add(node.rhs, f"-({g} * floor({a} / {b}))")
        elif isinstance(node, ast.Ternary):
            c = _paren(format_expr(node.cond))
            add(node.then, f"{c} ? {g} : 0")
            add(node.other, f"{c} ? 0 : {g}")
        elif isinstance(node, ast.Call):
            self._call_partials(node, o, g, add)
        return res

    def _call_partials(
        self, node: ast.Call, o: str, g: str, add: Callable[[ast.Expr, str], None]
    ) -> None:
        f, args = node.func, node.args
        x = _atom_text(args[0])
        unary = {
            "exp": f"{g} * {o}",
            "log": f"{g} / {x}",
            "sqrt": f"{g} / (2 * {o})",
            "tanh": f"{g} * (1 - {o} * {o})",
            "sigmoid": f"{g} * {o} * (1 - {o})",
            "sin": f"{g} * cos({x})",
            "cos": f"-({g} * sin({x}))",
            "tan": f"{g} * (1 + {o} * {o})",
            "erf": f"{g} * 1.1283791670955126 * exp(-({x} * {x}))",
            "abs": f"{x} > 0 ? {g} : ({x} < 0 ? -{g} : 0)",
            "relu": f"{x} > 0 ? {g} : 0",
            "as_float": g,
        }
        if f in unary:
            add(args[0], unary[f])
            return
        if f in NO_GRADIENT_FUNCTIONS:
            return
        a, b = x, _atom_text(args[1])
        if f == "pow":
            lit = args[1]
            if isinstance(lit, (ast.IntLit, ast.FloatLit)) and lit.value != 0:
                add(args[0], f"{g} * {b} * pow({a}, {b} - 1)")
            else:
                add(args[0], f"{b} == 0 ? 0 : {g} * {b} * pow({a}, {b} - 1)")
            add(args[1], f"{a} == 0 ? 0 : {g} * {o} * log({a})")
        elif f in ("max", "min"):
            cmp = ">" if f == "max" else "<"
            add(args[0], f"{a} {cmp} {b} ? {g} : ({a} == {b} ? 0.5 * {g} : 0)")
            add(args[1], f"{b} {cmp} {a} ? {g} : ({a} == {b} ? 0.5 * {g} : 0)")
        else:  # pragma: no cover - the checks admit no other function
            raise AutodiffError(f"grad: no derivative rule for '{f}'")

    def _builtin_adjoint(self, b: ast.Builtin, g: str) -> list[tuple[str, str]]:
        x = b.args[0]
        if b.func == "reshape" and isinstance(x, ast.Name):
            if not self.active.get(x.name):
                return []
            shape = self._need_shape(x.name, "to reshape its gradient back")
            text = f"reshape({g}{''.join(', ' + s for s in shape)})"
            return [(x.name, self._temp(f"C_{x.name}", text, shape))]
        if b.func == "gather" and isinstance(x, ast.Name):
            if not self.active.get(x.name):
                return []
            return [(x.name, self._gather_adjoint(b, x.name, g))]
        raise AutodiffError(
            f"grad: '{b.text}' is not differentiable yet: the adjoint of '{b.func}' "
            "is not implemented (docs/autodiff.md)"
        )

    def _gather_adjoint(self, b: ast.Builtin, x: str, g: str) -> str:
        """``O = gather(X, I, axis)`` (NumPy's ``take``): ``dX`` is ``dO`` added into
        zeros at the gathered positions, a ``scatter`` with ``add`` (repeated
        indices accumulate).  The index tensor is flattened to one axis (``J``
        positions) and broadcast over ``X``'s other axes, as ``scatter``'s
        indices have the updates' shape."""
        idx = b.args[1]
        if not isinstance(idx, ast.Name) or len(b.args) != 3:
            raise AutodiffError(f"grad: '{b.text}': a gather's indices must be a tensor")
        axis_arg = b.args[2]
        try:
            axis = int(format_expr(axis_arg))
        except ValueError:
            raise AutodiffError(f"grad: '{b.text}': the gather's axis must be a number") from None
        xs = self._need_shape(x, "to scatter its gradient back")
        ishape = self._need_shape(idx.name, "to scatter the gradient of its gather")
        rank = len(xs)
        a = axis % rank if rank else 0
        count = " * ".join(f"({d})" for d in ishape) if ishape else "1"
        flat_i = self._temp(f"I_{x}", f"reshape({idx.name}, {count})", (count,))
        before, after = list(xs[:a]), list(xs[a + 1 :])
        g_shape = (*before, count, *after)
        flat_g = self._temp(f"G_{x}", f"reshape({g}{''.join(', ' + d for d in g_shape)})", g_shape)
        pre = [f"p{k}" for k in range(len(before))]
        post = [f"q{k}" for k in range(len(after))]
        out_idx = ", ".join([*pre, "j", *post])
        sizes = ", ".join(g_shape)
        spread = self._contract(
            f"J_{x}", f"[{out_idx} : {sizes}] = =({flat_i}[j])", {flat_i}, g_shape
        )
        every = [f"i{k}" for k in range(rank)]
        # X's shape and type, every element 0 (a constraint no index satisfies)
        zeros = self._contract(
            f"Z_{x}",
            f"[{', '.join(every)} : {', '.join(xs)}] = +({x}[{', '.join(every)}])"
            + (f", {every[0]} < 0" if every else ""),
            {x},
            xs,
        )
        return self._temp(f"C_{x}", f"scatter({zeros}, {spread}, {flat_g}, {a}, add)", xs)

    def _solved(self, c: ast.Contraction, k: int) -> _Solved:
        """The adjoint of ``c`` for operand ``k`` over indices where, if it can,
        each of ``k``'s index polynomials is a plain index: in ``x + rest``
        (``x`` an index with coefficient +-1, in no other of ``k``'s
        polynomials) ``x`` becomes ``u - rest`` (``rest - u``) for a fresh
        index ``u``.  A bijection of the index space, so the valid tuples (the
        accesses in bounds, the constraints) are the same; the adjoint then
        writes ``dA[u, ...]`` as a plain contraction instead of accumulating
        into ``dA[x + kx - 1, ...]`` (a scatter the backends run slowly)."""
        polys = list(c.operands[k].indices)
        subs: dict[str, ast.Expr] = {}
        for j, p in enumerate(polys):
            terms = _terms(p)
            if len(terms) < 2:
                continue
            elsewhere: set[str] = set()
            for jj, q in enumerate(polys):
                if jj != j:
                    elsewhere |= _expr_names(q)
            for t, (sign, term) in enumerate(terms):
                if not isinstance(term, ast.Name) or term.name in self.dims:
                    continue
                x = term.name
                rest = terms[:t] + terms[t + 1 :]
                if x in elsewhere or any(x in _expr_names(e) for _, e in rest):
                    continue
                u = ast.Name(self.names.fresh(f"{x}_"), _P)
                if sign > 0:  # x + rest == u: x = u - rest
                    solved = _sum([(1, u), *((-sg, tt) for sg, tt in rest)])
                else:  # rest - x == u: x = rest - u
                    solved = _sum([*rest, (-1, u)])
                # An earlier solution may read x (``i = i_ - r``, then ``r + 1``
                # solved for r): compose, so no old index is left behind.
                subs = {y: _substitute(e, {x: solved}) for y, e in subs.items()}
                subs[x] = solved
                polys[j] = u
                break

        def fmt(e: ast.Expr) -> str:
            return format_expr(_substitute(e, subs))

        return _Solved(
            out=[fmt(e) for e in c.out_indices],
            ops=[
                [fmt(e) for e in (polys if kk == k else a.indices)]
                for kk, a in enumerate(c.operands)
            ],
            cons=[(fmt(q.poly), format_expr(q.bound)) for q in c.constraints],
        )

    def _contraction_adjoint(self, c: ast.Contraction, g: str) -> list[tuple[str, str]]:
        out_polys = [format_expr(e) for e in c.out_indices]
        cons = [(format_expr(k.poly), format_expr(k.bound)) for k in c.constraints]
        polys = [[format_expr(e) for e in a.indices] for a in c.operands]
        res: list[tuple[str, str]] = []
        if c.default is not None and self.active.get(c.default.name):
            res.append((c.default.name, self._default_adjoint(c, g, out_polys, polys, cons)))

        def emit(
            k: int, combo: Callable[[_Solved], str], reads: set[str], others_in_bounds: bool
        ) -> None:
            """``dA_k[...] = +(combo), constraints``; ``others_in_bounds``: the
            operands the combination drops stay bounds (constraints)."""
            a = c.operands[k]
            sv = self._solved(c, k)
            extra: list[tuple[str, str]] = []
            if others_in_bounds:
                for kk, b in enumerate(c.operands):
                    if kk != k:
                        shape = self._need_shape(b.tensor, "its bounds limit a contraction")
                        extra += list(zip(sv.ops[kk], shape))
            shape = self._need_shape(a.tensor, "its gradient is sized like it")
            head = f"[{_idx(sv.ops[k])} : {_idx(shape)}]" if shape else "[]"
            clauses = "".join(f", {p} < {b}" for p, b in sv.cons + extra)
            text = f"{head} = +({combo(sv)}){clauses}"
            name = self._contract(f"C_{a.tensor}", text, reads, shape)
            res.append((a.tensor, name))

        ops = c.operands

        def acc(k: int) -> Callable[[_Solved], str]:
            return lambda sv: _access(ops[k].tensor, sv.ops[k])

        def gacc(sv: _Solved) -> str:
            return _access(g, sv.out)

        def times(o: Callable[[_Solved], str]) -> Callable[[_Solved], str]:
            return lambda sv: f"{gacc(sv)} * {o(sv)}"

        if c.agg in ("add", "assign"):
            if c.combo == "none":
                if self.active.get(ops[0].tensor):
                    emit(0, gacc, {g}, False)
            elif c.combo == "mul":
                for k, other in ((0, 1), (1, 0)):
                    if self.active.get(ops[k].tensor):
                        emit(k, times(acc(other)), {g, ops[other].tensor}, False)
            elif c.combo == "add":
                for k in (0, 1):
                    if self.active.get(ops[k].tensor):
                        emit(k, gacc, {g}, True)
            elif c.combo == "cond":
                if self.active.get(ops[2].tensor):
                    x, y = acc(0), acc(1)
                    emit(
                        2,
                        lambda sv: f"{x(sv)} == {y(sv)} ? ({gacc(sv)})",
                        {g, ops[0].tensor, ops[1].tensor},
                        False,
                    )
            return res
        if c.combo != "none":
            raise AutodiffError(
                f"grad: '{c.text}': the gradient of a '{_AGG_TOKEN[c.agg]}' aggregation is "
                "implemented for a single operand only (docs/autodiff.md)"
            )
        a = ops[0]
        if not self.active.get(a.tensor):
            return res
        if c.agg in ("max", "min"):
            # every element equal to the extremum gets the gradient (ties included)
            emit(
                0,
                lambda sv: f"{acc(0)(sv)} == {_access(c.output, sv.out)} ? ({gacc(sv)})",
                {g, a.tensor, c.output},
                False,
            )
            return res
        # product: exact with zeros, from the product of the nonzero factors and
        # the count of zero factors of each output element
        sizes = self._need_shape(c.output, "product gradient")
        head = f"[{_idx(out_polys)} : {_idx(sizes)}]" if sizes else "[]"
        clauses = "".join(f", {p} < {b}" for p, b in cons)
        t = a.tensor
        zc = self._temp(f"Z_{t}", f"{t} == 0 ? 1 : 0", self._shape_of(t))
        nz = self._temp(f"NZ_{t}", f"{t} == 0 ? 1 : {t}", self._shape_of(t))
        inv = self._temp(f"INV_{t}", f"{t} == 0 ? 0 : 1 / {t}", self._shape_of(t))
        isz = self._temp(f"ISZ_{t}", f"{t} == 0 ? {nz} : 0", self._shape_of(t))
        zeros = self._contract(
            f"NZERO_{c.output}", f"{head} = +({_access(zc, polys[0])}){clauses}", {zc}, sizes
        )
        prod = self._contract(
            f"PNZ_{c.output}", f"{head} = *({_access(nz, polys[0])}){clauses}", {nz}, sizes
        )
        g1 = self._temp(f"G1_{t}", f"{zeros} == 0 ? {g} * {prod} : 0", sizes)
        g2 = self._temp(f"G2_{t}", f"{zeros} == 1 ? {g} * {prod} : 0", sizes)
        emit(0, lambda sv: f"{_access(g1, sv.out)} * {_access(inv, sv.ops[0])}", {g1, inv}, False)
        emit(0, lambda sv: f"{_access(g2, sv.out)} * {_access(isz, sv.ops[0])}", {g2, isz}, False)
        return res

    def _default_adjoint(
        self,
        c: ast.Contraction,
        g: str,
        out_polys: list[str],
        polys: list[list[str]],
        cons: list[tuple[str, str]],
    ) -> str:
        """The default tensor's gradient: ``g`` where no valid tuple writes."""
        sizes = self._need_shape(c.output, "default gradient")
        if not sizes:
            raise AutodiffError(f"grad: '{c.text}': a rank-0 output with a default")
        ones = self._temp(f"ONE_{c.output}", f"index({g}, 0) * 0 + 1", sizes)
        extra = []
        for k, a in enumerate(c.operands):
            shape = self._need_shape(a.tensor, "its bounds limit a contraction")
            extra += list(zip(polys[k], shape))
        clauses = "".join(f", {p} < {b}" for p, b in cons + extra)
        head = f"[{_idx(out_polys)} : {_idx(sizes)}]"
        hit = self._contract(
            f"HIT_{c.output}", f"{head} = >({_access(ones, out_polys)}){clauses}", {ones}, sizes
        )
        default = c.default.name if c.default is not None else c.output
        return self._temp(f"C_{default}", f"{hit} > 0 ? 0 : {g}", sizes)


@dataclass(frozen=True)
class _Solved:
    """A contraction's index polynomials (text) after :meth:`_Differentiator._solved`."""

    out: list[str]  # the output's
    ops: list[list[str]]  # each operand's
    cons: list[tuple[str, str]]  # (poly, bound) of each constraint


def _terms(e: ast.Expr) -> list[tuple[int, ast.Expr]]:
    """The signed additive terms of an index polynomial."""
    if isinstance(e, ast.Binary) and e.op in ("+", "-"):
        sign = 1 if e.op == "+" else -1
        return _terms(e.lhs) + [(sign * s, t) for s, t in _terms(e.rhs)]
    if isinstance(e, ast.Unary) and e.op == "-":
        return [(-s, t) for s, t in _terms(e.operand)]
    return [(1, e)]


def _sum(terms: Sequence[tuple[int, ast.Expr]]) -> ast.Expr:
    if not terms:
        return ast.IntLit(0, _P)
    sign, first = terms[0]
    out: ast.Expr = first if sign > 0 else ast.Unary("-", first, _P)
    for sign, t in terms[1:]:
        out = ast.Binary("+" if sign > 0 else "-", out, t, _P)
    return out


def _expr_names(e: ast.Expr) -> set[str]:
    if isinstance(e, ast.Name):
        return {e.name}
    if isinstance(e, ast.Unary):
        return _expr_names(e.operand)
    if isinstance(e, ast.Binary):
        return _expr_names(e.lhs) | _expr_names(e.rhs)
    if isinstance(e, ast.Ternary):
        return _expr_names(e.cond) | _expr_names(e.then) | _expr_names(e.other)
    if isinstance(e, ast.Call):
        return set().union(*(_expr_names(a) for a in e.args))
    return set()


def _substitute(e: ast.Expr, subs: dict[str, ast.Expr]) -> ast.Expr:
    if not subs:
        return e
    if isinstance(e, ast.Name):
        return subs.get(e.name, e)
    if isinstance(e, ast.Unary):
        return ast.Unary(e.op, _substitute(e.operand, subs), e.pos)
    if isinstance(e, ast.Binary):
        return ast.Binary(e.op, _substitute(e.lhs, subs), _substitute(e.rhs, subs), e.pos)
    return e


#: Statement builtins that reinterpret bytes: no value of theirs is a smooth
#: function of their input's, so no gradient flows through them.
BYTE_VIEWS = frozenset(VIEW_BITS)


def _refuse_integer_only(op: _Op) -> None:
    """A gradient that would flow through ``dot4`` (the function or the
    combination) or a byte view is refused: they compute on the bytes of
    integers, and have no derivative (docs/autodiff.md)."""
    node = op.node
    if isinstance(node, ast.Contraction) and node.combo == "dot4":
        what, text = "the combination 'dot4' multiplies integer bytes", node.text
    elif isinstance(node, ast.Builtin) and node.func in BYTE_VIEWS:
        what, text = f"'{node.func}' reinterprets bytes", node.text
    elif isinstance(node, ast.Call) and node.func == "dot4":
        what, text = "'dot4' multiplies integer bytes", format_expr(node)
    else:
        return
    raise AutodiffError(
        f"grad: '{text}': {what}, an integer operation with no gradient, and a parameter "
        "named in wrt flows through it to an output; differentiate with respect to the "
        "parameters that do not reach it (a quantised model's float scales, say)"
    )


def _reads_of(c: ast.Contraction) -> set[str]:
    reads = {a.tensor for a in c.operands}
    if c.default is not None:
        reads.add(c.default.name)
    return reads


def _contraction_text(c: ast.Contraction) -> str:
    accs = [_access(a.tensor, [format_expr(e) for e in a.indices]) for a in c.operands]
    combo = {
        "none": "{0}",
        "mul": "{0} * {1}",
        "add": "{0} + {1}",
        "eq": "{0} == {1}",
        "dot4": "dot4({0}, {1})",
        "cond": "{0} == {1} ? ({2})",
    }[c.combo].format(*accs)
    outs = [format_expr(e) for e in c.out_indices]
    head = f"[{_idx(outs)} : {_idx(format_expr(s) for s in c.sizes)}]" if outs else "[]"
    clauses = "".join(f", {format_expr(k.poly)} < {format_expr(k.bound)}" for k in c.constraints)
    if c.default is not None:
        clauses += f", default {c.default.name}"
    return f"{c.output}{head} = {_AGG_TOKEN[c.agg]}({combo}){clauses};"


def _check_wrt(fn: ast.Function, wrt: Sequence[str]) -> None:
    check_names(wrt, [p.name for p in fn.params], "a parameter of the function", "parameters")


def check_names(wrt: Sequence[str], names: Sequence[str], what: str, listed: str) -> None:
    """``wrt`` names each of ``names`` (``what`` each is, ``listed`` what they are
    called in the message) at most once, and at least one."""
    for w in wrt:
        if w not in names:
            raise AutodiffError(
                f"grad: '{w}' is not {what} ({listed}: {', '.join(names) or 'none'})"
            )
    if len(set(wrt)) != len(wrt):
        raise AutodiffError(
            f"grad: wrt names {what.split(' of ')[0].removeprefix('a ')} twice: {', '.join(wrt)}"
        )
    if not wrt:
        raise AutodiffError(f"grad: wrt is empty; name at least one of the {listed}")


def gradient_source(fn: ast.Function, wrt: Sequence[str]) -> GradientProgram:
    """The Tile program computing the gradients of ``fn`` w.r.t. ``wrt``."""
    _check_wrt(fn, wrt)
    return _Differentiator(fn, wrt).run()


def adjoint_statements(
    fn: ast.Function,
    loss: str,
    wrt: Sequence[str],
    names: Sequence[str],
    used: Iterable[str] = (),
) -> Adjoint:
    """The adjoint of ``fn``'s statements, to be appended to them (the EDSL's
    ``E.gradients``): statements defining ``names[k]``, the gradient of the sum
    of the elements of the tensor ``loss`` (a statement of ``fn``; its
    cotangent is all ones) with respect to the parameter ``wrt[k]``.  Forward
    statements of ``fn`` are not repeated; the operands the rules need that
    ``fn`` computes inside one of its statements are.  New names avoid ``used``
    and ``names``, which the caller must keep free of ``fn``'s names."""
    _check_wrt(fn, wrt)
    if len(names) != len(wrt):
        raise AutodiffError(f"grad: {len(wrt)} parameters but {len(names)} gradient names")
    if loss not in {st.output for st in fn.stmts}:
        raise AutodiffError(
            f"grad: the loss '{loss}' is not computed by a statement of the function"
        )
    return _Differentiator(fn, wrt, used=[*used, *names]).embedded(loss, names)


__all__ = [
    "Adjoint",
    "AutodiffError",
    "GradientProgram",
    "adjoint_statements",
    "broadcast",
    "gradient_source",
]
