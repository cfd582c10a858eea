"""Recursive-descent parser for the Tile language (grammar: docs/tile-language.md).

:func:`parse` turns source text into an :class:`~stripeml.tile.ast.Function`.
Expressions are parsed by precedence climbing.  The grammar accepts every
operator in index lists and size expressions; :mod:`stripeml.tile.check`
decides what is legal there, so its errors can say exactly what is wrong.

Every syntax error is a :class:`~stripeml.errors.TileSyntaxError` naming what
was expected, in which construct, and what was found instead.  Nesting is
bounded (``MAX_NESTING`` open parentheses/unary operators, ``MAX_DEPTH``
levels in one expression tree) so hostile input cannot exhaust Python's stack
here or in the recursive walkers that consume the tree.
"""

from __future__ import annotations

from ..errors import TileSyntaxError
from . import ast
from .exprs import STATEMENT_FUNCTIONS
from .lexer import Token, tokenize

MAX_NESTING = 64
MAX_DEPTH = 200
#: The largest integer literal: 64 bits hold it (a uint64 constant).  Where a
#: value must fit int64 (sizes, index polynomials) or a tensor's dtype, the
#: checks and shape binding say so at the literal.
MAX_INT_LITERAL = (1 << 64) - 1

# Binary operators and their precedence (higher binds tighter); all left-assoc.
# C's order: the bitwise '&', '^', '|' bind looser than '==' (so 'a & b == c' is
# 'a & (b == c)', as in C), the shifts tighter than comparisons, looser than '+'.
BINARY_PREC = {
    "||": 1,
    "&&": 2,
    "|": 3,
    "^": 4,
    "&": 5,
    "==": 6,
    "!=": 6,
    "<": 7,
    ">": 7,
    "<=": 7,
    ">=": 7,
    "<<": 8,
    ">>": 8,
    "+": 9,
    "-": 9,
    "*": 10,
    "/": 10,
    "%": 10,
}
UNARY_OPS = ("-", "!", "~")
_ADDITIVE = BINARY_PREC["+"]
_AGG_TOKENS = ("+", "*", ">", "<", "=")
_COMBO_TOKENS = {"*": "mul", "+": "add", "==": "eq"}


def parse(source: str) -> ast.Function:
    """Parse Tile ``source`` into its syntax tree.

    Raises :class:`~stripeml.errors.TileSyntaxError` (with 1-based line and
    column) on any malformed input; never any other exception.
    """
    return _Parser(source).function()


def _pos(tok: Token) -> ast.Pos:
    return ast.Pos(tok.line, tok.column)


class _Parser:
    def __init__(self, source: str) -> None:
        self.src = source
        self.toks = tokenize(source)
        self.k = 0
        self.nesting = 0
        self.depth: dict[int, int] = {}  # id(node) -> height of its subtree

    # -- token helpers -------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token:
        try:
            return self.toks[self.k + ahead]
        except IndexError:  # past the end: the eof token, as often as asked
            return self.toks[-1]

    def at(self, *kinds: str) -> bool:
        return self.peek().kind in kinds

    def next(self) -> Token:
        tok = self.peek()
        if tok.kind != "eof":
            self.k += 1
        return tok

    def accept(self, kind: str) -> Token | None:
        return self.next() if self.at(kind) else None

    def error(self, message: str, tok: Token | None = None) -> TileSyntaxError:
        tok = tok or self.peek()
        return TileSyntaxError(message, tok.line, tok.column, self.src)

    def int_value(self, tok: Token) -> int:
        """The value of an integer literal, at most :data:`MAX_INT_LITERAL`."""
        digits = tok.text.lstrip("0") or "0"
        # Count digits before converting: int() refuses strings over 4300 digits
        # (sys.int_info.str_digits_check_threshold), and 20 digits hold 2**64.
        if len(digits) > len(str(MAX_INT_LITERAL)) or int(digits) > MAX_INT_LITERAL:
            raise self.error(
                f"integer literal {shorten(tok.text)} is too large: integer literals hold at "
                f"most 64 bits (up to {MAX_INT_LITERAL})",
                tok,
            )
        return int(digits)

    def expected(self, what: str) -> TileSyntaxError:
        """``expected <what>, found <current token>``."""
        return self.error(f"expected {what}, found {self.peek().describe()}")

    def expect(self, kind: str, why: str) -> Token:
        if not self.at(kind):
            raise self.expected(f"'{kind}' {why}")
        return self.next()

    def ident(self, what: str) -> Token:
        if not self.at("ident"):
            raise self.expected(what)
        return self.next()

    def text(self, first: int, last: int) -> str:
        """Source text of tokens ``first..last``, any gap between tokens
        (whitespace or comments) collapsed to one space."""
        parts = [self.toks[first].text]
        for prev, tok in zip(self.toks[first:last], self.toks[first + 1 : last + 1]):
            if tok.start > prev.end:
                parts.append(" ")
            parts.append(tok.text)
        return "".join(parts)

    # -- program structure ---------------------------------------------------

    def function(self) -> ast.Function:
        tok = self.peek()
        if tok.kind == "eof":
            raise TileSyntaxError(
                "empty program: expected 'function (...) -> (...) { ... }'", 1, 1, self.src
            )
        if tok.kind != "ident" or tok.text != "function":
            raise self.expected("'function' to start the program")
        self.next()
        self.expect("(", "to open the parameter list")
        params: list[ast.Param] = []
        if not self.at(")"):
            while True:
                params.append(self.param())
                if self.accept(",") is None:
                    break
        if not self.at(")"):
            raise self.expected(f"',' or ')' after parameter '{params[-1].name}'")
        self.next()
        self.expect("->", "after the parameter list")
        self.expect("(", "to open the output list")
        outputs: list[ast.OutputDecl] = []
        while True:
            name = self.ident("an output name in the output list")
            outputs.append(ast.OutputDecl(name.text, _pos(name)))
            if self.accept(",") is None:
                break
        if not self.at(")"):
            raise self.expected("',' or ')' in the output list")
        self.next()
        lbrace = self.expect("{", "to open the function body")
        stmts: list[ast.Statement] = []
        while not self.at("}"):
            if self.at("eof"):
                raise self.expected(
                    f"'}}' to close the function body opened at {lbrace.line}:{lbrace.column}"
                )
            stmts.append(self.statement())
        self.next()
        if not self.at("eof"):
            raise self.expected("end of input after the function body")
        return ast.Function(tuple(params), tuple(outputs), tuple(stmts), self.src)

    def param(self) -> ast.Param:
        name = self.ident("a parameter name")
        dims: list[ast.Name | ast.IntLit] | None = None
        if self.accept("["):
            dims = []
            while not self.at("]"):
                tok = self.peek()
                if tok.kind == "ident":
                    dims.append(ast.Name(tok.text, _pos(tok)))
                elif tok.kind == "int":
                    dims.append(ast.IntLit(self.int_value(tok), _pos(tok)))
                else:
                    raise self.expected(f"a dimension name or size in the shape of '{name.text}'")
                self.next()
                if self.accept(",") is None and not self.at("]"):
                    raise self.expected(f"',' or ']' in the shape of '{name.text}'")
        if dims is not None:
            self.next()  # the ']'
            return ast.Param(name.text, tuple(dims), _pos(name))
        return ast.Param(name.text, None, _pos(name))

    def statement(self) -> ast.Statement:
        first = self.k
        name = self.ident(
            "a statement (an assignment 'O = ...' or a contraction 'O[...] = ...') "
            "or '}' to close the function body"
        )
        if self.at("["):
            return self.contraction(name, first)
        if self.at("="):
            return self.assignment(name, first)
        raise self.expected(f"'[' or '=' after '{name.text}' to start a statement")

    def assignment(self, name: Token, first: int) -> ast.Assignment | ast.Builtin:
        self.next()  # '='
        if self.at(*_AGG_TOKENS):
            agg = self.peek().text
            raise self.error(
                f"expected an expression after '{name.text} =', found '{agg}' (a contraction "
                f"needs an output index list, as in '{name.text}[i : N] = {agg}(...)')"
            )
        expr = self.expr()
        last = self.k - 1
        self.expect(";", f"to end the assignment to '{name.text}'")
        text = self.text(first, last)
        if isinstance(expr, ast.Call) and expr.func in STATEMENT_FUNCTIONS:
            # ``O = reshape(X, ...);`` / ``O = gather(X, I, axis);``: a whole statement.
            return ast.Builtin(name.text, expr.func, expr.args, _pos(name), text, expr.pos)
        return ast.Assignment(name.text, expr, _pos(name), text)

    # -- contractions --------------------------------------------------------

    def contraction(self, name: Token, first: int) -> ast.Contraction:
        out = name.text
        indices, sizes = self.output_list(out)
        agg = self.aggregation(out)
        combo, operands = self.combination(out)
        constraints, default = self.clauses(out)
        last = self.k - 1
        self.next()  # the ';'
        return ast.Contraction(
            output=out,
            out_indices=indices,
            sizes=sizes,
            agg=ast.AGG_OPS[agg],
            combo=combo,
            operands=operands,
            constraints=constraints,
            default=default,
            pos=_pos(name),
            text=self.text(first, last),
        )

    def output_list(self, out: str) -> tuple[tuple[ast.Expr, ...], tuple[ast.Expr, ...]]:
        """``[idx, ... : size, ...]``, ``[]`` or ``[:]``."""
        self.next()  # '['
        indices: list[ast.Expr] = []
        sizes: list[ast.Expr] = []
        if not self.accept(":") and not self.at("]"):
            while True:
                indices.append(self.binary(1))
                if self.accept(",") is None:
                    break
            if self.at("]"):
                raise self.expected(f"':' and the output sizes after the index list of '{out}'")
            sizes_at = self.k + 1
            self.expect(":", f"or ',' in the index list of '{out}'")
            while True:
                sizes.append(self.binary(1))
                if self.accept(",") is None:
                    break
            if len(sizes) != len(indices):
                n, m = len(indices), len(sizes)
                raise self.error(
                    f"output '{out}' has {n} {_plural(n, 'index', 'indices')} "
                    f"but {m} {_plural(m, 'size', 'sizes')}",
                    self.toks[sizes_at],
                )
        self.expect("]", f"to close the output index list of '{out}'")
        return tuple(indices), tuple(sizes)

    def aggregation(self, out: str) -> str:
        """``= AGG (``; returns the aggregation token."""
        if self.at("=="):
            # "O[i : N] ==(I[i])": the lexer saw '==' where we want '=' then agg '='.
            self.next()
            agg = "="
        else:
            self.expect("=", f"after the output '{out}[...]'")
            if not self.at(*_AGG_TOKENS):
                raise self.expected(
                    f"an aggregation operator ('+', '*', '>', '<' or '=') after '{out}[...] ='"
                )
            agg = self.next().kind
        self.expect("(", f"after the aggregation operator '{agg}'")
        return agg

    def combination(self, out: str) -> tuple[str, tuple[ast.Access, ...]]:
        """The operands up to and including the closing ``)``."""
        if self.at("ident") and self.peek().text == "dot4" and self.peek(1).kind == "(":
            return self.dot4_combination(out)
        operands = [self.access(out, "the first operand")]
        if not self.at(*_COMBO_TOKENS):
            if not self.at(")"):
                raise self.expected(
                    f"')' to close the aggregation of '{out}' "
                    "(or '*', '+' or '==' and a second operand)"
                )
            self.next()
            return "none", tuple(operands)
        op = self.next()
        combo = _COMBO_TOKENS[op.kind]
        operands.append(self.access(out, f"the operand after '{op.kind}'"))
        if combo == "eq" and self.accept("?"):
            combo = "cond"
            paren = self.accept("(")
            operands.append(self.access(out, "the value after '?'"))
            if paren:
                self.expect(")", "to close the value after '?'")
        self.expect(")", f"to close the aggregation of '{out}'")
        return combo, tuple(operands)

    def dot4_combination(self, out: str) -> tuple[str, tuple[ast.Access, ...]]:
        """``dot4(A[..], B[..]))``: the integer dot product of two accesses' bytes
        (an operand name is upper-case, so ``dot4`` cannot be a tensor)."""
        self.next()  # 'dot4'
        self.next()  # '('
        a = self.access(out, "the first operand of 'dot4'")
        self.expect(",", "between the two operands of 'dot4'")
        b = self.access(out, "the second operand of 'dot4'")
        self.expect(")", "to close 'dot4(...)'")
        self.expect(")", f"to close the aggregation of '{out}'")
        return "dot4", (a, b)

    def clauses(self, out: str) -> tuple[tuple[ast.TileConstraint, ...], ast.Name | None]:
        """``, constraint`` and ``, default T`` clauses, up to (not past) the ``;``."""
        constraints: list[ast.TileConstraint] = []
        default: ast.Name | None = None
        while self.accept(","):
            tok = self.peek()
            if tok.kind in (";", ",", "eof"):
                raise self.expected("a constraint 'poly < bound' or 'default T' after ','")
            if tok.kind == "ident" and tok.text == "default":
                if default is not None:
                    raise self.error(f"second 'default' in the contraction of '{out}'")
                self.next()
                dname = self.ident("a tensor name after 'default'")
                default = ast.Name(dname.text, _pos(dname))
            else:
                constraints.append(self.constraint())
        if not self.at(";"):
            raise self.expected(
                f"',' (then a constraint or 'default') or ';' to end the contraction of '{out}'"
            )
        return tuple(constraints), default

    def access(self, out: str, what: str) -> ast.Access:
        if not self.at("ident"):
            raise self.expected(
                f"a tensor access like 'A[i]' as {what} of the contraction of '{out}'"
            )
        name = self.next()
        if not self.at("["):
            raise self.expected(
                f"'[' to index '{name.text}' (contraction operands are accesses like 'A[i, j]')"
            )
        self.next()
        indices: list[ast.Expr] = []
        if not self.at("]"):
            while True:
                indices.append(self.binary(1))
                if self.accept(",") is None:
                    break
        self.expect("]", f"to close the index list of '{name.text}'")
        return ast.Access(name.text, tuple(indices), _pos(name))

    def constraint(self) -> ast.TileConstraint:
        start = self.peek()
        poly = self.binary(_ADDITIVE)
        if not self.at("<"):
            raise self.expected(
                "'<' in the constraint (constraints read 'poly < bound', meaning 0 <= poly < bound)"
            )
        self.next()
        bound = self.binary(_ADDITIVE)
        return ast.TileConstraint(poly, bound, _pos(start))

    # -- expressions ---------------------------------------------------------

    def enter(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise self.error(f"expression nested too deeply (more than {MAX_NESTING} levels)")

    def node(self, node: ast.Expr, *children: ast.Expr) -> ast.Expr:
        """Record ``node``'s tree height; refuse trees deeper than ``MAX_DEPTH``."""
        height = 1 + max((self.depth.get(id(c), 1) for c in children), default=0)
        if height > MAX_DEPTH:
            raise TileSyntaxError(
                f"expression too deep (more than {MAX_DEPTH} nested operations); "
                "split it into several statements",
                node.pos.line,
                node.pos.column,
                self.src,
            )
        self.depth[id(node)] = height
        return node

    def expr(self) -> ast.Expr:
        """ternary := binary ['?' ternary ':' ternary]"""
        self.enter()
        start = self.peek()
        cond = self.binary(1)
        if self.at("?"):
            question = self.next()
            then = self.expr()
            if not self.at(":"):
                raise self.expected(
                    f"':' for the '?' at {question.line}:{question.column} (c ? a : b)"
                )
            self.next()
            other = self.expr()
            cond = self.node(ast.Ternary(cond, then, other, _pos(start)), cond, then, other)
        self.nesting -= 1
        return cond

    def binary(self, min_prec: int) -> ast.Expr:
        start = self.peek()
        lhs = self.unary()
        while True:
            op = self.peek()
            prec = BINARY_PREC.get(op.kind)
            if prec is None or prec < min_prec:
                return lhs
            self.next()
            rhs = self.binary(prec + 1)
            lhs = self.node(ast.Binary(op.kind, lhs, rhs, _pos(start)), lhs, rhs)

    def unary(self) -> ast.Expr:
        tok = self.peek()
        if tok.kind not in UNARY_OPS:
            return self.primary()
        self.enter()
        self.next()
        operand = self.unary()
        self.nesting -= 1
        return self.node(ast.Unary(tok.kind, operand, _pos(tok)), operand)

    def primary(self) -> ast.Expr:
        tok = self.peek()
        if tok.kind == "int":
            self.next()
            return ast.IntLit(self.int_value(tok), _pos(tok))
        if tok.kind == "float":
            self.next()
            return ast.FloatLit(float(tok.text), _pos(tok))
        if tok.kind == "ident":
            self.next()
            if self.at("("):
                return self.call(tok)
            if self.at("["):
                raise self.error(
                    f"cannot index '{tok.text}' here: accesses 'T[...]' appear only as "
                    "contraction operands, as in 'O[i : N] = +(T[i])'"
                )
            return ast.Name(tok.text, _pos(tok))
        if tok.kind == "(":
            self.next()
            inner = self.expr()
            self.expect(")", f"to close the '(' at {tok.line}:{tok.column}")
            return inner
        raise self.expected("an expression")

    def call(self, func: Token) -> ast.Expr:
        self.next()  # '('
        args: list[ast.Expr] = []
        if not self.at(")"):
            while True:
                args.append(self.expr())
                if self.accept(",") is None:
                    break
        if not self.at(")"):
            raise self.expected(f"',' or ')' in the arguments of '{func.text}'")
        self.next()
        return self.node(ast.Call(func.text, tuple(args), _pos(func)), *args)


def shorten(digits: str) -> str:
    """A literal as messages quote it: whole when short, else its ends and its length."""
    if len(digits) <= 40:
        return f"'{digits}'"
    return f"'{digits[:12]}...{digits[-6:]}' ({len(digits)} digits)"


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many
