"""Automatic differentiation of Tile programs (``stripeml.grad``, DESIGN §8).

    g = stripeml.grad(f, wrt=("A", "B"))   # f: a stripeml Function
    dA, dB = g(a, b, dC)                   # f's inputs, then one cotangent per output
    g.source                               # the gradient program, in Tile

The gradient is itself a Tile program (:mod:`._core` writes it), compiled for
``f``'s target like any other.  Rules and limits: docs/autodiff.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np

from ..api import Function
from ..errors import StripeError
from ..tile.parser import parse
from ._core import Adjoint, AutodiffError, GradientProgram, gradient_source
from ._core import adjoint_statements as _adjoint_statements
from ._model import ModelGradFunction, SpecialisingModel, is_model

__all__ = [
    "Adjoint",
    "AutodiffError",
    "GradFunction",
    "GradientProgram",
    "ModelGradFunction",
    "SpecialisingModel",
    "adjoint_statements",
    "grad",
    "gradient_source",
]


def adjoint_statements(
    source: str,
    loss: str,
    wrt: Sequence[str],
    names: Sequence[str],
    used: Sequence[str] = (),
) -> Adjoint:
    """The statements to append to the Tile function ``source`` so that
    ``names[k]`` holds the gradient of ``sum(loss)`` (``loss``: a tensor one of
    its statements computes; an all-ones cotangent) with respect to its
    parameter ``wrt[k]``; new names avoid ``used``.  The EDSL's
    ``E.gradients`` (docs/autodiff.md, "Inside a traced function")."""
    return _adjoint_statements(parse(source), loss, tuple(wrt), tuple(names), used)


class GradFunction(Function):
    """The compiled gradient of a Function: called with ``f``'s inputs, then one
    cotangent per output of ``f``; returns one gradient per ``wrt`` name (an
    array for one, a tuple for several), each with its input's dtype."""

    def __init__(self, f: Function, wrt: Sequence[str]) -> None:
        constant = [w for w in wrt if w in f.constants]
        if constant:
            raise AutodiffError(
                f"grad: '{constant[0]}' is bound as a constant of {f.name}; "
                "only parameters passed at call time can be differentiated"
            )
        self.program: GradientProgram = gradient_source(parse(f.source), tuple(wrt))
        super().__init__(
            self.program.source,
            f.target,
            name=f"{f.name}_grad",
            constants=f.constants,
        )
        #: the function differentiated, and the parameters differentiated for
        self.forward: Function = f
        self.wrt: tuple[str, ...] = tuple(wrt)

    def _arrays(self, args: Sequence[Any], kwargs: Any) -> list[np.ndarray]:
        arrays = super()._arrays(args, kwargs)
        for name, arr in zip(self.params, arrays):
            if name in self.wrt and arr.dtype.kind != "f":
                raise AutodiffError(
                    f"grad: input '{name}' has dtype {arr.dtype}; integer and bool inputs "
                    "have no gradient (differentiate with respect to float inputs only)"
                )
        return arrays

    def __call__(
        self, *args: Any, out: Any = None, **kwargs: Any
    ) -> np.ndarray | tuple[np.ndarray, ...]:
        if out is not None:
            raise StripeError("grad: out= is not supported by gradient functions")
        arrays = self._arrays(args, kwargs)
        results = super().__call__(*arrays)
        outs = results if isinstance(results, tuple) else (results,)
        dtypes = {p: a.dtype for p, a in zip(self.params, arrays)}
        cast = tuple(
            r if r.dtype == dtypes[w] else r.astype(dtypes[w]) for r, w in zip(outs, self.wrt)
        )
        return cast[0] if len(cast) == 1 else cast


@overload
def grad(f: Function | str, wrt: Sequence[str] | str | None = None) -> GradFunction: ...


@overload
def grad(f: SpecialisingModel, wrt: Sequence[str] | str | None = None) -> ModelGradFunction: ...


def grad(
    f: Function | str | SpecialisingModel, wrt: Sequence[str] | str | None = None
) -> GradFunction | ModelGradFunction:
    """The gradient of ``f`` (a :class:`~stripeml.api.Function`, or Tile source
    compiled for ``cpu``) with respect to the parameters named in ``wrt`` (a
    name or a sequence of names; default: every parameter passed at call
    time).

    ``f`` may also be an ONNX model (:class:`~stripeml.onnx.OnnxFunction`),
    which writes one Tile program per input signature: the result, a
    :class:`ModelGradFunction`, differentiates each signature's program on its
    first call with it; ``wrt`` names graph inputs (default: all of them)."""
    if not isinstance(f, (Function, str)) and is_model(f):
        return ModelGradFunction(f, wrt)
    if isinstance(f, str):
        from ..api import compile as compile_tile

        f = compile_tile(f)
    if not isinstance(f, Function):
        raise StripeError(f"grad: expected a stripeml Function, got {type(f).__name__}")
    if wrt is None:
        wrt = f.params
    elif isinstance(wrt, str):
        wrt = (wrt,)
    return GradFunction(f, tuple(wrt))
