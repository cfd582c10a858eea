"""Recurrent operators: RNN, GRU and LSTM, their time loop unrolled when compiling.

The importer binds shapes per call, so the sequence length is known and the
loop over time becomes straight-line Tile:

* **The input projection** ``X[t] W^T + Wb + Rb``, for every step and every
  direction, is one contraction before the loop: a ``[seq, batch, dirs,
  gates * hidden]`` GEMM (constant weights are stored ``[input, dirs, gates
  * hidden]`` first, so its contiguous axis is the output's).
* **Each step** is then the same statements: its row of the projection (an
  ``=`` slice, which ``alias_view`` makes a view the product reads);
  ``H[t-1] R^T`` for all gates as one contraction (``R`` stored ``[hidden,
  gates * hidden]``, one constant per direction) with that row added as its
  epilogue; the gate slices and the elementwise gate math, which ``fuse``
  makes one kernel.  The steps' kernels differ only in the rows they read and
  write, offsets the canonical form takes out
  (:mod:`stripeml.analysis.canonical`), so the CPU backend compiles each once
  for all steps of a direction.
* **An LSTM, or a GRU with ``linear_before_reset`` (PyTorch's), without
  peepholes or unequal lengths** (``hidden`` a multiple of 16) lays ``R^T``
  out by blocks of ``B`` hidden units (64, else 32 or 16): block ``b`` is a
  ``[hidden, gates * B]`` panel whose column ``k * B + u`` is gate ``k`` of
  unit ``b * B + u`` (:meth:`_Lowering.recurrent_by_unit`).  The product
  ``[batch, blocks, gates * B]`` then holds all the gates of a block of units
  in one register tile, and the gate math (over ``[batch, blocks, B]``,
  reading the step's projection row itself rather than as the product's
  epilogue) reads only that block: ``epilogue`` runs it on each finished
  tile, so a step is one kernel, split over threads by blocks (two before,
  the gate math on the calling thread while the other waited; the GRU's
  product was not split at all).  An LSTM's cell state stays ``[batch,
  blocks, B]``; ``h`` is read back as ``[batch, hidden]`` (a ``reshape``, a
  view).
* **Y** is assembled after the loop by one ``=`` copy per step and direction,
  which ``alias_copy`` removes: each step's gate kernel writes its row of
  ``Y`` (see :meth:`_Lowering._assemble_y`).

The formulas are the ONNX reference implementation's (``onnx.reference``'s
``op_rnn``/``op_gru``/``op_lstm``); what it leaves out follows the operator
specification and onnxruntime: ``activations`` (with ``activation_alpha`` and
``activation_beta`` consumed in order by the functions that take them),
``clip`` on every gate's input to its activation, LSTM's ``input_forget``
(``f = 1 - i``), and ``sequence_lens``.

``sequence_lens`` (input 4) must be known when compiling (a constant, or a
graph input the importer specialises on).  Rows of ``Y`` past a sequence's
length are 0 and ``Y_h``/``Y_c`` hold its last valid step (0 for a length of
0); a reverse direction runs each sequence from its own last element.  When
the lengths differ, each step carries a constant mask that freezes the
finished sequences' state, and a reverse direction reads its input and
writes ``Y`` in processing order: one ``=`` copy per batch entry each way,
its time reversed within its length, from a buffer whose time axis starts
with ``seq`` rows of zeros (so every copy reads in bounds and the copies share
one compiled body; see :meth:`_Lowering._times`), native kernels where a
``gather`` would be a host step; past ``_COPIES_UP_TO`` entries, a ``gather``
of rows known when compiling each way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._recurrent_spec import _Act, _const, _is_zero, _parse, _Spec, _zeros
from ._util import literal
from .shape import reshape

#: Up to this many batch entries, a reverse direction with unequal lengths
#: reads X and writes Y in processing order through one ``=`` copy per entry
#: (native kernels); beyond, through a ``gather`` each (a host step apiece).
_COPIES_UP_TO = 16


class _Lowering:
    """Writes one recurrent node (see the module docstring)."""

    def __init__(self, b: Builder, n: Node, spec: _Spec) -> None:
        self.b, self.n, self.s = b, n, spec
        self.gh = spec.gates * spec.hidden
        self.zero_states: set[str] = set()  # initial states known to be zeros
        self.values: dict[str, Value] = {}  # Tile name -> value, of the names ``ref`` gave
        #: Hidden units per block of the product's columns (0: gate-major
        #: columns); see :meth:`_unit_block`.
        self.unit_block = 0
        self.rbh_by_unit: dict[int, str] = {}  # GRU: Rbh by blocks, per direction

    # -- helpers ------------------------------------------------------------------
    def ref(self, v: Value) -> str:
        name = self.b.ref(v)
        self.values[name] = v
        return name

    def take(
        self, v: Value, shape: Sequence[int], numpy: Callable[[np.ndarray], np.ndarray], tile: str
    ) -> Value:
        """``v`` rearranged: by ``numpy`` when it is a constant, else by the
        statement ``tile`` (``{src}`` names ``v``, ``{out}`` the result)."""
        if v.const is not None:
            return _const(numpy(np.asarray(v.const)))
        return self.b.contraction(tile.replace("{src}", self.ref(v)), shape, v.dtype)

    def ew(self, expr: str) -> str:
        """``expr`` as a new ``[batch, hidden]`` tensor; its name."""
        s = self.s
        return self.ref(self.b.eltwise(expr, (s.batch, s.hidden), s.dtype))

    def cols(self, v: Value, lo: int, width: int) -> Value:
        """Columns ``lo : lo + width`` of the ``[batch, k]`` tensor ``v`` (an ``=``
        slice, which ``alias_view`` turns into views of ``v`` in its readers)."""
        s = self.s
        if lo == 0 and width == v.shape[1]:
            return v
        col = f"g + {lo}" if lo else "g"
        text = f"{{out}}[n, g : {s.batch}, {width}] = =({self.ref(v)}[n, {col}])"
        return self.b.contraction(text, (s.batch, width), s.dtype)

    def gate(self, v: Value, j: int) -> str:
        """Gate ``j`` of the ``[batch, k * hidden]`` tensor ``v``, as a tensor name."""
        return self.ref(self.cols(v, j * self.s.hidden, self.s.hidden))

    def add(self, p: Value | None, q: Value) -> Value:
        """``p + q``: emitted right after ``p``'s product, so the product takes it
        as its epilogue (``q``: the step's own copy of its projection row)."""
        if p is None:
            return q
        return self.b.eltwise(f"{self.ref(p)} + {self.ref(q)}", p.shape, p.dtype)

    def act(self, a: _Act, expr: str, ew: Callable[[str], str] | None = None) -> str:
        """``a`` applied to ``expr`` (clipped first when ``clip`` is set), as a
        parenthesised expression: the gate math of a step is a few statements,
        which ``fuse`` makes one kernel.  An activation that reads its input
        twice gets it as a tensor of its own, made by ``ew`` (:meth:`ew`)."""
        s = self.s
        if s.clip is not None:
            c = literal(s.clip, np.float64)
            expr = f"max(min({expr}, {c}), {literal(-s.clip, np.float64)})"
        x = (ew or self.ew)(expr) if a.repeats_input else f"({expr})"
        return f"({a.apply(x)})"

    def act_plain(self, a: _Act, x: str) -> str:
        """``a`` applied to the tensor ``x``, unclipped (the LSTM's ``h(C)``)."""
        return f"({a.apply(x)})"

    def matmul(self, h: str, rt: Value) -> Value | None:
        """``h [batch, hidden] @ rt [hidden, k]``: the recurrent product (``None``,
        zero, for the first step of a direction without an initial state)."""
        s = self.s
        if h in self.zero_states:
            return None
        k = rt.shape[1]
        text = f"{{out}}[n, g : {s.batch}, {k}] = +({h}[n, j] * {self.ref(rt)}[j, g])"
        return self.b.contraction(text, (s.batch, k), s.dtype)

    def matmul_by_unit(self, h: str, rt: Value) -> Value | None:
        """:meth:`matmul` with ``rt`` laid out ``[blocks, hidden, gates * B]``
        (:meth:`recurrent_by_unit`): the product ``[batch, blocks, gates * B]``
        (``rt`` 2-D for one block: :meth:`matmul`)."""
        s = self.s
        if h in self.zero_states or rt.rank == 2:
            return self.matmul(h, rt)
        nb, _, w = rt.shape
        text = f"{{out}}[n, b, c : {s.batch}, {nb}, {w}] = +({h}[n, j] * {self.ref(rt)}[b, j, c])"
        return self.b.contraction(text, (s.batch, nb, w), s.dtype)

    # -- weights ------------------------------------------------------------------
    def _unit_block(self, masked: bool) -> int:
        """Hidden units per block of the recurrent product's columns, 0 to keep
        them gate-major.  An LSTM, or a GRU with ``linear_before_reset`` (one
        product a step), without peepholes or masks takes blocks of ``B`` units
        holding all the gates of those units (``B`` 64, else 32 or 16, dividing
        ``hidden``): the product's register tile (at most 256 columns) then
        covers whole blocks, the gate math becomes its epilogue and the step
        one kernel, split over threads by blocks."""
        s = self.s
        if masked or any(x is not None for p in self.peep for x in p):
            return 0
        if s.kind != "LSTM" and not (s.kind == "GRU" and s.linear_before_reset):
            return 0
        return next((k for k in (64, 32, 16) if s.hidden % k == 0), 0)

    def recurrent_by_unit(self, d: int) -> Value:
        """``R[d]^T`` as ``[blocks, hidden, gates * B]``, one contiguous panel per
        block: column ``k * B + u`` of block ``b`` is gate ``k`` of hidden unit
        ``b * B + u``."""
        r, h, g = self.n.input(2), self.s.hidden, self.s.gates
        blk = self.unit_block
        nb = h // blk
        if nb == 1:  # gate-major: R^T as it is
            return self.recurrent(d, 0, g * h)

        def numpy(a: np.ndarray) -> np.ndarray:
            t = a[d].T.reshape(h, g, nb, blk)  # [j, gate, block, unit]
            return t.transpose(2, 0, 1, 3).reshape(nb, h, g * blk)

        text = (
            f"{{out}}[b, j, {blk} * k + u : {nb}, {h}, {g * blk}] = "
            f"=({{src}}[{d}, {h} * k + {blk} * b + u, j]), u < {blk}"
        )
        return self.take(r, (nb, h, g * blk), numpy, text)

    def recurrent(self, d: int, lo: int, hi: int) -> Value:
        """Rows ``lo:hi`` of ``R[d]``, transposed: ``[hidden, hi - lo]``."""
        r, h = self.n.input(2), self.s.hidden
        row = f"g + {lo}" if lo else "g"
        return self.take(
            r,
            (h, hi - lo),
            lambda a: a[d, lo:hi].T,
            f"{{out}}[j, g : {h}, {hi - lo}] = =({{src}}[{d}, {row}, j])",
        )

    def vector(self, v: Value | None, d: int, lo: int) -> str | None:
        """``v[d, lo : lo + hidden]`` (a bias or peephole part) as a tensor name;
        ``None`` when ``v`` is absent or that part is all zeros."""
        if v is None:
            return None
        h = self.s.hidden
        if v.const is not None and not np.any(np.asarray(v.const)[d, lo : lo + h]):
            return None
        col = f"g + {lo}" if lo else "g"
        part = self.take(
            v, (h,), lambda a: a[d, lo : lo + h], f"{{out}}[g : {h}] = =({{src}}[{d}, {col}])"
        )
        return self.ref(part)

    def reset_bias(self, d: int) -> str | None:
        """GRU with linear_before_reset: ``[0, 0, Rbh]`` of direction ``d``
        (``[gates * hidden]``); ``None`` when ``Rbh`` is absent or zero."""
        h, gh = self.s.hidden, self.gh
        bv = self.n.opt(3)
        if bv is None:
            return None
        if bv.const is not None:
            part = np.asarray(bv.const)[d, gh + 2 * h :]
            if not np.any(part):
                return None
            return self.ref(_const(np.concatenate([np.zeros(2 * h, part.dtype), part])))
        text = f"{{out}}[g : {gh}] = =({self.ref(bv)}[{d}, g + {gh}]), g - {2 * h} < {h}"
        return self.ref(self.b.contraction(text, (gh,), bv.dtype))

    def state(self, v: Value | None, d: int) -> Value:
        """Direction ``d``'s initial state ``[batch, hidden]`` (zeros when absent)."""
        s = self.s
        if v is None:
            return _zeros((s.batch, s.hidden), s.dtype)
        if s.layout == 0:
            return self.take(
                v,
                (s.batch, s.hidden),
                lambda a: a[d],
                f"{{out}}[n, h : {s.batch}, {s.hidden}] = =({{src}}[{d}, n, h])",
            )
        return self.take(
            v,
            (s.batch, s.hidden),
            lambda a: a[:, d],
            f"{{out}}[n, h : {s.batch}, {s.hidden}] = =({{src}}[n, {d}, h])",
        )

    def bias(self) -> Value | None:
        """``Wb + Rb`` as ``[dirs, gates * hidden]`` (GRU with linear_before_reset:
        without ``Rbh``, which the reset gate multiplies); ``None`` without B."""
        s, gh = self.s, self.gh
        bv = self.n.opt(3)
        if _is_zero(bv):
            return None
        assert bv is not None
        keep = gh
        if s.kind == "GRU" and s.linear_before_reset:
            keep = 2 * s.hidden
        if bv.const is not None:
            a = np.asarray(bv.const)
            total = a[:, :gh].copy()
            total[:, :keep] += a[:, gh : gh + keep]
            return _const(total)
        src, shape = self.ref(bv), (s.dirs, gh)
        wb = self.b.contraction(f"{{out}}[d, g : {s.dirs}, {gh}] = =({src}[d, g])", shape, s.dtype)
        cond = f", g < {keep}" if keep < gh else ""
        rb = self.b.contraction(
            f"{{out}}[d, g : {s.dirs}, {gh}] = =({src}[d, g + {gh}]){cond}", shape, s.dtype
        )
        return self.b.eltwise(f"{self.ref(wb)} + {self.ref(rb)}", shape, s.dtype)

    # -- the input projection -------------------------------------------------------
    def projection(self, steps: int, rows: np.ndarray | None) -> Value:
        """``X W^T + Wb + Rb`` for ``steps`` steps, ``[steps, batch, dirs, gates *
        hidden]``; ``rows`` (``[steps, batch, dirs]``): which row of X (flattened to
        ``[seq * batch, input]`` in its layout) each step reads, when not ``t``."""
        s, gh, b = self.s, self.gh, self.b
        x, w = self.n.input(0), self.n.input(1)
        shape = (steps, s.batch, s.dirs, gh)
        if s.inputs == 0:
            xw: Value = _zeros(shape, s.dtype)
        else:
            wt = self.take(
                w,
                (s.inputs, s.dirs, gh),
                lambda a: a.transpose(2, 0, 1),
                f"{{out}}[i, d, g : {s.inputs}, {s.dirs}, {gh}] = =({{src}}[d, g, i])",
            )
            sizes = f"{steps}, {s.batch}, {s.dirs}, {gh}"
            if rows is None:
                xi = "t, n, i" if s.layout == 0 else "n, t, i"
                text = f"{{out}}[t, n, d, g : {sizes}] = +({self.ref(x)}[{xi}] * {self.ref(wt)}[i, d, g])"
            else:
                xg = self._ordered_input(steps, rows)
                text = f"{{out}}[t, n, d, g : {sizes}] = +({self.ref(xg)}[t, n, d, i] * {self.ref(wt)}[i, d, g])"
            xw = b.contraction(text, shape, s.dtype)
        bias = self.bias()
        if bias is None:
            return xw
        return b.eltwise(f"{self.ref(xw)} + {self.ref(bias)}", shape, s.dtype)

    def _ordered_input(self, steps: int, rows: np.ndarray) -> Value:
        """X in processing order, ``[steps, batch, dirs, input]``: row ``rows[t, n,
        d]`` of X flattened to ``[seq * batch, input]``.  Up to ``_COPIES_UP_TO``
        batch entries, ``=`` copies (see :meth:`_times`); beyond, a ``gather``."""
        s, b = self.s, self.b
        x = self.n.input(0)
        shape = (steps, s.batch, s.dirs, s.inputs)
        if not self.copies:
            flat = reshape(b, x, (s.seq * s.batch, s.inputs))
            idx = self.ref(_const(rows))
            return b.statement(f"{{out}} = gather({self.ref(flat)}, {idx}, 0)", shape, s.dtype)
        # X after seq rows of zeros (its time axis twice as long): every reverse
        # copy reads in bounds, the rows before X for the times past its length
        if s.layout == 0:
            padded, dst, src = (2 * s.seq, s.batch, s.inputs), f"t + {s.seq}, n, i", "t, n, i"
        else:
            padded, dst, src = (s.batch, 2 * s.seq, s.inputs), f"n, t + {s.seq}, i", "n, t, i"
        psizes = ", ".join(str(k) for k in padded)
        xp = b.contraction(f"{{out}}[{dst} : {psizes}] = =({self.ref(x)}[{src}])", padded, s.dtype)
        src = self.ref(xp)

        def copy(d: int, nb: str, time: str, sizes: str) -> str:
            xi = f"{time}, {nb}, i" if s.layout == 0 else f"{nb}, {time}, i"
            return f"{{out}}[t, {nb}, {d}, i : {sizes}] = =({src}[{xi}])"

        out = self._copies(shape, copy)
        assert out is not None
        return out

    def _times(self, back: bool) -> list[tuple[str, str]]:
        """``(batch index, time)`` pairs, as Tile text, of the ``=`` copies that
        put a direction in processing order or back, reading a buffer whose time
        axis starts with ``seq`` rows of zeros: ``("n", "t + seq")`` for a
        forward direction; for a reverse one, per entry of nonzero length ``L``,
        ``(entry, "seq + L - 1 - t")``, in bounds for every ``t`` of the copy (a
        time past ``L`` reads a zero row), so that the copies differ only in
        offsets and share one compiled body."""
        seq = self.s.seq
        if not back:
            return [("n", f"t + {seq}")]
        return [(str(nb), f"{seq + int(n) - 1} - t") for nb, n in enumerate(self.lengths) if n > 0]

    # -- the cells ------------------------------------------------------------------
    def rnn_cell(self, d: int, q: Value, hp: str, cp: str | None) -> tuple[str, str | None]:
        (f,) = self.s.acts[d]
        a = self.add(self.matmul(hp, self.r[d][0]), q)
        return self.ew(self.act(f, self.ref(a))), None

    def gru_cell(self, d: int, q: Value, hp: str, cp: str | None) -> tuple[str, str | None]:
        f, g = self.s.acts[d]
        if self.s.linear_before_reset:
            # h = g(Xh + r (Hh + Rbh)): the product's epilogue adds the projection
            # to z and r but Rbh to h (the product is then not read again, so the
            # epilogue fuses), and the projection's h part comes from q itself
            p = self.matmul(hp, self.r[d][0])
            other = self.rbh[d] or "0"
            expr = f"({self.zr_mask} ? {self.ref(q)} : {other})"
            if p is not None:
                expr = f"{self.ref(p)} + {expr}"
            a = self.b.eltwise(expr, q.shape, q.dtype)
            z = self.ew(self.act(f, self.gate(a, 0)))
            r = self.act(f, self.gate(a, 1))
            hh = self.act(g, f"{self.gate(q, 2)} + {r} * {self.gate(a, 2)}")
        else:
            qzr = self.cols(q, 0, 2 * self.s.hidden)
            a = self.add(self.matmul(hp, self.r[d][0]), qzr)
            z = self.ew(self.act(f, self.gate(a, 0)))
            r = self.act(f, self.gate(a, 1))
            qh = self.cols(q, 2 * self.s.hidden, self.s.hidden)
            rh = hp if hp in self.zero_states else self.ew(f"{r} * {hp}")
            ah = self.add(self.matmul(rh, self.r[d][1]), qh)
            hh = self.act(g, self.ref(ah))
        return self.ew(f"(1 - {z}) * {hh} + {z} * {hp}"), None

    def lstm_cell(self, d: int, q: Value, hp: str, cp: str | None) -> tuple[str, str | None]:
        assert cp is not None
        f, g, h = self.s.acts[d]
        a = self.add(self.matmul(hp, self.r[d][0]), q)
        pi, po, pf = self.peep[d]

        def pre(j: int, peep: str | None, c: str) -> str:
            return self.gate(a, j) if peep is None else f"{self.gate(a, j)} + {peep} * {c}"

        i = self.act(f, pre(0, pi, cp))
        if self.s.input_forget:
            i = self.ew(i)
            fg = f"(1 - {i})"
        else:
            fg = self.act(f, pre(2, pf, cp))
        cc = self.act(g, pre(3, None, cp))
        c = self.ew(f"{fg} * {cp} + {i} * {cc}")
        o = self.act(f, pre(1, po, c))
        return self.ew(f"{o} * {self.act_plain(h, c)}"), c

    # -- cells over blocks of hidden units (unit_block) -------------------------------
    def _unit_shape(self) -> tuple[tuple[int, ...], str, str]:
        """The shape of a step tensor by blocks of units, ``[batch, blocks, B]``
        (``[batch, hidden]`` for one block), with its indices and the hidden
        unit they stand for, as Tile text."""
        s, blk = self.s, self.unit_block
        nb = s.hidden // blk
        if nb > 1:
            return (s.batch, nb, blk), "n, b, u", f"{blk} * b + u"
        return (s.batch, s.hidden), "n, u", "u"

    def _unit_part(self, src: str) -> str:
        """``src`` (Tile text in the indices of :meth:`_unit_shape`) as a step tensor."""
        shape, at, _ = self._unit_shape()
        sizes = ", ".join(str(x) for x in shape)
        text = f"{{out}}[{at} : {sizes}] = =({src})"
        return self.ref(self.b.contraction(text, shape, self.s.dtype))

    def _unit_gate(self, p: Value, k: int) -> str:
        """Gate ``k`` of the product ``p`` by blocks (:meth:`matmul_by_unit`)."""
        col = f"{k * self.unit_block} + u"
        nb = self.s.hidden // self.unit_block
        return self._unit_part(
            f"{self.ref(p)}[n, b, {col}]" if nb > 1 else f"{self.ref(p)}[n, {col}]"
        )

    def _unit_row(self, row: str, k: int) -> str:
        """Gate ``k`` of a gate-major row, by blocks: ``row`` is Tile text with
        ``{}`` where the column goes (``X[5, n, 0, {}]``)."""
        _, _, unit = self._unit_shape()
        return self._unit_part(row.format(f"{k * self.s.hidden} + {unit}"))

    def _unit_ew(self, expr: str) -> str:
        shape, _, _ = self._unit_shape()
        return self.ref(self.b.eltwise(expr, shape, self.s.dtype))

    def _unit_act(self, a: _Act, expr: str) -> str:
        """:meth:`act` for step tensors by blocks."""
        return self.act(a, expr, self._unit_ew)

    def _unit_out(self, h: str) -> str:
        """The new ``h`` (by blocks) as ``[batch, hidden]``."""
        if self.unit_block < self.s.hidden:
            return self._reshaped(h, (self.s.batch, self.s.hidden))
        return h

    def lstm_cell_by_unit(self, d: int, row: str, hp: str, cp: str) -> tuple[str, str]:
        """:meth:`lstm_cell` over ``[batch, blocks, B]`` (``B = unit_block``;
        ``[batch, hidden]`` for one block): the product ``P[n, b, k * B + u]``
        holds gate ``k`` of hidden unit ``b * B + u`` (:meth:`recurrent_by_unit`),
        so the gate math of one block of units reads one block of the product,
        and ``epilogue`` runs it on each finished register tile: one kernel a
        step, split over threads by blocks.  The step's row of the projection
        (gate-major, as computed; ``row``: see :meth:`_unit_row`) is added in the
        gate math, not as the product's epilogue."""
        f, g, h = self.s.acts[d]
        p = self.matmul_by_unit(hp, self.r[d][0])

        def pre(k: int) -> str:
            qk = self._unit_row(row, k)
            return qk if p is None else f"{self._unit_gate(p, k)} + {qk}"

        act, ew = self._unit_act, self._unit_ew
        i = act(f, pre(0))
        if self.s.input_forget:
            i = ew(i)
            fg = f"(1 - {i})"
        else:
            fg = act(f, pre(2))
        cc = act(g, pre(3))
        c = ew(f"{fg} * {cp} + {i} * {cc}")  # cp: kept in this shape (see run)
        o = act(f, pre(1))
        hn = ew(f"{o} * {self.act_plain(h, c)}")
        return self._unit_out(hn), c

    def gru_cell_by_unit(self, d: int, row: str, hp: str) -> str:
        """:meth:`gru_cell` with ``linear_before_reset`` by blocks of units, as
        :meth:`lstm_cell_by_unit`: ``h = g(Xh + r (Hh + Rbh))``, ``z`` and ``r``
        from their product columns plus the projection (which holds their
        biases), the previous ``h`` read by blocks (a view)."""
        f, g = self.s.acts[d]
        p = self.matmul_by_unit(hp, self.r[d][0])
        act, ew = self._unit_act, self._unit_ew
        zr = [self._unit_row(row, k) for k in (0, 1)]
        if p is not None:
            zr = [f"{self._unit_gate(p, k)} + {x}" for k, x in zip((0, 1), zr)]
        z = ew(act(f, zr[0]))
        r = act(f, zr[1])
        rbh = self.rbh[d]
        hpart = self._unit_gate(p, 2) if p is not None else None
        if rbh is not None:
            rb = self.rbh_by_unit.get(d)
            if rb is None:  # once per direction
                rb = self.rbh_by_unit[d] = self._unit_row(f"{rbh}[{{}}]", 2)
            hpart = rb if hpart is None else f"({hpart} + {rb})"
        qh = self._unit_row(row, 2)
        hh = act(g, qh if hpart is None else f"{qh} + {r} * {hpart}")
        if hp in self.zero_states:
            return self._unit_out(ew(f"(1 - {z}) * {hh}"))
        shape, _, _ = self._unit_shape()
        h3 = self._reshaped(hp, shape) if len(shape) == 3 else hp
        return self._unit_out(ew(f"(1 - {z}) * {hh} + {z} * {h3}"))

    def _reshaped(self, name: str, shape: tuple[int, ...]) -> str:
        """The tensor ``name`` (a name :meth:`ref` gave) re-read with ``shape``."""
        return self.ref(reshape(self.b, self.values[name], shape))

    # -- the whole node ---------------------------------------------------------------
    def run(self) -> list[Value | None]:
        s, b, n = self.s, self.b, self.n
        lengths = s.lengths if s.lengths is not None else np.full(s.batch, s.seq, np.int64)
        self.lengths = lengths
        self.copies = s.batch <= _COPIES_UP_TO
        steps = int(lengths.max()) if s.batch else 0
        y_shape = (
            (s.seq, s.dirs, s.batch, s.hidden)
            if s.layout == 0
            else (s.batch, s.seq, s.dirs, s.hidden)
        )
        h_shape = (s.dirs, s.batch, s.hidden) if s.layout == 0 else (s.batch, s.dirs, s.hidden)
        if steps == 0 or s.hidden == 0:
            outs: list[Value | None] = [_zeros(y_shape, s.dtype), _zeros(h_shape, s.dtype)]
            if s.kind == "LSTM":
                outs.append(_zeros(h_shape, s.dtype))
            return outs[: n.n_outputs]
        masked = bool((lengths != steps).any())
        gathered = masked and any(s.reverse)

        # recurrent weights per direction: [hidden, k] blocks of R^T
        gh, hid = self.gh, s.hidden
        self.r: list[list[Value]] = []
        self.rbh: list[str | None] = []  # GRU with linear_before_reset: [0, 0, Rbh]
        self.zr_mask = self.ref(_const(np.arange(gh) < 2 * hid))
        self.peep: list[tuple[str | None, str | None, str | None]] = []
        for d in range(s.dirs):
            if s.kind == "LSTM":
                pv = n.opt(7)
                self.peep.append(
                    (self.vector(pv, d, 0), self.vector(pv, d, hid), self.vector(pv, d, 2 * hid))
                )
        self.unit_block = self._unit_block(masked)
        for d in range(s.dirs):
            if s.kind == "GRU" and not s.linear_before_reset:
                self.r.append([self.recurrent(d, 0, 2 * hid), self.recurrent(d, 2 * hid, gh)])
            elif self.unit_block:
                self.r.append([self.recurrent_by_unit(d)])
            else:
                self.r.append([self.recurrent(d, 0, gh)])
            if s.kind == "GRU" and s.linear_before_reset:
                self.rbh.append(self.reset_bias(d))

        rows = self._input_rows(lengths, steps) if gathered else None
        xb = self.ref(self.projection(steps, rows))
        cell = {"RNN": self.rnn_cell, "GRU": self.gru_cell, "LSTM": self.lstm_cell}[s.kind]

        hs = [self.ref(self.state(n.opt(5), d)) for d in range(s.dirs)]
        if _is_zero(n.opt(5)):
            self.zero_states.update(hs)
        cs: list[str | None] = [None] * s.dirs
        if s.kind == "LSTM":
            cs = [self.ref(self.state(n.opt(6), d)) for d in range(s.dirs)]
            if self.unit_block and self.unit_block < s.hidden:
                # the cell state stays [batch, blocks, B] (lstm_cell_by_unit)
                blocks = (s.batch, s.hidden // self.unit_block, self.unit_block)
                cs = [self._reshaped(c, blocks) for c in cs if c is not None]
        y_rows: list[tuple[str, int, int]] = []  # (value, time, direction)
        for step in range(steps):
            mask = None
            if masked:
                mask = self.ref(_const((step < lengths).reshape(s.batch, 1)))
            for d in range(s.dirs):
                back = s.reverse[d] and not gathered
                t = steps - 1 - step if back else step  # the row of the projection
                if self.unit_block:  # the gates read the projection's row themselves
                    row = f"{xb}[{t}, n, {d}, {{}}]"
                    cp = cs[d]
                    if cp is not None:  # an LSTM
                        h_new, c_new = self.lstm_cell_by_unit(d, row, hs[d], cp)
                    else:
                        h_new, c_new = self.gru_cell_by_unit(d, row, hs[d]), None
                else:
                    q = b.contraction(
                        f"{{out}}[n, g : {s.batch}, {gh}] = =({xb}[{t}, n, {d}, g])",
                        (s.batch, gh),
                        s.dtype,
                    )
                    h_new, c_new = cell(d, q, hs[d], cs[d])
                y_val = h_new
                if mask is not None:
                    y_val = self.ew(f"{mask} ? {h_new} : 0")
                    h_new = self.ew(f"{mask} ? {h_new} : {hs[d]}")
                    if c_new is not None:
                        c_new = self.ew(f"{mask} ? {c_new} : {cs[d]}")
                hs[d], cs[d] = h_new, c_new
                y_rows.append((y_val, t, d))
        y = self._assemble_y(y_rows, gathered)
        if gathered:
            y = self._ordered_output(y, y_shape)
        outs = [y, self._final(hs, lengths, h_shape)]
        if s.kind == "LSTM":
            blocked = self.unit_block if 0 < self.unit_block < s.hidden else 0
            outs.append(self._final(cs, lengths, h_shape, blocked))
        return outs[: n.n_outputs]

    def _ordered_output(self, yp: Value, shape: tuple[int, ...]) -> Value:
        """``Y`` in its layout from the processing-order result ``yp``: up to
        ``_COPIES_UP_TO`` batch entries by ``=`` copies (``yp`` is then
        ``[2 * seq, dirs, batch, hidden]``, the steps from row ``seq`` on; see
        :meth:`_times`), beyond by a ``gather`` (``yp`` ``[seq, dirs, batch,
        hidden]``)."""
        s, b = self.s, self.b
        if not self.copies:
            flat = reshape(b, yp, (s.seq * s.dirs * s.batch, s.hidden))
            idx = self.ref(_const(self._output_rows(self.lengths)))
            return b.statement(f"{{out}} = gather({self.ref(flat)}, {idx}, 0)", shape, s.dtype)
        src = self.ref(yp)

        def copy(d: int, nb: str, time: str, sizes: str) -> str:
            idx = f"t, {d}, {nb}, h" if s.layout == 0 else f"{nb}, t, {d}, h"
            return f"{{out}}[{idx} : {sizes}] = =({src}[{time}, {d}, {nb}, h])"

        out = self._copies(shape, copy)
        return out if out is not None else _zeros(shape, s.dtype)

    def _copies(
        self, shape: tuple[int, ...], copy: Callable[[int, str, str, str], str]
    ) -> Value | None:
        """A chain of ``=`` copies into one value of ``shape``, each the default of
        the next: per direction ``d`` and ``(entry, time)`` pair of :meth:`_times`,
        ``copy(d, entry, time, sizes)`` (its Tile text up to the closing
        parenthesis); None when there is none."""
        s = self.s
        sizes = ", ".join(str(k) for k in shape)
        out: Value | None = None
        for d, back in enumerate(s.reverse):
            for nb, time in self._times(back):
                tail = f", default {out.name}" if out is not None else ""
                out = self.b.contraction(copy(d, nb, time, sizes) + tail, shape, s.dtype)
        return out

    def _assemble_y(self, rows: list[tuple[str, int, int]], gathered: bool) -> Value:
        """``Y`` from each step's ``(value, time, direction)`` (in processing order,
        ``[seq, dirs, batch, hidden]``, when ``gathered``): a chain of ``=``
        copies, each over the previous one (``default``), after the loop.
        ``alias_copy`` makes each step's gate kernel write its row of ``Y`` in
        place, and the next step read it there; the canonical form takes the
        row's offset out, so the steps still share one compiled body.

        After the loop, so that the copies' ``#fill`` kernels (whole-buffer copies
        that ``alias_default`` removes later) come after every gate slice:
        ``alias_view`` would otherwise fold slices among them, and no copy stands
        between a step's state and the next step reading it."""
        s = self.s
        pad = s.seq if gathered and self.copies else 0  # zero rows first: see _times
        if s.layout == 0 or gathered:
            shape = (pad + s.seq, s.dirs, s.batch, s.hidden)
        else:
            shape = (s.batch, s.seq, s.dirs, s.hidden)
        sizes = ", ".join(str(x) for x in shape)
        prev: Value | None = None
        for val, t, d in rows:
            idx = f"{pad + t}, {d}, n, h" if s.layout == 0 or gathered else f"n, {t}, {d}, h"
            tail = f", default {prev.name}" if prev is not None else ""
            prev = self.b.contraction(
                f"{{out}}[{idx} : {sizes}] = =({val}[n, h]){tail}", shape, s.dtype
            )
        assert prev is not None
        return prev

    def _final(
        self,
        states: Sequence[str | None],
        lengths: np.ndarray,
        shape: tuple[int, ...],
        unit: int = 0,
    ) -> Value:
        """``Y_h`` (or ``Y_c``) from each direction's last state; 0 for length 0.
        ``unit``: the states are ``[batch, blocks, unit]`` (an LSTM's cell state
        by blocks of units, never masked), read as ``[batch, hidden]``."""
        s = self.s
        out: Value | None = None
        empty = None
        if (lengths == 0).any():
            empty = self.ref(_const((lengths == 0).reshape(s.batch, 1)))
        sizes = ", ".join(str(x) for x in shape)
        for d, st in enumerate(states):
            assert st is not None
            if empty is not None:
                st = self.ew(f"{empty} ? 0 : {st}")
            h, src = (f"{unit} * b + u", f"{st}[n, b, u]") if unit else ("h", f"{st}[n, h]")
            idx = f"{d}, n, {h}" if s.layout == 0 else f"n, {d}, {h}"
            tail = f", default {out.name}" if out is not None else ""
            out = self.b.contraction(f"{{out}}[{idx} : {sizes}] = =({src}){tail}", shape, s.dtype)
        assert out is not None
        return out

    def _input_rows(self, lengths: np.ndarray, steps: int) -> np.ndarray:
        """The row of X (``[seq * batch, input]`` in its layout) that step ``t`` of
        direction ``d`` reads for batch entry ``n``: ``[steps, batch, dirs]``."""
        s = self.s
        t = np.arange(steps)[:, None, None]
        nb = np.arange(s.batch)[None, :, None]
        rev = np.array(s.reverse)[None, None, :]
        length = lengths[None, :, None]
        time = np.where(rev, np.where(t < length, length - 1 - t, 0), t)
        if s.layout == 0:
            rows = time * s.batch + nb
        else:
            rows = nb * s.seq + time
        return np.broadcast_to(rows, (steps, s.batch, s.dirs)).astype(np.int64)

    def _output_rows(self, lengths: np.ndarray) -> np.ndarray:
        """For each element of Y (``[seq, dirs, batch]`` or ``[batch, seq, dirs]``),
        its row in the processing-order ``[seq * dirs * batch, hidden]`` result; a
        time past the sequence's length reads the last row of its direction
        (zero: masked, or never written)."""
        s = self.s
        t = np.arange(s.seq)[:, None, None]
        d = np.arange(s.dirs)[None, :, None]
        nb = np.arange(s.batch)[None, None, :]
        rev = np.array(s.reverse)[None, :, None]
        length = lengths[None, None, :]
        step = np.where(rev, np.where(t < length, length - 1 - t, s.seq - 1), t)
        rows = (step * s.dirs + d) * s.batch + nb
        rows = np.broadcast_to(rows, (s.seq, s.dirs, s.batch))
        if s.layout == 1:
            rows = rows.transpose(2, 0, 1)
        return np.ascontiguousarray(rows).astype(np.int64)


def _write(b: Builder, n: Node, kind: str) -> list[Value | None]:
    return _Lowering(b, n, _parse(n, kind)).run()


@op("RNN", static=(4,))
def rnn(b: Builder, n: Node) -> list[Value | None]:
    """RNN: all directions, layout, activations (alpha/beta), clip, sequence_lens, initial_h; unrolled in time.

    See the module docstring for the lowering."""
    return _write(b, n, "RNN")


@op("GRU", static=(4,))
def gru(b: Builder, n: Node) -> list[Value | None]:
    """GRU: all directions, layout, activations, clip, linear_before_reset, sequence_lens, initial_h; unrolled in time."""
    return _write(b, n, "GRU")


@op("LSTM", static=(4,))
def lstm(b: Builder, n: Node) -> list[Value | None]:
    """LSTM: all directions, layout, activations, clip, peepholes, input_forget, sequence_lens, initial_h/c; unrolled in time."""
    return _write(b, n, "LSTM")
