"""Shorter lengths through the longer length's program (docs/onnx.md,
"Shorter lengths through the first length's program").

A model whose inputs have symbolic dimensions (a transformer's sequence, a
batch) compiles one program per input shape.  Most of what a new length costs
is that compile, and most models compute position by position along such a
dimension: the program made for length ``N`` then computes length ``S < N``
too, on inputs padded to ``N``, if every reduction over the positions stops
at ``S``.  So the first compile of such a model writes its Tile program with
those reductions masked (``index(X, axis) < LEN ? X : fill``, ``LEN`` a
runtime input, ``fill`` the reduction's identity) and runs it with
``LEN = N``; a call at ``S < N`` pads its inputs, passes ``LEN = S``, and cuts
the outputs to ``S``, without compiling anything.

Up to :data:`MAX_LENGTHS` such lengths are masked at once (a sequence and a
batch), each with its own ``LEN``; what follows says it of one.

**What proves it.**  At the first compile the frontend imports the model a
second time at length ``N - 1`` (the *probe*).  The two Tile sources must be
the same text but for numbers, and every number that differs must be ``N``
in one and ``N - 1`` in the other, in a size (a parameter's dimension, a
contraction's output sizes, a ``reshape``'s sizes): anything else (a mean's
``1/N``, a pooling's ``ceil(N/2)``, a bound of a constraint) and the model is
compiled per length as before.  The tensors whose shapes differ give the
*marked* axes.  Every statement must then map each marked position to the
same position (:func:`.lengths_rules.masks`): element-wise statements do; a contraction
may index a marked axis only by a plain index, which is either an output
index on a marked axis (the position carried over) or a reduction index,
whose operands are then masked; ``reshape`` must keep the marked axis whole
with the same sizes on each side; ``gather`` may read along a marked axis
only with constant indices, checked below the length at each call.  Anything
else (a shifted or mixed access, a constraint on a marked index, another
builtin over marked axes) keeps the model per length.

At a call at ``S`` the frontend imports the model at ``S`` (no compile) and
checks that it is the program of ``N`` restricted to ``S``: the same text,
the numbers that differed at the probe ``S`` here and every other number
the same, and every constant equal, or, along its marked axes, the first
``S`` positions of the one at ``N``.  Then the program of ``N`` computes
what the program of ``S`` computes, position for position below ``S``.

**Steady state.**  The program of ``N`` does ``N``'s work at every length, so
after :data:`CALLS_BEFORE_OWN` calls a length gets its own program, compiled
from the import its check made.  A length above ``N`` compiles the masked
program for itself, which shorter lengths then run.
``STRIPEML_LENGTHS=0`` turns all of this off.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import StripeError

if TYPE_CHECKING:
    from ..api import Function
    from .lengths_memo import Facts

# ``importer.OnnxFunction`` and ``importer.Specialised``: that module imports
# this one, so they are not imported here.
OnnxFunction = Any
Specialised = Any

__all__ = ["CALLS_BEFORE_OWN", "Lengths", "View", "due", "enabled", "import_for", "make"]

#: Calls a shorter length makes through the longer program before it is
#: compiled for its own size (docs/onnx.md).
CALLS_BEFORE_OWN = 2


def enabled() -> bool:
    """``STRIPEML_LENGTHS=0`` (or ``off``) turns shorter lengths off."""
    return os.environ.get("STRIPEML_LENGTHS", "1").strip().lower() not in ("0", "off", "no")


#: At most this many lengths (the largest distinct sizes the first call gives
#: the inputs' symbolic dimensions, a sequence and a batch, say) are masked.
MAX_LENGTHS = 2

Sizes = tuple[int, ...]  # per length (group), its size


@dataclass
class Lengths:
    """The masked program of lengths ``ns`` and what a shorter call is checked against."""

    ns: Sizes
    base: Specialised  # the import at ns, unmasked: what a shorter import is compared with
    function: Function  # the masked program
    marked: dict[int, int]  # the source's numbers that are a length: position -> length
    input_axes: dict[int, dict[int, int]]  # graph input -> its marked axes (axis -> length)
    const_axes: dict[str, dict[int, int]]
    out_axes: list[dict[int, int]]  # per entry of base.outputs
    gathered: list[tuple[str, int]]  # constant indices gathered along a marked axis
    shapes: list[tuple[int, ...]]  # the graph inputs' shapes at ns
    dtypes: list[np.dtype]  # and their dtypes
    source: str  # the masked program's source
    least: dict[int, int]  # per length, the shortest it takes
    # the base source split around its numbers (made when a shorter call first asks)
    _split: tuple[list[str], list[str]] | None = None

    @property
    def n(self) -> int:
        """The first (largest) length."""
        return self.ns[0]

    def view(
        self, owner: OnnxFunction, arrays: Sequence[np.ndarray]
    ) -> tuple[Specialised | None, Specialised | None]:
        """The view that runs ``arrays`` (shorter lengths) through this program,
        and the import of ``arrays`` it checked; (None, the import or None) when
        they are not such lengths (the caller compiles them as before)."""
        s = self._lengths_of(arrays)
        if s is None:
            return None, None
        try:
            spec = _quietly(owner, arrays)
        except StripeError:
            return None, None  # the caller's own import says what is wrong
        if not self._restricts(spec, s):
            return None, spec
        return _viewing(self, s, spec), spec

    def _lengths_of(self, arrays: Sequence[np.ndarray]) -> Sizes | None:
        """The lengths ``arrays`` have, each at most this program's (and at
        least :attr:`least`), one shorter; their other sizes ``ns``'s inputs'."""
        s = self._sizes(arrays)
        if s is None or s == self.ns:
            return None
        for g, (got, n) in enumerate(zip(s, self.ns)):
            if not self.least.get(g, 1) <= got <= n:
                return None
        return s

    def longer(self, arrays: Sequence[np.ndarray]) -> bool:
        """Whether ``arrays`` have a length above this program's, their other
        sizes ``ns``'s inputs'."""
        s = self._sizes(arrays)
        return s is not None and any(got > n for got, n in zip(s, self.ns))

    def _sizes(self, arrays: Sequence[np.ndarray]) -> Sizes | None:
        found: dict[int, set[int]] = {}
        for i, (a, shape, dtype) in enumerate(zip(arrays, self.shapes, self.dtypes)):
            axes = self.input_axes.get(i, {})
            if a.ndim != len(shape) or a.dtype != dtype:
                return None
            for k, (got, was) in enumerate(zip(a.shape, shape)):
                if k in axes:
                    found.setdefault(axes[k], set()).add(int(got))
                elif got != was:
                    return None
        if any(len(found.get(g, ())) != 1 for g in range(len(self.ns))):
            return None
        return tuple(next(iter(found[g])) for g in range(len(self.ns)))

    def _restricts(self, spec: Specialised, s: Sizes) -> bool:
        """Whether ``spec`` (the import at ``s``) is this program's restricted to ``s``."""
        if (
            spec.host is not None
            or spec.function is None
            or len(spec.outputs) != len(self.out_axes)
        ):
            return False
        from . import lengths_rules as rules

        if self._split is None:
            base_texts, base_numbers, _ = rules.numbers(self.base.source)
            self._split = base_texts, base_numbers
        texts, numbers, _ = rules.numbers(spec.source)
        if texts != self._split[0] or len(numbers) != len(self._split[1]):
            return False
        for k, (got, was) in enumerate(zip(numbers, self._split[1])):
            g = self.marked.get(k)
            if got != (was if g is None else str(s[g])):
                return False
        for (kind, got), (kind0, was) in zip(spec.outputs, self.base.outputs):
            if kind != kind0 or (kind == "const" and not np.array_equal(got, was)):
                return False
        given, base = spec.function.constants, self.base.function.constants
        if given.keys() != base.keys():
            return False
        for name, c in given.items():
            b = base[name]
            if c is b:
                continue
            axes = self.const_axes.get(name)
            if axes:
                b = b[_prefix(b.ndim, axes, s)]
            if c.shape != b.shape or c.dtype != b.dtype or not np.array_equal(c, b):
                return False
        for name, g in self.gathered:
            c = given[name]
            if c.size and (int(c.min()) < 0 or int(c.max()) >= s[g]):
                return False
        return True


def _prefix(ndim: int, axes: dict[int, int], s: Sizes) -> tuple[slice, ...]:
    """The first ``s`` positions along each marked axis (by its length), all of the others."""
    return tuple(slice(0, s[axes[k]]) if k in axes else slice(None) for k in range(ndim))


@dataclass
class View:
    """Lengths ``lengths`` run through the program of ``of`` (longer, or its
    own when ``own`` is None): inputs padded, the lengths passed, outputs cut."""

    of: Lengths
    lengths: Sizes
    own: Specialised | None = None  # the import at ``lengths``, compiled when it is due
    calls: int = 0

    def call_args(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        g = self.of
        padded = []
        for i, a in enumerate(arrays):
            if i in g.input_axes and a.shape != g.shapes[i]:
                full = np.zeros(g.shapes[i], a.dtype)
                full[tuple(slice(0, d) for d in a.shape)] = a
                a = full
            padded.append(a)
        lens = [np.array(n, np.int64) for n in self.lengths]
        return [*g.base.call_args(padded), *lens]  # base: the first import, not a view

    def trim(self, values: list[np.ndarray]) -> list[np.ndarray]:
        """The outputs cut to ``lengths`` along their marked axes."""
        g = self.of
        if self.lengths == g.ns:
            return values
        out = []
        for v, axes in zip(values, g.out_axes):
            if axes:
                v = np.ascontiguousarray(v[_prefix(v.ndim, axes, self.lengths)])
            out.append(v)
        return out


def _viewing(g: Lengths, lengths: Sizes, own: Specialised | None) -> Specialised:
    spec = type(g.base)(g.source, g.function, g.base.inputs, g.base.outputs, narrow=g.base.narrow)
    spec.view = View(g, lengths, own)
    return spec


def import_for(owner: OnnxFunction, arrays: Sequence[np.ndarray]) -> Specialised:
    """The program for a call signature not seen before: a longer length's,
    viewed, where one takes it; else the import of ``arrays``, which, the
    first time a model with symbolic dimensions is imported or at a length
    above the masked program's, writes the masked program for this length
    (the call then runs that; shorter lengths run it from then on)."""
    g: Lengths | None = owner._lengths
    built = None
    if g is not None:
        viewed, built = g.view(owner, arrays)
        if viewed is not None:
            return viewed
    spec = built if built is not None else owner._build(arrays)
    if (g is None and not owner._lengths_tried) or (g is not None and g.longer(arrays)):
        owner._lengths_tried = True
        made = make(owner, arrays, spec)
        if made is not None:
            owner._lengths = made
            return _viewing(made, made.ns, None)
    return spec


def due(owner: OnnxFunction, spec: Specialised, arrays: Sequence[np.ndarray]) -> Specialised:
    """``spec`` (a view), or, for a shorter length's view called more than
    :data:`CALLS_BEFORE_OWN` times, its own program (which replaces the view)."""
    v = spec.view
    if v.own is None:
        return spec
    v.calls += 1
    if v.calls <= CALLS_BEFORE_OWN:
        return spec
    own = v.own
    owner._cache.put(owner._key(list(arrays)), own)
    return own


def make(owner: OnnxFunction, arrays: Sequence[np.ndarray], spec: Specialised) -> Lengths | None:
    """The masked program for ``arrays``' lengths, when the model has one that
    shorter lengths can run through (else None: it compiles per length)."""
    if not enabled() or owner._static or spec.host is not None or spec.function is None:
        return None
    if spec.shapes is None:
        return None
    symbolic: dict[int, list[int]] = {}
    for i, gi in enumerate(owner.graph.inputs):
        if gi.dims is not None and len(gi.dims) == arrays[i].ndim:
            symbolic[i] = [k for k, d in enumerate(gi.dims) if not isinstance(d, int)]
    sizes = {arrays[i].shape[k] for i, ks in symbolic.items() for k in ks}
    ns = tuple(sorted((n for n in sizes if n >= 2), reverse=True)[:MAX_LENGTHS])
    if not ns:
        return None
    input_axes: dict[int, dict[int, int]] = {}
    for i, ks in symbolic.items():
        axes = {k: ns.index(arrays[i].shape[k]) for k in ks if arrays[i].shape[k] in ns}
        if axes:
            input_axes[i] = axes
    from . import lengths_memo as memo

    key = memo.key(spec, ns, input_axes, arrays)
    facts = memo.recall(key)
    if facts is None:
        try:
            probes = []
            for g, n in enumerate(ns):
                probe_arrays = []
                for i, a in enumerate(arrays):
                    axes = input_axes.get(i, {})
                    shape = [n - 1 if axes.get(k) == g else d for k, d in enumerate(a.shape)]
                    probe_arrays.append(np.zeros(shape, a.dtype))
                probes.append(_quietly(owner, probe_arrays))
            facts = _analyse(spec, probes, ns)
        except Exception:  # noqa: BLE001 - lengths the model cannot take: per length, as before
            return None
        memo.remember(key, facts)
    if facts.refused:
        return None
    return _assemble(owner, spec, facts, ns, input_axes, list(arrays))


def _quietly(owner: OnnxFunction, arrays: Sequence[np.ndarray]) -> Specialised:
    """``owner``'s import of ``arrays``, without its progress lines (a second
    import of the same model)."""
    said, owner.progress = owner.progress, None
    try:
        return owner._build(arrays)
    finally:
        owner.progress = said


def _analyse(spec: Specialised, probes: list[Specialised], ns: Sizes) -> Facts:
    """What the masked program is, when every probe (``probes[g]``: the import
    with length ``g`` one shorter) differs from ``spec`` in sizes of that
    length only and the program keeps positions (:func:`.lengths_rules.masks`);
    else :data:`.lengths_memo.REFUSED`."""
    from ..tile.parser import parse
    from . import lengths_memo as memo
    from . import lengths_rules as rules

    texts, numbers, starts = rules.numbers(spec.source)
    marked: dict[int, int] = {}
    marks: rules.Marks = {}
    assert spec.shapes is not None and spec.dtypes is not None
    for g, (probe, n) in enumerate(zip(probes, ns)):
        if probe.host is not None or probe.function is None or probe.shapes is None:
            return memo.REFUSED
        texts_p, numbers_p, _ = rules.numbers(probe.source)
        if texts != texts_p or len(numbers) != len(numbers_p):
            return memo.REFUSED
        for k, (a, b) in enumerate(zip(numbers, numbers_p)):
            if a != b:
                if (a, b) != (str(n), str(n - 1)) or k in marked:
                    return memo.REFUSED
                marked[k] = g
        if spec.shapes.keys() != probe.shapes.keys():
            return memo.REFUSED
        for name, shape in spec.shapes.items():
            other = probe.shapes[name]
            if len(shape) != len(other):
                return memo.REFUSED
            for k, (a, b) in enumerate(zip(shape, other)):
                if a != b:
                    if (a, b) != (n, n - 1) or k in marks.get(name, {}):
                        return memo.REFUSED
                    marks.setdefault(name, {})[k] = g
        for (kind, x), (_, y) in zip(spec.outputs, probe.outputs):
            if kind == "const" and np.shape(x) != np.shape(y):
                return memo.REFUSED  # a folded output that the length sizes
    if not marked:
        return memo.REFUSED
    tree = parse(spec.source)
    if not rules.where_numbers(spec.source, starts, set(marked)) <= rules.size_positions(tree):
        return memo.REFUSED  # a length is a value, a bound or an offset somewhere
    assert spec.function is not None
    plan = rules.masks(tree, marks, spec.shapes, set(spec.function.constants))
    if plan is None:
        return memo.REFUSED
    masks, gathered, least = plan
    written = rules.write(spec.source, tree, masks, spec.dtypes, len(ns))
    if written is None:
        return memo.REFUSED
    source, fills = written
    return memo.Facts(False, marked, marks, least, gathered, source, fills)


def _assemble(
    owner: OnnxFunction,
    spec: Specialised,
    facts: Facts,
    ns: Sizes,
    input_axes: dict[int, dict[int, int]],
    arrays: list[np.ndarray],
) -> Lengths:
    """The masked program ``facts`` describe, for ``spec``'s function."""
    from .. import api
    from . import lengths_rules as rules

    fn = spec.function
    assert fn is not None
    every = [*fn.every, *(rules.len_name(g) for g in range(len(ns))), *facts.fills]
    constants = {**fn.constants, **facts.fills}
    function = api.Function(
        facts.source, owner.resolved_target, fn.name, constants, names=(every, fn.outputs)
    )
    marks = facts.marks
    out_axes = [marks.get(x, {}) if kind == "tile" else {} for kind, x in spec.outputs]
    const_axes = {name: marks[name] for name in fn.constants if name in marks}
    return Lengths(
        ns, spec, function, facts.marked, input_axes, const_axes, out_axes, facts.gathered,
        [a.shape for a in arrays], [a.dtype for a in arrays], facts.source, facts.least,
    )  # fmt: skip
