"""Static checks of a parsed Tile function: everything decidable without shapes.

:func:`check` enforces the naming rules (upper-case tensors and dimensions,
lower-case indices, definition before use, single assignment), the built-in
function table, and the well-formedness of contractions: affine index
polynomials, size expressions over dimensions, operand counts and declared
ranks.  Checks that need shapes (rank of inputs without declared dims, sizes,
dtypes) happen when shapes bind.

Errors are :class:`~stripeml.errors.TileNameError` (a name is undefined or
misused) or :class:`~stripeml.errors.TileTypeError` (a construct is
ill-formed).  Their message starts with ``line:col:`` of the offending
statement (or parameter), quotes the statement, and shows the source line with
a caret.
"""

from __future__ import annotations

from ..errors import StripeError, TileNameError, TileTypeError, format_located
from . import ast
from .exprs import (
    BUILTIN_WORDS,
    CAST_BITS,
    FUNCTION_ARITY,
    INT64_MAX,
    STATEMENT_FUNCTIONS,
    VIEW_BITS,
    children,
    format_expr,
    is_index_name,
    is_upper_name,
    literal_int,
)

# combo -> number of operands
COMBO_ARITY = {"none": 1, "mul": 2, "add": 2, "eq": 2, "dot4": 2, "cond": 3}
_SIZE_OPS = ("+", "-", "*", "/")


def check(fn: ast.Function) -> None:
    """Raise ``TileNameError``/``TileTypeError`` on the first static error in ``fn``."""
    _Checker(fn).run()


class _Checker:
    def __init__(self, fn: ast.Function) -> None:
        self.fn = fn
        self.dims: set[str] = set()
        self.params: dict[str, ast.Param] = {}
        # tensor name -> rank when known statically (declared dims, contraction output)
        self.ranks: dict[str, int | None] = {}
        self.stmt: ast.Statement | None = None
        # where each statement output is (first) assigned, for "used before defined"
        self.assigned_at: dict[str, ast.Pos] = {}
        for s in fn.stmts:
            self.assigned_at.setdefault(s.output, s.pos)

    # -- reporting -----------------------------------------------------------

    def fail(
        self,
        cls: type[TileNameError] | type[TileTypeError],
        message: str,
        pos: ast.Pos | None = None,
    ) -> StripeError:
        if pos is None:
            assert self.stmt is not None
            pos = self.stmt.pos
            message = f"in '{self.stmt.text}': {message}"
        err = cls(format_located(message, pos.line, pos.column, self.fn.source))
        err.line, err.column = pos.line, pos.column
        return err

    def name_error(self, message: str, pos: ast.Pos | None = None) -> StripeError:
        return self.fail(TileNameError, message, pos)

    def type_error(self, message: str, pos: ast.Pos | None = None) -> StripeError:
        return self.fail(TileTypeError, message, pos)

    def need_upper(self, name: str, what: str, pos: ast.Pos | None = None) -> None:
        if not is_upper_name(name):
            raise self.name_error(
                f"{what} '{name}' must start with an upper-case letter "
                "(tensors and dimensions are upper-case, indices lower-case)",
                pos,
            )

    # -- the function --------------------------------------------------------

    def run(self) -> None:
        fn = self.fn
        for p in fn.params:
            self.need_upper(p.name, "parameter", p.pos)
            if p.name in self.params:
                raise self.name_error(f"parameter '{p.name}' is declared twice", p.pos)
            self.params[p.name] = p
            self.ranks[p.name] = None if p.dims is None else len(p.dims)
        for p in fn.params:
            for d in p.dims or ():
                if isinstance(d, ast.Name):
                    self.need_upper(d.name, f"dimension of '{p.name}'", d.pos)
                    if d.name in self.params:
                        raise self.name_error(
                            f"dimension '{d.name}' of '{p.name}' has the name of a tensor "
                            "parameter",
                            d.pos,
                        )
                    self.dims.add(d.name)
                elif d.value < 0:
                    raise self.type_error(
                        f"negative size {d.value} in the shape of '{p.name}'", d.pos
                    )
                else:
                    self.int64_literal(d, f"the shape of '{p.name}'")
        declared: set[str] = set()
        for o in fn.outputs:
            self.need_upper(o.name, "output", o.pos)
            if o.name in declared:
                raise self.name_error(f"output '{o.name}' is declared twice", o.pos)
            if o.name in self.params:
                raise self.name_error(f"output '{o.name}' is also a parameter", o.pos)
            declared.add(o.name)
        for stmt in fn.stmts:
            self.stmt = stmt
            self.statement_target(stmt)
            if isinstance(stmt, ast.Contraction):
                self.contraction(stmt)
                self.ranks[stmt.output] = len(stmt.out_indices)
            elif isinstance(stmt, ast.Builtin):
                self.ranks[stmt.output] = self.builtin(stmt)
            else:
                self.elementwise(stmt.expr)
                self.ranks[stmt.output] = None
        self.stmt = None
        for o in fn.outputs:
            if o.name not in self.ranks:
                raise self.name_error(f"output '{o.name}' is never assigned", o.pos)

    def statement_target(self, stmt: ast.Statement) -> None:
        name = stmt.output
        self.need_upper(name, "assigned tensor")
        if name in self.params:
            raise self.name_error(f"assigns to parameter '{name}'; parameters are read-only")
        if name in self.dims:
            raise self.name_error(f"assigns to '{name}', which is a dimension name")
        if name in self.ranks:
            first = self.assigned_at[name]
            raise self.name_error(
                f"'{name}' is already assigned at {first.line}:{first.column}; "
                "each tensor is assigned once"
            )

    def tensor_ref(self, name: str, role: str) -> None:
        """``name`` must be a tensor defined before the current statement."""
        if name in self.ranks:
            return
        if name in self.dims:
            raise self.name_error(f"{role} '{name}' is a dimension, not a tensor")
        if not is_upper_name(name):
            raise self.name_error(
                f"{role} '{name}' is not a tensor name; tensors start with an upper-case letter"
            )
        if name in self.assigned_at:
            at = self.assigned_at[name]
            raise self.name_error(
                f"{role} '{name}' is used before it is assigned (at {at.line}:{at.column})"
            )
        raise self.name_error(f"{role} '{name}' is not defined")

    # -- contractions --------------------------------------------------------

    def contraction(self, c: ast.Contraction) -> None:
        if c.agg not in ast.AGG_OPS.values():
            raise self.type_error(f"unknown aggregation '{c.agg}'")
        if c.combo not in COMBO_ARITY:
            raise self.type_error(f"unknown combination '{c.combo}'")
        want = COMBO_ARITY[c.combo]
        if len(c.operands) != want:
            raise self.type_error(
                f"a '{c.combo}' contraction takes {want} operand(s), got {len(c.operands)}"
            )
        if len(c.out_indices) != len(c.sizes):
            raise self.type_error(
                f"output '{c.output}' has {len(c.out_indices)} indices but {len(c.sizes)} sizes"
            )
        for e in c.out_indices:
            self.poly(e, f"the output index list of '{c.output}'")
        for e in c.sizes:
            self.size(e, f"the sizes of '{c.output}'")
        for a in c.operands:
            self.tensor_ref(a.tensor, "contraction operand")
            rank = self.ranks[a.tensor]
            if rank is not None and rank != len(a.indices):
                p = self.params.get(a.tensor)
                how = f"is declared as {_shape_text(p)}" if p is not None else f"has rank {rank}"
                raise self.type_error(
                    f"'{a.tensor}' {how} but is indexed with {len(a.indices)} "
                    f"{'index' if len(a.indices) == 1 else 'indices'}"
                )
            for e in a.indices:
                self.poly(e, f"the index list of '{a.tensor}'")
        for k in c.constraints:
            self.poly(k.poly, "a constraint")
            self.size(k.bound, "the bound of a constraint")
        if c.default is not None:
            self.tensor_ref(c.default.name, "default")

    def int64_literal(self, e: ast.IntLit, where: str) -> None:
        """Literals in shapes, sizes and index polynomials are int64 values."""
        if e.value > INT64_MAX:
            raise self.type_error(
                f"integer literal {e.value} in {where} does not fit int64 (at most "
                f"{INT64_MAX}): shapes, sizes, index polynomials and constraints are int64",
                e.pos,
            )

    def poly(self, e: ast.Expr, where: str) -> bool:
        """Check that ``e`` is affine in the indices; return whether it uses any."""
        if isinstance(e, ast.IntLit):
            self.int64_literal(e, where)
            return False
        if isinstance(e, ast.Name):
            if is_index_name(e.name):
                return True
            if e.name in self.dims:
                return False
            if e.name in self.ranks or e.name in self.assigned_at:
                raise self.name_error(
                    f"tensor '{e.name}' used in {where}; index polynomials use indices "
                    "(lower-case) and dimensions"
                )
            if is_upper_name(e.name):
                raise self.name_error(f"unknown dimension '{e.name}' in {where}")
            raise self.name_error(f"'{e.name}' in {where} must start with a letter")
        if isinstance(e, ast.FloatLit):
            raise self.type_error(f"non-integer constant {e.value!r} in {where}")
        if isinstance(e, ast.Unary) and e.op == "-":
            return self.poly(e.operand, where)
        if isinstance(e, ast.Binary) and e.op in _SIZE_OPS:
            lhs, rhs = self.poly(e.lhs, where), self.poly(e.rhs, where)
            if e.op == "*" and lhs and rhs:
                raise self.type_error(
                    f"'{format_expr(e)}' in {where} multiplies two indices; "
                    "index polynomials must be affine"
                )
            if e.op == "/" and (lhs or rhs):
                raise self.type_error(
                    f"'{format_expr(e)}' in {where} divides an index; "
                    "index polynomials must be affine"
                )
            return lhs or rhs
        raise self.type_error(
            f"'{format_expr(e)}' is not allowed in {where}; index polynomials use "
            "+, -, * by a constant, and integer constants"
        )

    def size(self, e: ast.Expr, where: str) -> None:
        """Sizes: dimensions and integer literals with ``+ - * /``."""
        if isinstance(e, ast.IntLit):
            self.int64_literal(e, where)
            return
        if isinstance(e, ast.Name):
            if e.name in self.dims:
                return
            if is_index_name(e.name):
                raise self.type_error(
                    f"index '{e.name}' in {where}; sizes use only dimensions and integers"
                )
            if e.name in self.ranks or e.name in self.assigned_at:
                raise self.type_error(
                    f"tensor '{e.name}' in {where}; sizes use only dimensions and integers"
                )
            raise self.name_error(f"unknown dimension '{e.name}' in {where}")
        if isinstance(e, ast.Unary) and e.op == "-":
            return self.size(e.operand, where)
        if isinstance(e, ast.Binary) and e.op in _SIZE_OPS:
            self.size(e.lhs, where)
            self.size(e.rhs, where)
            return
        raise self.type_error(
            f"'{format_expr(e)}' is not allowed in {where}; sizes use dimensions and "
            "integers with + - * / and parentheses"
        )

    # -- statement builtins --------------------------------------------------

    def builtin(self, b: ast.Builtin) -> int | None:
        """Check ``O = reshape(X, sizes...)`` / ``O = gather(X, I, axis)``; return
        the output's rank when it is known statically."""
        usage = STATEMENT_FUNCTIONS.get(b.func)
        if usage is None:
            known = ", ".join(sorted(STATEMENT_FUNCTIONS))
            raise self.name_error(f"unknown statement builtin '{b.func}' (known: {known})")
        if b.func == "reshape":
            if not b.args:
                raise self.type_error(
                    f"'reshape' needs the tensor to reshape and then its new sizes: '{usage}'"
                )
            self.tensor_arg(b.args[0], "reshape", "the tensor to reshape")
            for e in b.args[1:]:
                self.size(e, "the sizes of 'reshape'")
            return len(b.args) - 1
        if b.func in VIEW_BITS:
            return self.view(b, usage)
        if b.func != "gather":
            return self.builtin_with_word(b, usage)
        if len(b.args) != 3:
            raise self.type_error(f"'gather' takes 3 arguments ('{usage}'), got {len(b.args)}")
        x = self.tensor_arg(b.args[0], "gather", "the tensor to gather from")
        i = self.tensor_arg(b.args[1], "gather", "the indices")
        self.axis_arg(b.args[2], "gather")
        rx, ri = self.ranks[x], self.ranks[i]
        return None if rx is None or ri is None else rx + ri - 1

    def view(self, b: ast.Builtin, usage: str) -> int | None:
        """``view_int/uint/float(X, bits)``: a tensor and an allowed bit width (a
        literal); the result has ``X``'s rank."""
        if len(b.args) != 2:
            raise self.type_error(f"'{b.func}' takes 2 arguments ('{usage}'), got {len(b.args)}")
        x = self.tensor_arg(b.args[0], b.func, "the tensor to view")
        arg = b.args[1]
        _, bits = VIEW_BITS[b.func]
        if not isinstance(arg, ast.IntLit):
            raise self.type_error(
                f"the bit width of '{b.func}' must be an integer literal, got '{format_expr(arg)}'",
                arg.pos,
            )
        if arg.value not in bits:
            allowed = ", ".join(map(str, bits))
            raise self.type_error(f"'{b.func}' supports {allowed} bits, got {arg.value}", arg.pos)
        return self.ranks[x]

    def builtin_with_word(self, b: ast.Builtin, usage: str) -> int | None:
        """``scatter(X, I, U, axis[, word])``, ``scatter_nd(X, I, U[, word])``,
        ``topk(X, K, axis[, word])``: their fixed arguments, then an optional
        word (:data:`BUILTIN_WORDS`); the result has ``X``'s rank."""
        func = b.func
        words = BUILTIN_WORDS[func]
        fixed = 3 if func != "scatter" else 4
        what = "order" if func == "topk" else "reduction"
        if len(b.args) not in (fixed, fixed + 1):
            example = f"{usage[:-2]}, {words[1]});"
            raise self.type_error(
                f"'{func}' takes {fixed} arguments and an optional {what} ('{usage}' or "
                f"'{example}'), got {len(b.args)}"
            )
        if func == "topk":
            x = self.tensor_arg(b.args[0], func, "the tensor to rank")
            self.size(b.args[1], "the count 'K' of 'topk'")
            self.axis_arg(b.args[2], func)
        else:
            x = self.tensor_arg(b.args[0], func, "the tensor to scatter into")
            self.tensor_arg(b.args[1], func, "the indices")
            self.tensor_arg(b.args[2], func, "the updates")
            if func == "scatter":
                self.axis_arg(b.args[3], func)
        if len(b.args) > fixed:
            word = b.args[fixed]
            if not isinstance(word, ast.Name) or word.name not in words:
                raise self.type_error(
                    f"the {what} of '{func}' must be one of {', '.join(words)}, got "
                    f"'{format_expr(word)}'",
                    word.pos,
                )
        return self.ranks[x]

    def tensor_arg(self, e: ast.Expr, func: str, role: str) -> str:
        """A builtin argument that must name a tensor defined earlier; its name."""
        if not isinstance(e, ast.Name):
            raise self.type_error(
                f"{role} (an argument of '{func}') must be a tensor name, got "
                f"'{format_expr(e)}'; assign the expression to a tensor first"
            )
        self.tensor_ref(e.name, f"argument of '{func}'")
        return e.name

    def axis_arg(self, e: ast.Expr, func: str) -> None:
        if literal_int(e) is None:
            raise self.type_error(
                f"the axis of '{func}' must be an integer literal (like 0 or -1), "
                f"got '{format_expr(e)}'"
            )

    # -- elementwise ---------------------------------------------------------

    def elementwise(self, e: ast.Expr) -> None:
        stack = [e]
        while stack:
            e = stack.pop()
            if isinstance(e, ast.Name):
                self.elementwise_name(e)
            elif isinstance(e, ast.Call):
                self.call(e)
            stack.extend(children(e))

    def elementwise_name(self, e: ast.Name) -> None:
        name = e.name
        if name in self.ranks or name in self.dims:
            return
        if name in STATEMENT_FUNCTIONS:
            raise self.name_error(
                f"'{name}' is a statement builtin; use it as '{STATEMENT_FUNCTIONS[name]}'"
            )
        if name in FUNCTION_ARITY:
            raise self.name_error(f"function '{name}' must be called, as in '{name}(X)'")
        if is_index_name(name):
            raise self.name_error(
                f"index '{name}' in an elementwise expression; indices belong in contractions"
            )
        if not is_upper_name(name):
            raise self.name_error(
                f"'{name}' is not a valid name: names start with a letter (upper-case for "
                "tensors and dimensions, lower-case for indices)"
            )
        self.tensor_ref(name, "tensor")

    def call(self, e: ast.Call) -> None:
        if e.func in STATEMENT_FUNCTIONS:
            raise self.type_error(
                f"'{e.func}' cannot be used inside an expression: it is a whole statement, "
                f"'{STATEMENT_FUNCTIONS[e.func]}' (assign its result to a tensor, then use "
                "that tensor)"
            )
        arity = FUNCTION_ARITY.get(e.func)
        if arity is None:
            known = ", ".join(sorted(FUNCTION_ARITY))
            raise self.name_error(f"unknown function '{e.func}' (known: {known})")
        if len(e.args) != arity:
            raise self.type_error(
                f"'{e.func}' takes {arity} argument{'s' if arity != 1 else ''}, got {len(e.args)}"
            )
        if e.func == "index":
            self.tensor_arg(e.args[0], "index", "the tensor whose positions 'index' gives")
            self.axis_arg(e.args[1], "index")
            return
        bits = CAST_BITS.get(e.func)
        if bits:
            arg = e.args[1]
            if not isinstance(arg, ast.IntLit):
                raise self.type_error(
                    f"the bit width of '{e.func}' must be an integer literal, "
                    f"got '{format_expr(arg)}'"
                )
            if arg.value not in bits:
                allowed = ", ".join(map(str, bits))
                raise self.type_error(f"'{e.func}' supports {allowed} bits, got {arg.value}")


def _shape_text(p: ast.Param) -> str:
    dims = ", ".join(d.name if isinstance(d, ast.Name) else str(d.value) for d in p.dims or ())
    return f"{p.name}[{dims}]"
