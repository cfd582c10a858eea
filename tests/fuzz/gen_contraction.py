"""Random affine contractions, shared by the hypothesis tests and the fuzzer.

:func:`gen_contraction` writes one contraction over given operand tensors
("slots": fixed shapes, or shapes drawn to fit).  Every index is made to
appear *alone* (coefficient +-1 plus a constant) in some access dimension, or
bounded by a constraint of its own (a window ``r < 3``), so its range is
always inferable and stripeml must not raise.  A *witness* tuple (every index
in 0..2) is drawn first and each constant is chosen, within -2..2, to put the
witness in bounds where it can: most contractions then have valid tuples, yet
coefficients and signs stay uniform.  Now and then a constant is drawn freely,
so empty domains occur too.

The defaults (:class:`Knobs`) are what ``tests/test_random_contractions.py``
has always drawn; the fuzzer turns on the rest: ``=``, ``==``, the condition,
constraint-only windows, reversed anchors ``D - 1 - x``, constant output
positions, and more than one constraint.
"""

from __future__ import annotations

from dataclasses import dataclass

from .choose import Chooser
from .contraction import Access, Spec, eval_int

OUT_INDICES = ("i", "j", "k")
RED_INDICES = ("r", "s")
DIM_NAMES = ("P", "Q", "R", "S", "T", "U")
# Operands per combination.
ARITY = {"none": 1, "*": 2, "+": 2, "==": 2, "cond": 3}


@dataclass(frozen=True)
class Slot:
    """A tensor a contraction reads: its name, the size expression of each
    dimension (dim names or literals), and its shape (``None``: drawn to fit)."""

    name: str
    dims: tuple[str, ...]
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Knobs:
    """What :func:`gen_contraction` may produce (rates are chances per site)."""

    min_out: int = 1
    max_out: int = 3
    max_red: int = 2
    constraints: int = 1  # at most this many, each with chance 1/2
    window: float = 0.0  # a reduction index bounded only by `r < K`
    reversed_anchor: float = 0.0  # an anchor `D - 1 - x`
    const_out: float = 0.0  # a constant output position
    races: bool = True  # `=` may reach one element twice


def render_poly(terms: list[tuple[int, str]], const: int) -> str:
    text = ""
    for c, x in terms:
        mag = "" if abs(c) == 1 else f"{abs(c)} * "
        if not text:
            text = ("-" if c < 0 else "") + mag + x
        else:
            text += (" - " if c < 0 else " + ") + mag + x
    if const:
        text += f" - {-const}" if const < 0 else f" + {const}"
    return text or "0"


def _const_for(ch: Chooser, value: int, extent: int | None = None) -> int:
    """A constant in -2..2 that lands ``value + const`` in 0..2 (and below a
    known ``extent``) when it can."""
    if ch.integer(0, 7) == 0:
        return ch.integer(-2, 2)
    target = ch.choice((0, 0, 1, 2))
    if extent is not None:
        target = min(target, extent - 1)
    return max(-2, min(2, -value + target))


def _anchor(ch: Chooser, x: str, witness: dict[str, int], extent: int | None = None):
    sign = ch.choice((1, -1))
    const = _const_for(ch, sign * witness[x], extent)
    return render_poly([(sign, x)], const), sign * witness[x] + const


def _poly(ch: Chooser, indices: tuple[str, ...], witness: dict[str, int], extent=None):
    if not indices:  # a contraction without indices reads fixed elements
        const = _const_for(ch, 0, extent)
        return str(const), const
    chosen = ch.subset(indices, 1, 2)
    terms = [(ch.choice((1, 2, -1, -2)), x) for x in chosen]
    value = sum(c * witness[x] for c, x in terms)
    const = _const_for(ch, value, extent)
    return render_poly(terms, const), value + const


def _extent(ch: Chooser, at_least: int) -> int:
    """An extent in 1..6, above the witness position ``at_least - 1`` when it can be."""
    return max(ch.integer(1, 6), at_least if at_least <= 6 else 1)


def _size(ch: Chooser, dims: dict[str, int], at_least: int) -> str:
    kind = ch.choice(("lit", "dim", "dim_plus", "half"))
    if kind == "lit" or not dims:
        return str(_extent(ch, at_least))
    d = ch.choice(sorted(dims))
    text = {"dim": d, "dim_plus": f"{d} + {ch.integer(1, 2)}", "half": f"({d} + 1) / 2"}[kind]
    return text if eval_int(text, dims) >= at_least else str(_extent(ch, at_least))


def _operand_poly(ch, slot_dim, extent, anchor, indices, witness, knobs):
    """The index polynomial of one operand dimension and the witness's position there."""
    if anchor is None:
        return _poly(ch, indices, witness, extent)
    if extent is not None and ch.chance(knobs.reversed_anchor) and witness[anchor] < extent:
        return f"{slot_dim} - 1 - {anchor}", extent - 1 - witness[anchor]
    return _anchor(ch, anchor, witness, extent)


def gen_contraction(
    ch: Chooser,
    out: str,
    slots: list[Slot],
    combo: str,
    agg: str,
    dims: dict[str, int],
    knobs: Knobs = Knobs(),
    default: Slot | None = None,
) -> tuple[Spec, dict[str, tuple[int, ...]]]:
    """A contraction ``out[...] = agg(combo of slots)`` and the shapes of free slots.

    ``dims`` are the program's dimensions (size expressions may use them); the
    dims of free slots are added to it.  With ``default``, the output takes
    that tensor's shape (its size expressions).
    """
    assert len(slots) == ARITY[combo], (combo, slots)
    n_out = ch.integer(knobs.min_out, knobs.max_out) if default is None else len(default.dims)
    outs = OUT_INDICES[:n_out]
    positions = [(t, d) for t, s in enumerate(slots) for d in range(len(s.dims))]
    n_red = (
        0
        if agg == "=" and not knobs.races
        else ch.integer(0 if slots[0].shape else 1, knobs.max_red)
    )
    windows = [x for x in RED_INDICES[:n_red] if ch.chance(knobs.window)]
    anchored_reds = [x for x in RED_INDICES[:n_red] if x not in windows]
    if len(anchored_reds) > len(positions):
        anchored_reds = anchored_reds[: len(positions)]
    reds = tuple(windows) + tuple(anchored_reds)
    indices = outs + reds
    witness = {x: ch.integer(0, 2) for x in indices}
    anchored = dict(zip(ch.permutation(positions), anchored_reds))

    shapes: dict[str, tuple[int, ...]] = {}
    operands = []
    for t, slot in enumerate(slots):
        polys, shape = [], []
        for d, slot_dim in enumerate(slot.dims):
            extent = slot.shape[d] if slot.shape is not None else None
            poly, value = _operand_poly(
                ch, slot_dim, extent, anchored.get((t, d)), indices, witness, knobs
            )
            polys.append(poly)
            shape.append(extent if extent is not None else _extent(ch, value + 1))
        operands.append(Access(slot.name, tuple(polys)))
        if slot.shape is None:
            shapes[slot.name] = tuple(shape)
            dims.update(zip(slot.dims, shape))

    out_polys, sizes = [], []
    for n, x in enumerate(outs):
        if default is not None:
            assert default.shape is not None
            size_text, size = default.dims[n], default.shape[n]
            poly, _ = _anchor(ch, x, witness, size)
        else:
            poly, value = _anchor(ch, x, witness)
            size_text = _size(ch, dims, value + 1)
            size = eval_int(size_text, dims)
        if ch.chance(knobs.const_out) and (agg != "=" or knobs.races):
            # A constant position pins the dimension; the index stays bounded by
            # a constraint of its own.
            out_polys.append(str(ch.integer(0, min(size - 1, 2))))
            windows.append(x)
        else:
            out_polys.append(poly)
        sizes.append(size_text)
    constraints = [(x, str(ch.integer(1, 3))) for x in windows]
    for _ in range(knobs.constraints):
        if not ch.boolean():
            continue
        poly, value = _poly(ch, indices, witness)
        bound = ch.choice(["lit", *sorted(dims)])
        if bound == "lit" or dims[bound] <= value:
            bound = str(_extent(ch, value + 1))
        constraints.append((poly, bound))
    spec = Spec(
        tuple((s.name, s.dims) for s in slots),
        Access(out, tuple(out_polys)),
        tuple(sizes),
        agg,
        combo,
        tuple(operands),
        tuple(constraints),
        default.name if default is not None else None,
    )
    return spec, shapes
