"""``stripeml.grad`` of a model specialised per call signature (an ONNX model).

An :class:`~stripeml.onnx.OnnxFunction` is not one Tile program: it writes a
program per input signature (shapes, dtypes) on its first call with it.  Its
gradient is therefore specialised the same way: :class:`ModelGradFunction`
takes the model's graph inputs and one cotangent per graph output, asks the
model for the program of that signature, and differentiates that program
(a :class:`~stripeml.autodiff.GradFunction`, cached per program).

This layer does not import ``onnx`` (docs/architecture.md): a model is any
object with the :class:`SpecialisingModel` interface.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..api import Function
from ..errors import StripeError
from ._core import AutodiffError, check_names


class SpecialisingModel(Protocol):
    """What :class:`ModelGradFunction` needs of a model (``OnnxFunction`` has it)."""

    input_names: list[str]
    output_names: list[str]

    def _arrays(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list[np.ndarray]:
        """The graph inputs of a call, checked (dtype, rank, fixed sizes)."""
        ...

    def specialise(self, arrays: Sequence[np.ndarray]) -> Any:
        """The program for these graph inputs: ``.function`` (a Function or
        None), ``.inputs`` (per Tile parameter, its graph input's index),
        ``.outputs`` (per graph output ``("tile", name)`` or ``("const", array)``),
        ``.host`` (a run-time split, or None), ``.narrow``, ``.call_args(arrays)``."""
        ...


def is_model(f: object) -> bool:
    """Whether ``f`` is a model :func:`~stripeml.grad` differentiates per signature."""
    return all(hasattr(f, a) for a in ("specialise", "input_names", "output_names", "_arrays"))


class ModelGradFunction:
    """The gradient of a model specialised per signature (``stripeml.grad(onnx_fn)``).

    ``g(*inputs, *cotangents)``: the model's graph inputs (positional, in graph
    input order), then one cotangent per graph output (declared order; an
    output the import folded to a constant takes one too, and ignores it).
    Returns the gradient of ``sum(output * cotangent over every output)`` with
    respect to each graph input named in ``wrt``, with that input's dtype (an
    array for one, a tuple for several).  The Tile gradient program of a
    signature is :meth:`specialise` (``.source``)."""

    #: gradient programs kept (most recently used last), per specialised program
    CACHE = 16

    def __init__(self, model: SpecialisingModel, wrt: Sequence[str] | str | None) -> None:
        names = list(model.input_names)
        if wrt is None:
            wrt = tuple(names)
        elif isinstance(wrt, str):
            wrt = (wrt,)
        wrt = tuple(wrt)
        # initializers are constants of the program, not graph inputs
        check_names(wrt, list(names), "a graph input of the model", "graph inputs")
        #: the model differentiated, and the graph inputs differentiated for
        self.forward = model
        self.wrt: tuple[str, ...] = wrt
        self._grads: OrderedDict[tuple[int, tuple[str, ...]], tuple[Function, Any]] = OrderedDict()

    def __repr__(self) -> str:
        return f"<stripeml.autodiff.ModelGradFunction of {self.forward!r} wrt={self.wrt}>"

    # -- specialising --------------------------------------------------------
    def _split(self, args: Sequence[Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        m = self.forward
        n_in, n_out = len(m.input_names), len(m.output_names)
        if len(args) != n_in + n_out:
            raise StripeError(
                f"grad: expected the model's {n_in} input(s) ({', '.join(m.input_names)}) "
                f"then one cotangent per output ({n_out}: {', '.join(m.output_names)}), "
                f"got {len(args)} argument(s)"
            )
        arrays = m._arrays(list(args[:n_in]), {})
        return arrays, [np.asarray(c) for c in args[n_in:]]

    def _program(self, arrays: Sequence[np.ndarray]) -> tuple[Any, Any, dict[str, str]]:
        """The model's specialised program, its gradient (None when no ``wrt``
        input is a Tile parameter) and, per ``wrt`` input that is one, its
        Tile name."""
        from . import GradFunction

        spec = self.forward.specialise(arrays)
        view = getattr(spec, "view", None)
        if view is not None:  # a length run through a longer one's program: its own import
            spec = view.own if view.own is not None else view.of.base
        if spec.host is not None:
            raise AutodiffError(
                "grad: the model has an operator sized at run time (its graph is split "
                "around it, docs/onnx.md); differentiating such a model is not supported"
            )
        if spec.narrow is not None:
            raise AutodiffError(
                "grad: the model has an output of a narrow type (bfloat16, float8, ...); "
                "not supported"
            )
        index = {n: k for k, n in enumerate(self.forward.input_names)}
        for w in self.wrt:
            a = arrays[index[w]]
            if a.dtype.kind != "f":
                raise AutodiffError(
                    f"grad: input '{w}' has dtype {a.dtype}; integer and bool inputs have "
                    "no gradient (differentiate with respect to float inputs only)"
                )
        static = getattr(self.forward, "_static", ())  # OnnxFunction's compile-time inputs
        for w in self.wrt:
            if w in static:
                raise AutodiffError(
                    f"grad: input '{w}' is read when the model compiles (its values shape "
                    "the program); it has no gradient"
                )
        fn = spec.function
        if fn is None:  # every output folded to a constant
            return spec, None, {}
        if len(fn.params) != len(spec.inputs):
            raise AutodiffError("grad: the model's program does not map onto its inputs")
        tile_name = {self.forward.input_names[gi]: p for p, gi in zip(fn.params, spec.inputs)}
        names = {w: tile_name[w] for w in self.wrt if w in tile_name}
        if not names:
            return spec, None, names
        key = (id(fn), tuple(names.values()))
        hit = self._grads.get(key)
        if hit is not None and hit[1] is fn:
            self._grads.move_to_end(key)
            return spec, hit[0], names
        g = GradFunction(fn, tuple(names.values()))
        self._grads[key] = (g, fn)
        while len(self._grads) > self.CACHE:
            self._grads.popitem(last=False)
        return spec, g, names

    def specialise(self, *inputs: Any) -> Function | None:
        """The gradient program (a :class:`~stripeml.autodiff.GradFunction`:
        ``.source``, ``.params``, ``.wrt`` in Tile names) for these graph
        inputs; ``None`` when no ``wrt`` input reaches the model's program."""
        arrays = self.forward._arrays(list(inputs), {})
        return self._program(arrays)[1]

    def source(self, *inputs: Any) -> str:
        """The Tile gradient program for these graph inputs ("" when none)."""
        g = self.specialise(*inputs)
        return "" if g is None else g.source

    # -- calling -------------------------------------------------------------
    def __call__(self, *args: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        arrays, cots = self._split(args)
        spec, g, names = self._program(arrays)
        index = {n: k for k, n in enumerate(self.forward.input_names)}
        got: dict[str, np.ndarray] = {}
        if g is not None:
            by_output: dict[str, np.ndarray] = {}
            for (kind, name), c in zip(spec.outputs, cots):
                if kind == "tile":
                    by_output[name] = c
            call = [*spec.call_args(arrays), *(by_output[o] for o in spec.function.outputs)]
            res = g(*call)
            res = res if isinstance(res, tuple) else (res,)
            got = dict(zip(names, res))
        out = []
        for w in self.wrt:
            a = arrays[index[w]]
            d = got.get(w)
            out.append(np.zeros(a.shape, a.dtype) if d is None else d.astype(a.dtype, copy=False))
        return out[0] if len(out) == 1 else tuple(out)
