"""Math functions of float tensors: ``Sqrt``, ``Exp``, ``Log``, rounding,
``Erf``, trigonometric and hyperbolic functions and their inverses.

Tile's math functions keep float32 as float32; some formulas that cancel
badly (``Sinh``, the inverse trigonometric and hyperbolic functions) are
evaluated in float64 for float32 inputs and rounded once at the end.
"""

from __future__ import annotations

from collections.abc import Callable

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import cast
from .elementwise import F64, float_input, register_as, unary


def _float_unary(template: str) -> Callable[[Builder, Node], list[Value | None]]:
    return lambda b, n: [unary(b, n, lambda x: template.format(x=x))]


for _name, _template, _doc in (
    ("Sqrt", "sqrt({x})", "square root; NaN below 0"),
    ("Exp", "exp({x})", "``e^x``"),
    ("Log", "log({x})", "natural logarithm; -inf at 0, NaN below"),
    ("Ceil", "ceil({x})", "round up"),
    ("Floor", "floor({x})", "round down"),
    ("Round", "round({x})", "round to nearest, halves to even"),
    ("Erf", "erf({x})", "the error function"),
    ("Sin", "sin({x})", "sine"),
    ("Cos", "cos({x})", "cosine"),
    ("Tan", "tan({x})", "tangent"),
    ("Reciprocal", "1 / {x}", "``1 / x``"),
):
    register_as(_name, f"{_name}: {_doc} (float inputs).", _float_unary(_template))


# log(2), pi/2: float64 literals.
_LN2 = "0.6931471805599453"
_HALF_PI = "1.5707963267948966"


def _wide(b: Builder, n: Node) -> tuple[Value, Value, str]:
    """The float input, its float64 version (the input itself when float64) and
    the Tile name of that version."""
    x = float_input(n)
    w = x if x.dtype == F64 else b.eltwise(cast(b.ref(x), F64), x.shape, F64)
    return x, w, b.ref(w)


def _narrow(b: Builder, x: Value, r: Value) -> Value:
    """``r`` (float64) rounded to ``x``'s type."""
    return r if x.dtype == F64 else b.eltwise(cast(r.name, x.dtype), x.shape, x.dtype)


def _f64(b: Builder, like: Value, expr: str) -> Value:
    return b.eltwise(expr, like.shape, F64)


def _log1p(b: Builder, u: Value) -> Value:
    """``log(1 + u)`` accurate for small ``u`` (float64): ``log(w) u / (w - 1)``
    with ``w = 1 + u`` cancels the rounding of ``w``."""
    U = u.name
    w = _f64(b, u, f"1 + {U}").name
    return _f64(b, u, f"{w} == 1 ? {U} : ({U} > 1e15 ? log({U}) : log({w}) * {U} / ({w} - 1))")


@op("Sinh")
def sinh(b: Builder, n: Node) -> list[Value | None]:
    """Sinh: float inputs (evaluated in float64).

    ``(e^x - e^-x) / 2``, through ``expm1`` for ``|x| < 1``."""
    x, w, X = _wide(b, n)
    e = _f64(b, w, f"exp({X})").name
    # expm1 (Kahan): (e - 1) x / log(e), exact where e rounds to 1.
    m = _f64(b, w, f"{e} == 1 ? {X} : ({e} - 1) * {X} / log({e})").name
    r = _f64(b, w, f"abs({X}) < 1 ? ({m} + {m} / ({m} + 1)) * 0.5 : ({e} - 1 / {e}) * 0.5")
    return [_narrow(b, x, r)]


@op("Cosh")
def cosh(b: Builder, n: Node) -> list[Value | None]:
    """Cosh: float inputs (evaluated in float64), ``(e^x + e^-x) / 2``."""
    return [unary(b, n, lambda x: f"(exp({x}) + exp(-{x})) * 0.5", wide=True)]


@op("Asinh")
def asinh(b: Builder, n: Node) -> list[Value | None]:
    """Asinh: float inputs (evaluated in float64).

    ``sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2)))``, ``log(2|x|)`` when huge."""
    x, w, X = _wide(b, n)
    a = _f64(b, w, f"abs({X})").name
    lp = _log1p(b, _f64(b, w, f"{a} + {a} * {a} / (1 + sqrt(1 + {a} * {a}))")).name
    r = _f64(b, w, f"{a} > 1e8 ? log({a}) + {_LN2} : {lp}").name
    return [_narrow(b, x, _f64(b, w, f"{X} < 0 ? -{r} : ({X} > 0 ? {r} : {X})"))]


@op("Acosh")
def acosh(b: Builder, n: Node) -> list[Value | None]:
    """Acosh: float inputs (evaluated in float64); NaN below 1.

    ``log1p(x - 1 + sqrt((x - 1)(x + 1)))``, ``log(2x)`` when huge."""
    x, w, X = _wide(b, n)
    lp = _log1p(b, _f64(b, w, f"{X} - 1 + sqrt(({X} - 1) * ({X} + 1))")).name
    return [_narrow(b, x, _f64(b, w, f"{X} > 1e8 ? log({X}) + {_LN2} : {lp}"))]


@op("Atanh")
def atanh(b: Builder, n: Node) -> list[Value | None]:
    """Atanh: float inputs (evaluated in float64); +-inf at +-1, NaN beyond.

    ``log1p(2x / (1 - x)) / 2``."""
    x, w, X = _wide(b, n)
    lp = _log1p(b, _f64(b, w, f"2 * {X} / (1 - {X})")).name
    return [_narrow(b, x, _f64(b, w, f"{lp} * 0.5"))]


def _atan(b: Builder, x: Value) -> Value:
    """atan of a float64 tensor (close to 1e-14 relative): a rational first guess
    on |t| <= 1 refined by one exact-angle correction step with sin/cos, and
    ``atan(x) = +-pi/2 - atan(1/x)`` beyond."""
    X = x.name
    t = b.eltwise(f"abs({X}) > 1 ? 1 / {X} : {X}", x.shape, F64)
    T = t.name
    # |error| < 1.6e-3 on [-1, 1]
    y0 = b.eltwise(
        f"0.7853981633974483 * {T} - {T} * (abs({T}) - 1) * (0.2447 + 0.0663 * abs({T}))",
        x.shape,
        F64,
    )
    Y = y0.name
    # d = tan(y0 - atan(t)); atan(d) = d - d^3/3 + ...
    d = b.eltwise(f"(sin({Y}) - {T} * cos({Y})) / (cos({Y}) + {T} * sin({Y}))", x.shape, F64)
    D = d.name
    core = b.eltwise(f"{Y} - {D} + {D} * {D} * {D} / 3", x.shape, F64)
    C = core.name
    return b.eltwise(
        f"abs({X}) > 1 ? ({X} > 0 ? {_HALF_PI} : -{_HALF_PI}) - {C} : {C}", x.shape, F64
    )


def _inverse_trig(
    b: Builder, n: Node, pre: Callable[[str], str], post: Callable[[str], str]
) -> Value:
    x = float_input(n)
    w = b.eltwise(pre(cast(b.ref(x), F64)), x.shape, F64)
    r = _atan(b, w)
    return b.eltwise(cast(post(r.name), x.dtype), x.shape, x.dtype)


@op("Atan")
def atan(b: Builder, n: Node) -> list[Value | None]:
    """Atan: float inputs (evaluated in float64, ~1e-14 relative)."""
    return [_inverse_trig(b, n, lambda x: x, lambda r: r)]


@op("Asin")
def asin(b: Builder, n: Node) -> list[Value | None]:
    """Asin: float inputs (evaluated in float64); NaN outside [-1, 1].

    ``atan(x / sqrt((1 - x)(1 + x)))``."""
    return [_inverse_trig(b, n, lambda x: f"{x} / sqrt((1 - {x}) * (1 + {x}))", lambda r: r)]


@op("Acos")
def acos(b: Builder, n: Node) -> list[Value | None]:
    """Acos: float inputs (evaluated in float64); NaN outside [-1, 1].

    ``2 atan(sqrt((1 - x) / (1 + x)))``."""
    return [_inverse_trig(b, n, lambda x: f"sqrt((1 - {x}) / (1 + {x}))", lambda r: f"2 * {r}")]
