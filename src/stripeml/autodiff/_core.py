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
(see ``_base.max_size``), so nothing waits for the inputs' shapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..tile import ast
from ..tile.exprs import CAST_BITS, format_expr
from ._base import (
    NO_GRADIENT_FUNCTIONS,
    NO_GRADIENT_OPS,
    NOWHERE,
    AutodiffError,
    Names,
    Op,
    Shape,
    access,
    broadcast,
    contraction_text,
    idx,
    paren,
    reads_of,
    refuse_integer_only,
    tensor_names,
)
from ._rules import AdjointRules


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


class _Differentiator(AdjointRules):
    def __init__(
        self,
        fn: ast.Function,
        wrt: Sequence[str],
        name_prefix: str = "D",
        used: Iterable[str] = (),
    ) -> None:
        self.fn = fn
        self.names = Names(fn.source)
        self.names.used.update(used)
        self.dims: set[str] = set()
        self.tensors: set[str] = set()
        self.shapes: dict[str, Shape | None] = {}
        self.param_decl: dict[str, str] = {}
        self.ops: list[Op] = []
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
                self.param_decl[p.name] = f"{p.name}[{idx(shape)}]"
            elif p.name in ranks:
                shape = tuple(self.names.fresh(f"{p.name}_D{k}") for k in range(ranks[p.name]))
                self.dims.update(shape)
                self.shapes[p.name] = shape
                self.param_decl[p.name] = f"{p.name}[{idx(shape)}]"
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
            self.ops.append(Op(stmt.output, stmt))
            self.shapes[stmt.output] = tuple(format_expr(s) for s in stmt.sizes)
            self._emit(stmt.output, contraction_text(stmt), reads_of(stmt))
            return
        if isinstance(stmt, ast.Builtin):
            self.ops.append(Op(stmt.output, stmt))
            self.shapes[stmt.output] = self._builtin_shape(stmt)
            reads = {
                a.name for a in stmt.args if isinstance(a, ast.Name) and a.name in self.tensors
            }
            self._emit(stmt.output, stmt.text + ";", reads)
            return
        self._flatten(stmt.expr, stmt.output)

    def _flatten(self, e: ast.Expr, out: str | None) -> ast.Expr:
        """Emit ``e`` as one-operation statements; return the atom naming it."""
        if not tensor_names(e, self.tensors) or isinstance(e, ast.Name):
            if out is None:
                return e
            node: ast.Expr = e
        elif isinstance(e, ast.Call) and e.func == "index":
            node = e
        elif isinstance(e, ast.Call) and e.func in CAST_BITS:
            node = ast.Call(e.func, (self._flatten(e.args[0], None), *e.args[1:]), NOWHERE)
        elif isinstance(e, ast.Call):
            node = ast.Call(e.func, tuple(self._flatten(a, None) for a in e.args), NOWHERE)
        elif isinstance(e, ast.Unary):
            node = ast.Unary(e.op, self._flatten(e.operand, None), NOWHERE)
        elif isinstance(e, ast.Binary):
            node = ast.Binary(e.op, self._flatten(e.lhs, None), self._flatten(e.rhs, None), NOWHERE)
        elif isinstance(e, ast.Ternary):
            node = ast.Ternary(
                self._flatten(e.cond, None),
                self._flatten(e.then, None),
                self._flatten(e.other, None),
                NOWHERE,
            )
        else:  # pragma: no cover - exhaustive
            raise AutodiffError(f"grad: unexpected expression {e!r}")
        name = out if out is not None else self.names.fresh("T")
        self.tensors.add(name)
        if isinstance(node, ast.Call) and node.func == "index":
            x = node.args[0]
            self.shapes[name] = self._shape_of(x.name) if isinstance(x, ast.Name) else None
        else:
            operands = tensor_names(node, self.tensors)
            known = [s for s in (self._shape_of(t) for t in operands) if s is not None]
            self.shapes[name] = broadcast(known) if len(known) == len(operands) else None
        self.ops.append(Op(name, node))
        self._emit(name, f"{name} = {format_expr(node)};", set(tensor_names(node, self.tensors)))
        return ast.Name(name, NOWHERE)

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

    def _diff_operands(self, op: Op) -> list[str]:
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
                decl = f"{name}[{idx(dims)}]"
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
        crosses an integer-only operation (:func:`refuse_integer_only`)."""
        reached = set(seeds)
        for op in reversed(self.ops):
            if op.out in reached and self.active.get(op.out):
                refuse_integer_only(op)
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
                w = paren(want[j])
                cons.append(f"t{j} < ({paren(have[k])} + {w} - 1) / {w}")
        clauses = "".join(f", {c}" for c in cons)
        head = f"[{idx(out_idx)} : {idx(want)}]" if want else "[]"
        return self._contract(
            f"R_{target}", f"{head} = +({access(name, acc)}){clauses}", {name}, want
        )


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
