"""A root kernel in canonical form: the key that decides whether two kernels can
share one compiled function.

Layers of a model repeat kernels that differ only in names: the buffers they
read and write (``T18`` in one layer, ``T24`` in the next), their views'
and scalars' names, block names and comments.  None of those changes the
machine code, so :func:`canonical_kernel` renames them all, in order of first
appearance:

* the root buffers the kernel refines (its parameters, in the order of
  :func:`kernel_buffers`) become ``b0``, ``b1`` ... in a root block that
  holds only them, with their dtype, sizes and strides.  Whether a root buffer
  is a parameter, a result or a temporary, its arena offset, location and
  ``const`` mark are the runtime's business, not the kernel's: the code
  generator reads a root buffer's dtype only (the kernel's views carry their
  own shapes), so those are set to one value (``none``, no offset);
* every refinement of the kernel and its nested blocks becomes ``r0``,
  ``r1`` ..., every scalar ``s0``, ``s1`` ..., the kernel ``k`` and the
  blocks inside it ``k1``, ``k2`` ...; comments are dropped;
* a positive constant term of a kernel refinement's access to a root buffer
  (``T6[10, n, 0, g]``: the row of step 10) is taken out, the smallest one in
  each dimension over the kernel's refinements of that buffer, when those share
  their strides: ``T6[n, 0, g]`` at ``b0`` and a byte offset of ``10 * 512 * 4``
  in :attr:`CanonicalKernel.offsets`, which the caller adds to the buffer's
  address.  The steps of an unrolled loop, reading and writing rows of one
  buffer, then share one body.  Only element-multiples move, so every access
  keeps its alignment (the code aligns loads and stores to an element).

Index names, tags, shapes, accesses, constraints, constants and every other
field are kept as they are: kernels that differ in any of them get different
keys (a kernel whose indices are named differently only misses a chance to
share).  The code generated from the canonical kernel is therefore the code of
every kernel with the same :attr:`CanonicalKernel.text`, up to the names of
its buffers, which the caller passes in :attr:`CanonicalKernel.buffers`
order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..ir.dtypes import itemsize
from ..ir.nodes import (
    Block,
    Constant,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Refinement,
    Special,
    Statement,
    Store,
)
from ..ir.printer import format_block

__all__ = ["CanonicalKernel", "canonical_kernel", "kernel_buffers"]


def kernel_buffers(kernel: Block) -> tuple[str, ...]:
    """The root buffers ``kernel`` refines, in first-use order: its parameters."""
    used: list[str] = []
    for r in kernel.refs:
        if r.from_ and r.from_ not in used:
            used.append(r.from_)
    return tuple(used)


@dataclass(frozen=True, slots=True)
class CanonicalKernel:
    """``program``: a root holding the renamed buffers and the renamed kernel;
    ``buffers``: the original root buffer names, ``b0`` first; ``text``: the
    program's Stripe text, what compiled code is keyed on."""

    program: Program
    buffers: tuple[str, ...]
    text: str
    #: per buffer, bytes to add to its address (constant offsets taken out)
    offsets: tuple[int, ...] = ()

    @property
    def kernel(self) -> Block:
        stmt = self.program.root.stmts[0]
        assert isinstance(stmt, Block)
        return stmt


class _Renamer:
    def __init__(self) -> None:
        self.refs = 0
        self.scalars = 0
        self.blocks = 0

    def block(self, blk: Block, outer: dict[str, str], top: bool) -> Block:
        names: dict[str, str] = {}  # this block's refinements
        refs = []
        for r in blk.refs:
            new = f"r{self.refs}"
            self.refs += 1
            source = outer.get(r.from_, r.from_) if r.from_ else ""
            refs.append(replace(r, into=new, from_=source))
            names[r.into] = new
        scope = {**outer, **names}
        scalars: dict[str, str] = {}
        stmts = tuple(self.stmt(s, scope, scalars) for s in blk.stmts)
        name = "k" if top else f"k{self.blocks}"
        return replace(blk, refs=tuple(refs), stmts=stmts, name=name, comment="")

    def scalar(self, name: str, scalars: dict[str, str]) -> str:
        new = scalars.get(name)
        if new is None:
            new = scalars[name] = f"s{self.scalars}"
            self.scalars += 1
        return new

    def stmt(self, s: Statement, refs: dict[str, str], scalars: dict[str, str]) -> Statement:
        if isinstance(s, Block):
            self.blocks += 1
            return self.block(s, refs, top=False)
        if isinstance(s, Load):
            return replace(s, into=self.scalar(s.into, scalars), ref=refs.get(s.ref, s.ref))
        if isinstance(s, Store):
            return replace(s, ref=refs.get(s.ref, s.ref), value=self.scalar(s.value, scalars))
        if isinstance(s, LoadIndex | Constant):
            return replace(s, into=self.scalar(s.into, scalars))
        if isinstance(s, Intrinsic):
            inputs = tuple(self.scalar(x, scalars) for x in s.inputs)
            return replace(s, inputs=inputs, into=self.scalar(s.into, scalars))
        if isinstance(s, Special):
            inputs = tuple(refs.get(x, x) for x in s.inputs)
            outputs = tuple(refs.get(x, x) for x in s.outputs)
            return replace(s, inputs=inputs, outputs=outputs)
        raise TypeError(f"unknown statement {type(s).__name__}")


#: The root asked about last and its refinements by name: callers ask about every
#: kernel of one root in turn, and a model's root holds hundreds of buffers.
_ROOT_REFS: tuple[Block, dict[str, Refinement]] | None = None


def _root_refs(root: Block) -> dict[str, Refinement]:
    """``root``'s refinements by name (the first of a name, as ``Block.ref``)."""
    global _ROOT_REFS
    last = _ROOT_REFS
    if last is not None and last[0] is root:
        return last[1]
    refs: dict[str, Refinement] = {}
    for r in root.refs:
        refs.setdefault(r.into, r)
    _ROOT_REFS = (root, refs)
    return refs


def canonical_kernel(root: Block, kernel: Block) -> CanonicalKernel:
    """``kernel`` (a root statement of ``root``) with every name that does not
    change its code replaced by a canonical one (see the module docstring).
    Kept for the kernels of the last two roots asked about (:func:`_texts`):
    the code generator and then the first run (the runtime's shared
    constants) both ask for every kernel of a program."""
    done = _texts(root)[1]
    hit = done.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    made = _from_copy(root, kernel) or _canonical(root, kernel)
    done[id(kernel)] = (kernel, made)
    return made


#: Kernels that are renamings of another kernel of their program (the copies of a
#: repeated layer, :mod:`stripeml.passes._replicate`): per program noted, the
#: copy's id -> (the copy, the kernel it copies); the last two programs' kept.
_COPIES: tuple[dict[int, tuple[Block, Block]], ...] = ()


def note_copies(pairs: list[tuple[Block, Block]]) -> None:
    """Note that each ``(copy, source)`` of ``pairs`` is ``source`` with its names
    changed, root buffers included (a root buffer of the copy has the dtype,
    sizes and strides of the source's buffer it stands for, which
    :func:`canonical_kernel` checks): their canonical forms differ only in
    :attr:`CanonicalKernel.buffers`, so the copy's is made from the source's."""
    global _COPIES
    _COPIES = (*_COPIES[-1:], {id(c): (c, s) for c, s in pairs})


def _from_copy(root: Block, kernel: Block) -> CanonicalKernel | None:
    """``kernel``'s canonical form from the kernel it copies (:func:`note_copies`),
    or None when it is not a noted copy."""
    for noted in _COPIES:
        hit = noted.get(id(kernel))
        if hit is None or hit[0] is not kernel:
            continue
        source = canonical_kernel(root, hit[1])
        used = kernel_buffers(kernel)
        refs = _root_refs(root)
        if len(used) != len(source.buffers):
            return None
        for mine, theirs in zip(used, source.buffers):
            a, b = refs.get(mine), refs.get(theirs)
            if a is None or b is None or a.shape != b.shape:
                return None
        return CanonicalKernel(source.program, used, source.text, source.offsets)
    return None


def _canonical(root: Block, kernel: Block) -> CanonicalKernel:
    used = kernel_buffers(kernel)
    params = {name: f"b{n}" for n, name in enumerate(used)}
    refs = _root_refs(root)
    buffers = tuple(Refinement("none", params[name], refs[name].shape) for name in used)
    kernel, offsets = _hoisted(kernel, used, refs)
    renamed = _Renamer().block(kernel, params, top=True)
    mini = Program(replace(root, refs=buffers, stmts=(renamed,), name="canonical", comment=""))
    # the text ``format`` gives, printed without taking the printer's memo of the
    # last program (the whole program's text, which its cache key and the
    # executable's ``ir`` both ask for after the code generator asked here);
    # printed once per distinct canonical kernel of a program (a model's layers)
    texts = _texts(root)[0]
    text = texts.get(mini.root)
    if text is None:
        text = texts[mini.root] = format_block(mini.root) + "\n"
    return CanonicalKernel(mini, used, text, offsets)


_Done = dict[int, tuple[Block, CanonicalKernel]]
#: (root, its kernels' texts, its kernels' canonical forms) of the last two roots
#: asked about, the latest last
_TEXTS: tuple[tuple[Block, dict[Block, str], _Done], ...] = ()


def _texts(root: Block) -> tuple[dict[Block, str], _Done]:
    """The canonical kernels of program ``root`` printed so far, by kernel (equal
    IR values, so equal text), and the canonical forms made so far, by the
    kernel's identity (the kernel kept beside, so its id is not reused): kept
    for the last two roots asked about (a second input shape's first run asks
    about the first's kernels, and then its own, which its code generator
    asked about before)."""
    global _TEXTS
    kept = _TEXTS or ()  # (a test empties it with None)
    if kept and kept[-1][0] is root:
        return kept[-1][1], kept[-1][2]
    for entry in kept:
        if entry[0] is root:
            _TEXTS = (*(e for e in kept if e is not entry), entry)
            return entry[1], entry[2]
    entry = (root, {}, {})
    _TEXTS = (*kept[-1:], entry)
    return entry[1], entry[2]


def _hoisted(
    kernel: Block, used: tuple[str, ...], roots: dict[str, Refinement]
) -> tuple[Block, tuple[int, ...]]:
    """``kernel`` with the positive constant terms its refinements of each root
    buffer share taken out of their accesses (see the module docstring), and
    the byte offset taken out of each buffer of ``used``."""
    kernel = _pushed_up(kernel)
    mins: dict[str, list[int] | None] = {}
    strides: dict[str, tuple[int, ...]] = {}
    for r in kernel.refs:
        if not r.from_:
            continue
        if len(r.access) != len(r.shape.strides):
            mins[r.from_] = None
            continue
        seen = strides.setdefault(r.from_, r.shape.strides)
        low = mins.setdefault(r.from_, [a.const for a in r.access])
        if seen != r.shape.strides or low is None:
            mins[r.from_] = None
            continue
        for d, a in enumerate(r.access):
            low[d] = min(low[d], a.const)
    offsets: list[int] = []
    moved: dict[str, list[int]] = {}
    for name in used:
        low = mins.get(name)
        size = itemsize(roots[name].shape.dtype)
        if low is None or not any(c > 0 for c in low) or int(size) != size:
            offsets.append(0)
            continue
        cut = [max(0, c) for c in low]
        moved[name] = cut
        offsets.append(sum(c * st for c, st in zip(cut, strides[name])) * int(size))
    if not moved:
        return kernel, tuple(offsets)
    refs = tuple(
        replace(r, access=tuple(a - c for a, c in zip(r.access, moved[r.from_])))
        if r.from_ in moved
        else r
        for r in kernel.refs
    )
    return replace(kernel, refs=refs), tuple(offsets)


def _pushed_up(kernel: Block) -> Block:
    """``kernel`` with the positive constant terms shared by every nested view of
    one of its root-buffer views moved up into that view's access (the nested
    blocks' addresses are the same): a register tile's epilogue that reads the
    step's row ``r4[30, n, 1, g]`` of a view ``r4[0, 0, 0, 0]`` reads
    ``r4[0, n, 1, g]`` of ``r4[30, 0, 0, 0]``, whose constant :func:`_hoisted`
    then takes out.  Not for a view the kernel loads, stores or hands to a
    special itself, nor when a nested view has another rank or other strides."""
    direct: set[str] = set()
    children: list[Block] = []
    for s in kernel.stmts:
        if isinstance(s, Block):
            children.append(s)
        elif isinstance(s, Load | Store):
            direct.add(s.ref)
        elif isinstance(s, Special):
            direct.update((*s.inputs, *s.outputs))
    if not children:
        return kernel
    shifts: dict[str, list[int]] = {}
    for r in kernel.refs:
        if not r.from_ or r.into in direct:
            continue
        subs = [c for b in children for c in b.refs if c.from_ == r.into]
        rank = len(r.access)
        if not subs or any(
            len(c.access) != rank or c.shape.strides != r.shape.strides for c in subs
        ):
            continue
        low = [max(0, min(c.access[d].const for c in subs)) for d in range(rank)]
        if any(low):
            shifts[r.into] = low
    if not shifts:
        return kernel
    refs = tuple(
        replace(r, access=tuple(a + c for a, c in zip(r.access, shifts[r.into])))
        if r.into in shifts
        else r
        for r in kernel.refs
    )
    stmts = tuple(
        replace(
            s,
            refs=tuple(
                replace(c, access=tuple(a - m for a, m in zip(c.access, shifts[c.from_])))
                if c.from_ in shifts
                else c
                for c in s.refs
            ),
        )
        if isinstance(s, Block)
        else s
        for s in kernel.stmts
    )
    return replace(kernel, refs=refs, stmts=stmts)
