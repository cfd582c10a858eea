"""The optimizers of ``ai.onnx.preview.training``: Adagrad, Adam, Momentum.

Each updates one or more tensors elementwise from their gradients and
accumulators, with a learning rate ``R`` and a step count ``T`` given as
scalar inputs (run-time values: the step-dependent factors are computed in
the program, in float64, and a ``T > 0`` test is a select).  Inputs come as
``R, T, X1..Xn, G1..Gn, V1..Vn[, H1..Hn]``, outputs as the updated ``X``s then
the accumulators, as the ONNX definitions order them; each output keeps its
input's type.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import cast, literal

DOMAIN = "ai.onnx.preview.training"
F64 = np.dtype(np.float64)


def _scalar(b: Builder, n: Node, v: Value, what: str) -> str:
    if v.size != 1:
        raise n.error(f"{what} must hold one value, got shape {list(v.shape)}")
    return cast(b.ref(v), F64)


def _f(x: float) -> str:
    return literal(float(x), F64)


def _groups(n: Node, per: int) -> tuple[Value, Value, list[list[Value]]]:
    """R, T and the ``per`` lists of tensors (X, G, V[, H]) of each updated tensor."""
    count = len(n.inputs) - 2
    if count <= 0 or count % per:
        raise n.error(
            f"takes R, T and {per} tensors per updated tensor, got {len(n.inputs)} inputs"
        )
    k = count // per
    rest = [n.input(2 + i) for i in range(count)]
    groups = [rest[j * k : (j + 1) * k] for j in range(per)]
    for x, *others in zip(*groups):
        for o in others:
            if o.shape != x.shape:
                raise n.error(f"shapes {list(x.shape)} and {list(o.shape)} of one update differ")
        if x.dtype.kind != "f":
            raise n.error(f"the updated tensors must be floating point, got {x.dtype}")
    return n.input(0), n.input(1), groups


def _out(b: Builder, expr: str, like: Value) -> Value:
    return b.eltwise(cast(f"({expr})", like.dtype), like.shape, like.dtype)


@op("Adagrad", domain=DOMAIN)
def adagrad(b: Builder, n: Node) -> list[Value | None]:
    """Adagrad: X - R / (1 + T * decay_factor) * G' / (sqrt(H + G'^2) + epsilon), G' = G + norm * X."""
    r, t, (xs, gs, hs) = _groups(n, 3)
    decay = float(n.attr("decay_factor", 0.0))
    eps = float(n.attr("epsilon", 0.0))
    norm = float(n.attr("norm_coefficient", 0.0))
    rate = b.eltwise(
        f"{_scalar(b, n, r, 'R')} / (1.0 + {_scalar(b, n, t, 'T')} * {_f(decay)})", (), F64
    )
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        gr = b.eltwise(f"{_f(norm)} * {cast(b.ref(x), F64)} + {cast(b.ref(g), F64)}", x.shape, F64)
        hn = b.eltwise(f"{cast(b.ref(h), F64)} + {b.ref(gr)} * {b.ref(gr)}", x.shape, F64)
        step = f"{b.ref(rate)} * {b.ref(gr)} / (sqrt({b.ref(hn)}) + {_f(eps)})"
        new_x.append(_out(b, f"{cast(b.ref(x), F64)} - {step}", x))
        new_h.append(_out(b, b.ref(hn), h))
    return [*new_x, *new_h]


@op("Adam", domain=DOMAIN)
def adam(b: Builder, n: Node) -> list[Value | None]:
    """Adam: the moments V, H updated with alpha, beta; X - R * sqrt(1 - beta^T) / (1 - alpha^T) * V / (sqrt(H) + epsilon)."""
    r, t, (xs, gs, vs, hs) = _groups(n, 4)
    alpha = float(n.attr("alpha", 0.9))
    beta = float(n.attr("beta", 0.999))
    eps = float(n.attr("epsilon", 0.0))
    norm = float(n.attr("norm_coefficient", 0.0))
    post = float(n.attr("norm_coefficient_post", 0.0))
    rr, tt = _scalar(b, n, r, "R"), _scalar(b, n, t, "T")
    adjusted = (
        f"{tt} > 0.0 ? {rr} * sqrt(1.0 - pow({_f(beta)}, {tt})) / (1.0 - pow({_f(alpha)}, {tt}))"
        f" : {rr}"
    )
    rate = b.eltwise(adjusted, (), F64)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        X = cast(b.ref(x), F64)
        gr = b.eltwise(f"{_f(norm)} * {X} + {cast(b.ref(g), F64)}", x.shape, F64)
        G = b.ref(gr)
        vn = b.eltwise(f"{_f(alpha)} * {cast(b.ref(v), F64)} + {_f(1 - alpha)} * {G}", x.shape, F64)
        hn = b.eltwise(
            f"{_f(beta)} * {cast(b.ref(h), F64)} + {_f(1 - beta)} * ({G} * {G})", x.shape, F64
        )
        xn = f"{X} - {b.ref(rate)} * ({b.ref(vn)} / (sqrt({b.ref(hn)}) + {_f(eps)}))"
        new_x.append(_out(b, f"{_f(1 - post)} * ({xn})", x))
        new_v.append(_out(b, b.ref(vn), v))
        new_h.append(_out(b, b.ref(hn), h))
    return [*new_x, *new_v, *new_h]


@op("Momentum", domain=DOMAIN)
def momentum(b: Builder, n: Node) -> list[Value | None]:
    """Momentum: V = alpha * V + beta' * G' (beta' = 1 at T = 0), X - R * V, or Nesterov's update (mode)."""
    r, t, (xs, gs, vs) = _groups(n, 3)
    alpha = float(n.attr("alpha", 0.0))
    beta = float(n.attr("beta", 0.0))
    norm = float(n.attr("norm_coefficient", 0.0))
    mode = str(n.attr("mode", "standard"))
    if mode not in ("standard", "nesterov"):
        raise n.error(f"mode {mode!r} is not standard or nesterov")
    rr, tt = _scalar(b, n, r, "R"), _scalar(b, n, t, "T")
    beta_t = b.eltwise(f"{tt} > 0.0 ? {_f(beta)} : 1.0", (), F64)
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        X = cast(b.ref(x), F64)
        gr = b.eltwise(f"{_f(norm)} * {X} + {cast(b.ref(g), F64)}", x.shape, F64)
        vn = b.eltwise(
            f"{_f(alpha)} * {cast(b.ref(v), F64)} + {b.ref(beta_t)} * {b.ref(gr)}", x.shape, F64
        )
        if mode == "standard":
            xn = f"{X} - {rr} * {b.ref(vn)}"
        else:
            xn = f"{X} - {rr} * ({b.ref(gr)} + {_f(alpha)} * {b.ref(vn)})"
        new_x.append(_out(b, xn, x))
        new_v.append(_out(b, b.ref(vn), v))
    return [*new_x, *new_v]
