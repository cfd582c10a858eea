"""Activation functions, each one fused elementwise Tile expression.

Attributes (``alpha``, ``beta`` ...) are written as weak float literals, so
they take the input's float type; the formulas are the ONNX definitions,
rearranged where that avoids overflow (``Softplus``).
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import broadcast_shape, cast, literal
from .elementwise import float_input, same_dtype, typed


def _f(n: Node, key: str, default: float) -> str:
    """The float attribute ``key`` as a Tile literal."""
    return literal(float(n.attr(key, default)), np.dtype(np.float64))


def _act(b: Builder, n: Node, template: str) -> list[Value | None]:
    """``template`` with ``{x}`` naming the float input, same shape and dtype."""
    x = float_input(n)
    return [b.eltwise(template.format(x=b.ref(x)), x.shape, x.dtype)]


@op("Relu")
def relu(b: Builder, n: Node) -> list[Value | None]:
    """Relu: ``max(x, 0)`` (floats and integers)."""
    x = n.input(0)
    if x.dtype.kind not in "fiu":
        raise n.error(f"unsupported element type {x.dtype}")
    return [b.eltwise(f"relu({b.ref(x)})", x.shape, x.dtype)]


@op("Sigmoid")
def sigmoid(b: Builder, n: Node) -> list[Value | None]:
    """Sigmoid: ``1 / (1 + e^-x)`` (float inputs)."""
    return _act(b, n, "sigmoid({x})")


@op("Tanh")
def tanh(b: Builder, n: Node) -> list[Value | None]:
    """Tanh: float inputs."""
    return _act(b, n, "tanh({x})")


@op("LeakyRelu")
def leaky_relu(b: Builder, n: Node) -> list[Value | None]:
    """LeakyRelu: ``x < 0 ? alpha x : x`` (``alpha``, default 0.01)."""
    return _act(b, n, "{x} < 0 ? " + _f(n, "alpha", 0.01) + " * {x} : {x}")


@op("Elu")
def elu(b: Builder, n: Node) -> list[Value | None]:
    """Elu: ``x < 0 ? alpha (e^x - 1) : x`` (``alpha``, default 1)."""
    return _act(b, n, "{x} < 0 ? " + _f(n, "alpha", 1.0) + " * (exp({x}) - 1) : {x}")


@op("Selu")
def selu(b: Builder, n: Node) -> list[Value | None]:
    """Selu: ``gamma (x <= 0 ? alpha e^x - alpha : x)`` (``alpha``, ``gamma``)."""
    alpha = _f(n, "alpha", 1.67326319217681884765625)
    gamma = _f(n, "gamma", 1.05070102214813232421875)
    return _act(b, n, f"{gamma} * ({{x}} <= 0 ? {alpha} * exp({{x}}) - {alpha} : {{x}})")


@op("Celu")
def celu(b: Builder, n: Node) -> list[Value | None]:
    """Celu: ``max(0, x) + min(0, alpha (e^(x / alpha) - 1))`` (``alpha``, default 1)."""
    alpha = _f(n, "alpha", 1.0)
    return _act(b, n, f"{{x}} > 0 ? {{x}} : {alpha} * (exp({{x}} / {alpha}) - 1)")


@op("HardSigmoid")
def hard_sigmoid(b: Builder, n: Node) -> list[Value | None]:
    """HardSigmoid: ``max(0, min(1, alpha x + beta))`` (defaults 0.2, 0.5)."""
    alpha, beta = _f(n, "alpha", 0.2), _f(n, "beta", 0.5)
    return _act(b, n, f"max(min({alpha} * {{x}} + {beta}, 1), 0)")


@op("HardSwish")
def hard_swish(b: Builder, n: Node) -> list[Value | None]:
    """HardSwish: ``x max(0, min(1, x / 6 + 1 / 2))``."""
    return _act(b, n, "{x} * max(min({x} / 6 + 0.5, 1), 0)")


_SOFTPLUS = "(relu({x}) + log(1 + exp(-abs({x}))))"


@op("Softplus")
def softplus(b: Builder, n: Node) -> list[Value | None]:
    """Softplus: ``log(1 + e^x)``, computed as ``max(x, 0) + log(1 + e^-|x|)``."""
    return _act(b, n, _SOFTPLUS)


@op("Softsign")
def softsign(b: Builder, n: Node) -> list[Value | None]:
    """Softsign: ``x / (1 + |x|)``."""
    return _act(b, n, "{x} / (1 + abs({x}))")


@op("Mish")
def mish(b: Builder, n: Node) -> list[Value | None]:
    """Mish: ``x tanh(softplus(x))``."""
    return _act(b, n, "{x} * tanh(" + _SOFTPLUS + ")")


@op("Gelu")
def gelu(b: Builder, n: Node) -> list[Value | None]:
    """Gelu: ``approximate`` "none" (erf) or "tanh"; other values are rejected."""
    approx = n.attr("approximate", "none")
    if approx == "none":
        return _act(b, n, "0.5 * {x} * (1 + erf({x} * 0.7071067811865476))")
    if approx == "tanh":
        return _act(
            b, n, "0.5 * {x} * (1 + tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})))"
        )
    raise n.error(f"approximate={approx!r} is not supported (only 'none' and 'tanh')")


@op("Swish")
def swish(b: Builder, n: Node) -> list[Value | None]:
    """Swish: ``x sigmoid(alpha x)`` (``alpha``, default 1)."""
    return _act(b, n, "{x} * sigmoid(" + _f(n, "alpha", 1.0) + " * {x})")


@op("ThresholdedRelu")
def thresholded_relu(b: Builder, n: Node) -> list[Value | None]:
    """ThresholdedRelu: ``x > alpha ? x : 0`` (``alpha``, default 1)."""
    return _act(b, n, "{x} > " + _f(n, "alpha", 1.0) + " ? {x} : 0")


@op("PRelu", oldest=1)
def prelu(b: Builder, n: Node) -> list[Value | None]:
    """PRelu: ``x < 0 ? slope x : x``, the slope broadcasting (opset < 7: per channel).

    Floats and integers."""
    x, s = n.input(0), n.input(1)
    dt = same_dtype(n, [x, s])
    if n.opset < 7 and s.rank == 1 and x.rank >= 2 and s.shape[0] == x.shape[1] > 1:
        # Before opset 7 a 1-D slope is per channel (axis 1).
        shape1 = (s.shape[0],) + (1,) * (x.rank - 2)
        if s.const is not None:
            s = Value("", shape1, s.dtype, s.const.reshape(shape1))
        else:
            ones = ", ".join("0" for _ in shape1[1:])
            tmpl = f"{{out}}[c, {ones} : {s.shape[0]}, {', '.join('1' for _ in shape1[1:])}]"
            s = b.contraction(tmpl + f" = =({b.ref(s)}[c])", shape1, s.dtype)
    shape = broadcast_shape(n, x.shape, s.shape)
    X, S = b.ref(x), b.ref(s)
    return [b.eltwise(f"{X} < 0 ? {S} * {X} : {X}", shape, dt)]


@op("Shrink")
def shrink(b: Builder, n: Node) -> list[Value | None]:
    """Shrink: ``x < -lambd ? x + bias : (x > lambd ? x - bias : 0)``, floats and ints.

    For integers the result is computed in float64 and truncated like a cast."""
    x = n.input(0)
    if x.dtype.kind not in "fiu":
        raise n.error(f"unsupported element type {x.dtype}")
    lambd, bias = _f(n, "lambd", 0.5), _f(n, "bias", 0.0)
    X = b.ref(x)
    if x.dtype.kind == "f":
        expr = f"{X} < -{lambd} ? {X} + {bias} : ({X} > {lambd} ? {X} - {bias} : 0)"
        return [b.eltwise(expr, x.shape, x.dtype)]
    # Integers: compare and shift in float64, then convert back.
    zero = typed(b, 0.0, np.dtype(np.float64))
    expr = f"{X} < -{lambd} ? {X} + {bias} : ({X} > {lambd} ? {X} - {bias} : {zero})"
    return [b.eltwise(cast(expr, x.dtype), x.shape, x.dtype)]
