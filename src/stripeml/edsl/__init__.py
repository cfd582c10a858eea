"""A Python EDSL for Tile (PlaidML's edsl, DESIGN section 8).

::

    from stripeml import edsl as E

    @E.function(target="cpu")
    def matmul(A, B):
        M, K, N = E.dims(3)
        m, k, n = E.indexes(3)
        A.bind_dims(M, K)
        B.bind_dims(K, N)
        C = E.output(M, N)
        C[m, n] += A[m, k] * B[k, n]
        return C

    matmul.source        # the generated Tile program
    matmul(a, b)         # a stripeml Function, like stripeml.compile returns

Tracing writes Tile text; the Tile frontend checks it, and each of its errors
is re-raised naming the Python line that wrote the statement (docs/edsl.md).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

from ..api import Executable, Function
from ..errors import EdslError, StripeError
from ._calls import builtin, call, gradients
from ._core import (
    Access,
    Combo,
    Tensor,
    _operand_tree,
    cast_to,
    cond,
    constraint,
    dot4,
    eltwise,
    output,
)
from ._emit import Emitted, emit
from ._poly import (
    Constraint,
    Dim,
    Index,
    Poly,
    dims,
    indexes,
)
from ._trace import (
    _STATE,
    BINARY,
    UNARY,
    Loc,
    Trace,
    cast_spec,
    misuse,
    user_loc,
)

__all__ = [
    "Access",
    "Combo",
    "Constraint",
    "Dim",
    "EdslError",
    "EdslFunction",
    "Index",
    "Poly",
    "Tensor",
    "abs",
    "as_bool",
    "bitcast",
    "cast",
    "ceil",
    "cond",
    "constraint",
    "cos",
    "dims",
    "dot4",
    "erf",
    "exp",
    "floor",
    "function",
    "gather",
    "gradients",
    "index",
    "indexes",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "max",
    "min",
    "output",
    "pow",
    "relu",
    "reshape",
    "round",
    "scatter",
    "scatter_nd",
    "select",
    "sigmoid",
    "sin",
    "sqrt",
    "tan",
    "tanh",
    "topk",
    "trace",
    "view",
]


# --------------------------------------------------------------------- elementwise functions
def _unary(fn: str) -> Callable[[Any], Tensor]:
    def f(x: Any) -> Tensor:
        return call(fn, x)

    f.__name__ = f.__qualname__ = fn
    f.__doc__ = f"Tile's elementwise ``{fn}(x)``."
    return f


def _binary(fn: str) -> Callable[[Any, Any], Tensor]:
    def f(x: Any, y: Any) -> Tensor:
        return call(fn, x, y)

    f.__name__ = f.__qualname__ = fn
    f.__doc__ = f"Tile's elementwise ``{fn}(x, y)`` (broadcast, promoted dtype)."
    return f


exp, log, sqrt, tanh, sigmoid, sin, cos, tan, abs, erf, floor, ceil, round, relu = (  # noqa: A001
    _unary(f)
    for f in ("exp log sqrt tanh sigmoid sin cos tan abs erf floor ceil round relu").split()
)
pow, max, min = (_binary(f) for f in ("pow", "max", "min"))  # noqa: A001
assert set(UNARY) | set(BINARY) <= set(globals())


def select(c: Any, a: Any, b: Any) -> Tensor:
    """``c ? a : b`` per element (``numpy.where``)."""
    return eltwise(("sel", _operand_tree(c), _operand_tree(a), _operand_tree(b)))


def cast(x: Any, dtype: Any) -> Tensor:
    """``x`` converted to ``dtype`` ("f16", "float32", "i8", "uint64", "bool",
    a NumPy dtype ...): Tile's ``as_float``/``as_int``/``as_uint``/``as_bool``."""
    return cast_to(x, dtype, user_loc())


def as_bool(x: Any) -> Tensor:
    """``x != 0``."""
    return call("as_bool", x)


def bitcast(x: Any, dtype: Any) -> Tensor:
    """``x``'s bits as ``dtype`` (same width): ``bitcast_float/int/uint``."""
    loc = user_loc()
    fn, bits, _ = cast_spec(dtype, loc)
    if bits is None:
        raise misuse("no bit cast gives a bool", loc)
    return eltwise(
        ("call", "bit" + fn.replace("as_", "cast_"), [_operand_tree(x), ("lit", str(bits))])
    )


def logical_and(a: Any, b: Any) -> Tensor:
    """``a && b``."""
    return eltwise(("bin", "&&", _operand_tree(a), _operand_tree(b)))


def logical_or(a: Any, b: Any) -> Tensor:
    """``a || b``."""
    return eltwise(("bin", "||", _operand_tree(a), _operand_tree(b)))


def logical_not(a: Any) -> Tensor:
    """``!a``."""
    return eltwise(("un", "!", _operand_tree(a)))


def index(x: Tensor, axis: int) -> Tensor:
    """Each element's position along ``axis`` of ``x`` (int64, ``x``'s shape)."""
    loc = user_loc()
    if not isinstance(x, Tensor):
        raise misuse(f"E.index needs a tensor, got {x!r}", loc)
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise misuse(f"E.index's axis must be an int, got {axis!r}", loc)
    _operand_tree(x)
    return eltwise(("call", "index", [x, _operand_tree(axis)]), loc)


# --------------------------------------------------------------------- statement builtins
_REDUCTIONS = ("none", "add", "mul", "max", "min")


def reshape(x: Tensor, *sizes: Any) -> Tensor:
    """``x``'s elements in row-major order with shape ``sizes`` (dims or ints)."""
    return builtin("reshape", [x], sizes)


def view(x: Tensor, dtype: Any) -> Tensor:
    """``x``'s bytes read as ``dtype`` (NumPy's ``x.view(dtype)``): Tile's
    ``view_int/uint/float``; the last dimension scales by the ratio of the widths."""
    loc = user_loc()
    fn, bits, _ = cast_spec(dtype, loc)
    if bits is None:
        raise misuse("no byte view gives a bool", loc)
    return builtin(fn.replace("as_", "view_"), [x], [bits])


def gather(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    """``numpy.take(x, indices, axis)``."""
    return builtin("gather", [x, indices], [axis])


def scatter(
    x: Tensor, indices: Tensor, updates: Tensor, axis: int, reduction: str | None = None
) -> Tensor:
    """ONNX ScatterElements: a copy of ``x`` with ``updates`` placed along ``axis``."""
    if reduction is not None and reduction not in _REDUCTIONS:
        raise misuse(f"reduction must be one of {', '.join(_REDUCTIONS)}, got {reduction!r}")
    return builtin("scatter", [x, indices, updates], [axis] + ([reduction] if reduction else []))


def scatter_nd(x: Tensor, indices: Tensor, updates: Tensor, reduction: str | None = None) -> Tensor:
    """ONNX ScatterND."""
    if reduction is not None and reduction not in _REDUCTIONS:
        raise misuse(f"reduction must be one of {', '.join(_REDUCTIONS)}, got {reduction!r}")
    return builtin("scatter_nd", [x, indices, updates], [reduction] if reduction else [])


def topk(x: Tensor, k: Any, axis: int, largest: bool = True) -> Tensor:
    """The int64 positions of the ``k`` largest (or smallest) elements along ``axis``."""
    return builtin("topk", [x], [k, axis, "largest" if largest else "smallest"])


# --------------------------------------------------------------------- tracing
def _return_loc(fn: Callable[..., Any], def_loc: Loc) -> Loc:
    """The line of ``fn``'s only ``return`` statement, else its ``def`` line."""
    try:
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return def_loc
    found: list[int] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Return):
                found.append(child.lineno)
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(child)

    if tree.body and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        walk(tree.body[0])
    return (def_loc[0], start + found[0] - 1) if len(found) == 1 else def_loc


def trace(fn: Callable[..., Any]) -> Emitted:
    """Call ``fn`` once with one placeholder tensor per positional parameter and
    return the Tile program it writes (``.source``) with its line map."""
    code = fn.__code__
    def_loc: Loc = (code.co_filename, code.co_firstlineno)
    ret_loc = _return_loc(fn, def_loc)
    t = Trace()
    params: list[Tensor] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise misuse(
                f"E.function traces positional parameters only; '{p}' of {fn.__name__} is not one",
                def_loc,
            )
        params.append(Tensor(t, "param", t.fresh(p.name, True, "X"), def_loc))
    _STATE.stack.append(t)
    try:
        result = fn(*params)
        outputs = _outputs(t, result, ret_loc)
    finally:
        _STATE.stack.pop()
    try:
        return emit(t, params, outputs, def_loc, ret_loc)
    except StripeError as e:  # a Tile error in the statements E.gradients differentiates
        prefix = getattr(e, "edsl_emitted", None)
        if prefix is None:
            raise
        raise located(e, prefix) from None


def _outputs(t: Trace, result: Any, loc: Loc) -> list[Tensor]:
    many = isinstance(result, (tuple, list))
    items = list(result) if many else [result]
    if not items:
        raise misuse("the traced function returns no tensor", loc)
    outs: list[Tensor] = []
    for i, r in enumerate(items):
        what = f"output {i} of the traced function" if many else "the traced function's result"
        if not isinstance(r, Tensor):
            raise misuse(
                f"{what} is {r!r} ({type(r).__name__}), not a tensor; return a tensor "
                "or a tuple of tensors",
                loc,
            )
        if r.trace is not t:
            raise misuse(f"{what} is a tensor of another traced function", loc)
        if r.kind == "output" and r.contraction is None:
            raise misuse(f"{what}, {r.name}, is returned but no contraction writes it", loc)
        if r.kind == "param" or any(r is o for o in outs):
            r = eltwise(("copy", r), loc)  # a plain copy: ``O = A;``
        outs.append(r)
    return outs


_AT = re.compile(r"^(\d+):(\d+): ")


def located(err: StripeError, emitted: Emitted) -> StripeError:
    """``err`` (from the Tile frontend, about the generated source) re-raised with
    the Python ``file:line`` that wrote the statement, and that statement."""
    if isinstance(err, EdslError) or getattr(err, "python_line", None) is not None:
        return err
    line, col = getattr(err, "line", None), getattr(err, "column", None)
    if line is None:
        m = _AT.match(str(err))
        if m is None:
            return err
        line, col = int(m.group(1)), int(m.group(2))
    if line not in emitted.lines:
        return err
    loc, text = emitted.lines[line]
    if line == 1 and col is not None:
        for first, last, ploc, ptext in emitted.header:
            if first <= col <= last:
                loc, text = ploc, ptext
                break
    new = type(err).__new__(type(err))
    new.__dict__.update(err.__dict__)
    message = f"{loc[0]}:{loc[1]}: {err}\n  (the generated Tile: {text})"
    new.args = (message,)
    new.python_file, new.python_line = loc  # type: ignore[attr-defined]
    new.tile_statement = text  # type: ignore[attr-defined]
    return new


class EdslFunction(Function):
    """A :class:`stripeml.api.Function` compiled from a traced Python function;
    errors about its statements name the Python line that wrote them."""

    def __init__(
        self,
        fn: Callable[..., Any],
        target: Any = "cpu",
        name: str | None = None,
        constants: Mapping[str, Any] | None = None,
        threads: int | None = None,
    ) -> None:
        self.python_function = fn
        self.emitted = trace(fn)
        try:
            super().__init__(self.emitted.source, target, name or fn.__name__, constants, threads)
        except StripeError as e:
            raise located(e, self.emitted) from None
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def lower(self, *args: Any, **kwargs: Any) -> Executable:
        try:
            return super().lower(*args, **kwargs)
        except StripeError as e:
            raise located(e, self.emitted) from None

    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, out=out, **kwargs)
        except StripeError as e:
            raise located(e, self.emitted) from None


def function(
    fn: Callable[..., Any] | None = None,
    *,
    target: Any = "cpu",
    name: str | None = None,
    constants: Mapping[str, Any] | None = None,
    threads: int | None = None,
) -> Any:
    """Trace ``fn`` into a Tile program and compile it (``stripeml.compile``'s
    ``target``, ``constants`` and ``threads``); ``@E.function`` or
    ``@E.function(target="interp")``."""

    def make(f: Callable[..., Any]) -> EdslFunction:
        return EdslFunction(f, target, name, constants, threads)

    return make if fn is None else make(fn)
