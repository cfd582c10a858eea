"""The adjoint rules of reverse-mode differentiation: for each forward operation
(an elementwise operation on atoms, a builtin, a contraction) the Tile text of
its operands' cotangent contributions.  A mixin of the differentiator
(``_core._Differentiator``), which keeps the names, shapes and statements the
rules read and add to; docs/autodiff.md lists the rules."""

from __future__ import annotations

from collections.abc import Callable

from ..tile import ast
from ..tile.exprs import format_expr
from ._base import (
    AGG_TOKEN,
    NO_GRADIENT_FUNCTIONS,
    NOWHERE,
    AutodiffError,
    Names,
    Op,
    Shape,
    Solved,
    access,
    atom_text,
    expr_names,
    idx,
    index_terms,
    paren,
    substitute,
    sum_terms,
)


class AdjointRules:
    """Adjoint rules over the state of a differentiator (declared here; the
    subclass sets it and defines the statement builders)."""

    names: Names
    dims: set[str]
    active: dict[str, bool]

    def _tensor(self, e: ast.Expr) -> str | None:
        raise NotImplementedError

    def _shape_of(self, name: str) -> Shape | None:
        raise NotImplementedError

    def _need_shape(self, name: str, why: str) -> Shape:
        raise NotImplementedError

    def _temp(self, base: str, text: str, shape: Shape | None) -> str:
        raise NotImplementedError

    def _contract(self, base: str, text_after_name: str, reads: set[str], shape: Shape) -> str:
        raise NotImplementedError

    def _reduce_to(self, target: str, text: str, have: Shape) -> str:
        raise NotImplementedError

    def _adjoint(self, op: Op, g: str) -> list[tuple[str, str]]:
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
            a, b = atom_text(node.lhs), atom_text(node.rhs)
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
            c = paren(format_expr(node.cond))
            add(node.then, f"{c} ? {g} : 0")
            add(node.other, f"{c} ? 0 : {g}")
        elif isinstance(node, ast.Call):
            self._call_partials(node, o, g, add)
        return res

    def _call_partials(
        self, node: ast.Call, o: str, g: str, add: Callable[[ast.Expr, str], None]
    ) -> None:
        f, args = node.func, node.args
        x = atom_text(args[0])
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
        a, b = x, atom_text(args[1])
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

    def _solved(self, c: ast.Contraction, k: int) -> Solved:
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
            terms = index_terms(p)
            if len(terms) < 2:
                continue
            elsewhere: set[str] = set()
            for jj, q in enumerate(polys):
                if jj != j:
                    elsewhere |= expr_names(q)
            for t, (sign, term) in enumerate(terms):
                if not isinstance(term, ast.Name) or term.name in self.dims:
                    continue
                x = term.name
                rest = terms[:t] + terms[t + 1 :]
                if x in elsewhere or any(x in expr_names(e) for _, e in rest):
                    continue
                u = ast.Name(self.names.fresh(f"{x}_"), NOWHERE)
                if sign > 0:  # x + rest == u: x = u - rest
                    solved = sum_terms([(1, u), *((-sg, tt) for sg, tt in rest)])
                else:  # rest - x == u: x = rest - u
                    solved = sum_terms([*rest, (-1, u)])
                # An earlier solution may read x (``i = i_ - r``, then ``r + 1``
                # solved for r): compose, so no old index is left behind.
                subs = {y: substitute(e, {x: solved}) for y, e in subs.items()}
                subs[x] = solved
                polys[j] = u
                break

        def fmt(e: ast.Expr) -> str:
            return format_expr(substitute(e, subs))

        return Solved(
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
            k: int, combo: Callable[[Solved], str], reads: set[str], others_in_bounds: bool
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
            head = f"[{idx(sv.ops[k])} : {idx(shape)}]" if shape else "[]"
            clauses = "".join(f", {p} < {b}" for p, b in sv.cons + extra)
            text = f"{head} = +({combo(sv)}){clauses}"
            name = self._contract(f"C_{a.tensor}", text, reads, shape)
            res.append((a.tensor, name))

        ops = c.operands

        def acc(k: int) -> Callable[[Solved], str]:
            return lambda sv: access(ops[k].tensor, sv.ops[k])

        def gacc(sv: Solved) -> str:
            return access(g, sv.out)

        def times(o: Callable[[Solved], str]) -> Callable[[Solved], str]:
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
                f"grad: '{c.text}': the gradient of a '{AGG_TOKEN[c.agg]}' aggregation is "
                "implemented for a single operand only (docs/autodiff.md)"
            )
        a = ops[0]
        if not self.active.get(a.tensor):
            return res
        if c.agg in ("max", "min"):
            # every element equal to the extremum gets the gradient (ties included)
            emit(
                0,
                lambda sv: f"{acc(0)(sv)} == {access(c.output, sv.out)} ? ({gacc(sv)})",
                {g, a.tensor, c.output},
                False,
            )
            return res
        # product: exact with zeros, from the product of the nonzero factors and
        # the count of zero factors of each output element
        sizes = self._need_shape(c.output, "product gradient")
        head = f"[{idx(out_polys)} : {idx(sizes)}]" if sizes else "[]"
        clauses = "".join(f", {p} < {b}" for p, b in cons)
        t = a.tensor
        zc = self._temp(f"Z_{t}", f"{t} == 0 ? 1 : 0", self._shape_of(t))
        nz = self._temp(f"NZ_{t}", f"{t} == 0 ? 1 : {t}", self._shape_of(t))
        inv = self._temp(f"INV_{t}", f"{t} == 0 ? 0 : 1 / {t}", self._shape_of(t))
        isz = self._temp(f"ISZ_{t}", f"{t} == 0 ? {nz} : 0", self._shape_of(t))
        zeros = self._contract(
            f"NZERO_{c.output}", f"{head} = +({access(zc, polys[0])}){clauses}", {zc}, sizes
        )
        prod = self._contract(
            f"PNZ_{c.output}", f"{head} = *({access(nz, polys[0])}){clauses}", {nz}, sizes
        )
        g1 = self._temp(f"G1_{t}", f"{zeros} == 0 ? {g} * {prod} : 0", sizes)
        g2 = self._temp(f"G2_{t}", f"{zeros} == 1 ? {g} * {prod} : 0", sizes)
        emit(0, lambda sv: f"{access(g1, sv.out)} * {access(inv, sv.ops[0])}", {g1, inv}, False)
        emit(0, lambda sv: f"{access(g2, sv.out)} * {access(isz, sv.ops[0])}", {g2, isz}, False)
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
        head = f"[{idx(out_polys)} : {idx(sizes)}]"
        hit = self._contract(
            f"HIT_{c.output}", f"{head} = >({access(ones, out_polys)}){clauses}", {ones}, sizes
        )
        default = c.default.name if c.default is not None else c.output
        return self._temp(f"C_{default}", f"{hit} > 0 ? 0 : {g}", sizes)
