"""The attributes and inputs of an ONNX RNN, GRU or LSTM node, read and checked
for :mod:`.recurrent`: gates, hidden size, directions, activations (with their
``activation_alpha`` and ``activation_beta``), ``clip``, LSTM's
``input_forget`` and ``sequence_lens``, and small constant helpers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..builder import Node, Value
from ._util import literal

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}

# activation (lower case) -> (takes alpha, takes beta, default alpha, default beta).
# The defaults are those of the ONNX operators of the same name, as the
# specification says; Affine (an operator no longer) keeps its old 1 and 0,
# and ScaledTanh, which had none, gets 1 and 1.  onnxruntime takes 0 for a
# missing alpha or beta of Affine, ScaledTanh and ThresholdedRelu.
# ThresholdedRelu is ``x > alpha ? x : 0`` as the operator (the RNN text
# says ``>=``).
_ACTS: dict[str, tuple[bool, bool, float, float]] = {
    "relu": (False, False, 0.0, 0.0),
    "tanh": (False, False, 0.0, 0.0),
    "sigmoid": (False, False, 0.0, 0.0),
    "affine": (True, True, 1.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0),
    "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
    "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}
_ACT_NAMES = (
    "Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
    "HardSigmoid, Elu, Softsign, Softplus"
)


@dataclass(frozen=True)
class _Act:
    """One activation function with its ``alpha`` and ``beta``."""

    name: str  # lower case, a key of _ACTS
    alpha: float
    beta: float

    @property
    def repeats_input(self) -> bool:
        """Whether the formula reads its input more than once."""
        return self.name in ("leakyrelu", "thresholdedrelu", "elu", "softsign", "softplus")

    def apply(self, x: str) -> str:
        """The activation of ``x`` (a tensor name or a parenthesised expression)."""
        a = literal(self.alpha, np.float64)
        c = literal(self.beta, np.float64)
        formulas = {
            "relu": f"relu({x})",
            "tanh": f"tanh({x})",
            "sigmoid": f"sigmoid({x})",
            "affine": f"{a} * {x} + {c}",
            "leakyrelu": f"{x} >= 0 ? {x} : {a} * {x}",
            "thresholdedrelu": f"{x} > {a} ? {x} : 0",
            "scaledtanh": f"{a} * tanh({c} * {x})",
            "hardsigmoid": f"max(min({a} * {x} + {c}, 1), 0)",
            "elu": f"{x} >= 0 ? {x} : {a} * (exp({x}) - 1)",
            "softsign": f"{x} / (1 + abs({x}))",
            "softplus": f"relu({x}) + log(1 + exp(-abs({x})))",
        }
        return formulas[self.name]


@dataclass(frozen=True)
class _Spec:
    """A recurrent node's attributes and sizes, checked."""

    kind: str  # RNN, GRU, LSTM
    seq: int
    batch: int
    inputs: int
    hidden: int
    reverse: tuple[bool, ...]  # per direction
    layout: int
    dtype: np.dtype
    clip: float | None
    acts: tuple[tuple[_Act, ...], ...]  # per direction: (f,), (f, g) or (f, g, h)
    linear_before_reset: bool
    input_forget: bool
    lengths: np.ndarray | None  # int64 [batch], known when compiling

    @property
    def dirs(self) -> int:
        return len(self.reverse)

    @property
    def gates(self) -> int:
        return _GATES[self.kind]


def _shape_str(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def _parse(n: Node, kind: str) -> _Spec:
    x, w, r = n.input(0), n.input(1), n.input(2)
    dtype = x.dtype
    if dtype.kind != "f":
        raise n.error(f"element type {dtype} is not supported (float16, float32 or float64)")
    if x.rank != 3:
        raise n.error(f"X must have rank 3, got shape {x.shape}")
    layout = int(n.attr("layout", 0))
    if layout not in (0, 1):
        raise n.error(f"layout={layout} is not valid (0 or 1)")
    seq, batch, n_in = x.shape if layout == 0 else (x.shape[1], x.shape[0], x.shape[2])
    direction = str(n.attr("direction", "forward"))
    reverse = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}.get(
        direction
    )
    if reverse is None:
        raise n.error(f"direction={direction!r} is not valid (forward, reverse or bidirectional)")
    dirs = len(reverse)
    gates = _GATES[kind]
    hidden_attr = n.attr("hidden_size")
    if hidden_attr is not None:
        hidden = int(hidden_attr)
        if hidden <= 0:
            raise n.error(f"hidden_size={hidden} must be positive")
    elif r.rank == 3:
        hidden = r.shape[2]
    else:
        raise n.error(f"R must have rank 3, got shape {r.shape}")
    about = f"hidden_size={hidden}, direction={direction!r}"
    want = {
        "W": (w, (dirs, gates * hidden, n_in)),
        "R": (r, (dirs, gates * hidden, hidden)),
        "B": (n.opt(3), (dirs, 2 * gates * hidden)),
        "initial_h": (n.opt(5), (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)),
    }
    if kind == "LSTM":
        state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
        want["initial_c"] = (n.opt(6), state)
        want["P"] = (n.opt(7), (dirs, 3 * hidden))
    for name, (v, shape) in want.items():
        if v is None:
            continue
        if v.shape != shape:
            raise n.error(
                f"{name} has shape {_shape_str(v.shape)}; with X of shape "
                f"{_shape_str(x.shape)} (layout={layout}) and {about} it must be "
                f"{_shape_str(shape)}"
            )
        if v.dtype != dtype:
            raise n.error(f"{name} ({v.dtype}) differs in type from X ({dtype})")
    clip_attr = n.attr("clip")
    clip = None
    if clip_attr is not None:
        clip = float(clip_attr)
        if not clip > 0:
            raise n.error(f"clip={clip} must be positive")
    return _Spec(
        kind=kind,
        seq=seq,
        batch=batch,
        inputs=n_in,
        hidden=hidden,
        reverse=reverse,
        layout=layout,
        dtype=dtype,
        clip=clip,
        acts=_activations(n, kind, dirs),
        linear_before_reset=bool(int(n.attr("linear_before_reset", 0))),
        input_forget=bool(int(n.attr("input_forget", 0))),
        lengths=_lengths(n, seq, batch),
    )


def _activations(n: Node, kind: str, dirs: int) -> tuple[tuple[_Act, ...], ...]:
    """Per direction, the activation functions: ``activation_alpha`` and
    ``activation_beta`` are consumed in order by the functions that take them
    (as onnxruntime does); one direction's list serves both when only that is given."""
    given = n.attr("activations")
    names = [str(s) for s in given] if given else list(_DEFAULT_ACTS[kind])
    alphas = iter(float(a) for a in (n.attr("activation_alpha") or []))
    betas = iter(float(a) for a in (n.attr("activation_beta") or []))
    acts: list[_Act] = []
    for name in names:
        spec = _ACTS.get(name.lower())
        if spec is None:
            raise n.error(f"activation {name!r} is not supported (one of {_ACT_NAMES})")
        takes_alpha, takes_beta, alpha, beta = spec
        if takes_alpha:
            alpha = next(alphas, alpha)
        if takes_beta:
            beta = next(betas, beta)
        acts.append(_Act(name.lower(), alpha, beta))
    k = len(_DEFAULT_ACTS[kind])
    if len(acts) >= k * dirs:
        return tuple(tuple(acts[d * k : (d + 1) * k]) for d in range(dirs))
    if len(acts) == k:
        return (tuple(acts),) * dirs
    raise n.error(
        f"{len(acts)} activation functions given; {kind} takes {k} per direction "
        f"({k * dirs} for {dirs} direction{'s' if dirs > 1 else ''})"
    )


def _lengths(n: Node, seq: int, batch: int) -> np.ndarray | None:
    v = n.opt(4)
    if v is None:
        return None
    if v.const is None:
        raise n.error(
            "sequence_lens (input 4) must be known when compiling: a constant, an "
            "initializer, or a graph input (the model is then compiled for its "
            "values); one computed at run time is not supported, since the time "
            "loop is unrolled when compiling"
        )
    if v.dtype.kind not in "iu":
        raise n.error(f"sequence_lens must be int32, got {v.dtype}")
    lengths = np.asarray(v.const).astype(np.int64).reshape(-1)
    if v.rank != 1 or lengths.size != batch:
        raise n.error(f"sequence_lens has shape {_shape_str(v.shape)}, not ({batch},)")
    bad = lengths[(lengths < 0) | (lengths > seq)]
    if bad.size:
        raise n.error(
            f"sequence_lens holds {int(bad[0])}; lengths must be in [0, {seq}] "
            "(the sequence length of X)"
        )
    return lengths


def _const(arr: np.ndarray) -> Value:
    arr = np.ascontiguousarray(arr)
    return Value("", arr.shape, arr.dtype, arr)


def _zeros(shape: Sequence[int], dtype: np.dtype) -> Value:
    return _const(np.zeros(tuple(shape), dtype))


def _is_zero(v: Value | None) -> bool:
    return v is None or (v.const is not None and not np.any(v.const))
