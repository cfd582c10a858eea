"""The verifier's incremental mode shares the work of kernels equal up to names
(:func:`stripeml.ir.verify_memo.shape_key`): a model's repeated layers run only
their block-level and tag rules after the first, and no defect hides behind a
twin (the incremental verdict is the full one, message included)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stripeml.errors import VerifyError
from stripeml.ir import (
    Block,
    Constant,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Special,
    Store,
    parse,
    verifier,
    verify,
)
from stripeml.ir.verify_memo import parent_facts, shape_key

from .samples import SAMPLES

#: The samples holding root kernels.
KERNELS = sorted(n for n, f in SAMPLES.items() if any(isinstance(s, Block) for s in f().root.stmts))


def _renamed(kernel: Block, suffix: str) -> Block:
    """``kernel`` with every refinement, scalar and block name given ``suffix``."""

    def name(n: str) -> str:
        return f"{n}{suffix}" if n else n

    def stmt(t: object) -> object:
        if isinstance(t, Load):
            return Load(name(t.into), name(t.ref))
        if isinstance(t, Store):
            return Store(name(t.ref), name(t.value))
        if isinstance(t, Intrinsic):
            return replace(t, inputs=tuple(map(name, t.inputs)), into=name(t.into))
        if isinstance(t, (Constant, LoadIndex)):
            return replace(t, into=name(t.into))
        if isinstance(t, Special):
            return replace(
                t, inputs=tuple(map(name, t.inputs)), outputs=tuple(map(name, t.outputs))
            )
        assert isinstance(t, Block)
        return block(t)

    def block(b: Block) -> Block:
        refs = tuple(replace(r, into=name(r.into), from_=name(r.from_)) for r in b.refs)
        return replace(b, refs=refs, stmts=tuple(stmt(t) for t in b.stmts), name=name(b.name))

    return block(kernel)


def _doubled(p: Program) -> Program:
    """``p`` with a renamed copy (``_r``) of its root buffers and kernels first."""
    root = p.root
    kernels = [s for s in root.stmts if isinstance(s, Block)]
    refs = tuple(replace(r, into=f"{r.into}_r") for r in root.refs) + root.refs
    stmts = tuple(_renamed(k, "_r") for k in kernels) + root.stmts
    return Program(replace(root, refs=refs, stmts=stmts))


def _verdict(p: Program, seen: dict | None) -> str:
    try:
        verify(p, seen)
    except VerifyError as exc:
        return str(exc)
    return "valid"


@pytest.mark.parametrize("name", KERNELS)
def test_a_renamed_layer_runs_only_block_and_tag_rules(name: str, monkeypatch) -> None:
    p = _doubled(SAMPLES[name]())
    full: list[str] = []
    real = verifier._verify_block

    def counting(scope, seen=None):
        full.append(scope.block.name)
        return real(scope, seen)

    monkeypatch.setattr(verifier, "_verify_block", counting)
    verify(p, {})
    kernels = [s for s in p.root.stmts if isinstance(s, Block)]
    # the root, then each kernel of the first copy once; its twins not at all
    twins = {s.name for s in kernels if not s.name.endswith("_r")}
    assert twins and not twins & set(full[1:]), full
    full.clear()
    verify(p)  # the full mode checks everything
    assert twins <= set(full)


def _bad_scalar(k: Block) -> Block | None:
    """``k`` with its first loaded scalar renamed without its ``$``."""
    for b in [k, *k.sub_blocks]:
        loads = [t for t in b.stmts if isinstance(t, Load)]
        if loads:
            old = loads[0].into
            new_b = _renamed_scalar(b, old, old.lstrip("$") + "x")
            return (
                new_b
                if b is k
                else replace(k, stmts=tuple(new_b if s is b else s for s in k.stmts))
            )
    return None


def _renamed_scalar(b: Block, old: str, new: str) -> Block:
    def sub(n: str) -> str:
        return new if n == old else n

    stmts = []
    for t in b.stmts:
        if isinstance(t, Load):
            t = Load(sub(t.into), t.ref)
        elif isinstance(t, Store):
            t = Store(t.ref, sub(t.value))
        elif isinstance(t, Intrinsic):
            t = replace(t, inputs=tuple(map(sub, t.inputs)))
        stmts.append(t)
    return replace(b, stmts=tuple(stmts))


def test_a_twin_with_a_scalar_without_dollar_still_fails() -> None:
    p = SAMPLES["matmul"]()
    root = p.root
    (k,) = [s for s in root.stmts if isinstance(s, Block)]
    bad = _bad_scalar(k)
    assert bad is not None
    good = _renamed(k, "_r")
    refs = tuple(replace(r, into=f"{r.into}_r") for r in root.refs) + root.refs
    program = Program(replace(root, refs=refs, stmts=(good, bad)))
    facts = parent_facts(bad, verifier.Scope(program.root, None, "root"))
    good_facts = parent_facts(good, verifier.Scope(program.root, None, "root"))
    assert shape_key(bad, facts) != shape_key(good, good_facts)
    with pytest.raises(VerifyError, match="start with '\\$'"):
        verify(program, {})


def test_a_twin_over_a_smaller_root_buffer_still_fails() -> None:
    p = _doubled(SAMPLES["matmul"]())
    root = p.root
    last = root.refs[-1]  # the matmul's output, its second copy
    small = replace(last, shape=replace(last.shape, sizes=(1,) * len(last.shape.sizes)))
    program = Program(replace(root, refs=(*root.refs[:-1], small)))
    with pytest.raises(VerifyError, match="exceed"):
        verify(program, {})


MUTATIONS = (
    "dir", "agg", "offset", "location", "from", "into", "scalar", "block_name", "access", "order",
    "range",
)  # fmt: skip


def _mutate(k: Block, what: str, data: st.DataObject) -> Block:
    blocks = [k, *[b for b in k.sub_blocks]]
    target = data.draw(st.sampled_from(blocks))
    if what == "order":  # a set to the rules: the twin's verdict holds
        new = replace(target, idxs=target.idxs[::-1])
    elif what == "range" and target.idxs:
        i = data.draw(st.sampled_from(target.idxs))
        grown = replace(i, range=i.range + data.draw(st.sampled_from([-1, 1, 7])))
        new = replace(target, idxs=tuple(grown if j is i else j for j in target.idxs))
    elif what == "block_name":
        new = replace(target, name=data.draw(st.sampled_from(["", "a\nb", target.name + "x"])))
    elif what == "scalar":
        got = _bad_scalar(k)
        return got if got is not None else k
    elif not target.refs or what in ("order", "range"):
        return k
    else:
        ref = data.draw(st.sampled_from(target.refs))
        field, values = {
            "dir": ("dir", ["in", "out", "inout", "none"]),
            "agg": ("agg", ["", "assign", "add", "max"]),
            "offset": ("offset", [None, 0, 8, -1]),
            "location": ("location", ["", "DRAM", "L1"]),
            "from": ("from_", ["", ref.from_ + "x", *(r.into for r in target.refs)]),
            "into": ("into", ["", ref.into + "x", *(r.into for r in target.refs)]),
            "access": ("access", [tuple(a + 1 for a in ref.access), ref.access[::-1]]),
        }[what]
        new_ref = replace(ref, **{field: data.draw(st.sampled_from(values))})
        new = replace(target, refs=tuple(new_ref if r is ref else r for r in target.refs))
    if target is k:
        return new
    return replace(k, stmts=tuple(new if s is target else s for s in k.stmts))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(KERNELS), st.sampled_from(MUTATIONS), st.data())
def test_incremental_verdict_is_the_full_verdict(name: str, what: str, data: st.DataObject):
    """A renamed valid layer first, then the layer with one field changed (names
    included): verified incrementally, the verdict and message are the full mode's."""
    p = _doubled(SAMPLES[name]())
    root = p.root
    i = data.draw(st.sampled_from([n for n, s in enumerate(root.stmts) if isinstance(s, Block)]))
    k = root.stmts[i]
    assert isinstance(k, Block)
    if k.name.endswith("_r"):  # mutate an original kernel, after its renamed twin
        i = root.stmts.index(next(s for s in root.stmts if s.name == k.name[:-2]))
        k = root.stmts[i]
    mutated = _mutate(k, what, data)
    program = Program(replace(root, stmts=(*root.stmts[:i], mutated, *root.stmts[i + 1 :])))
    assert _verdict(program, {}) == _verdict(program, None)


TILED = """\
block main [] #program (
    in A f32(4, 8):(8, 1)
    out B f32(4, 8):(8, 1)
) {
  block k [t:2] #kernel (
      in A[2*t, 0] f32(2, 8):(8, 1)
      out B[2*t, 0]:assign f32(2, 8):(8, 1)
  ) {
    block tile [i:2, j:8] (
        in A[i, j] f32(1, 1):(8, 1)
        out B[i, j]:assign f32(1, 1):(8, 1)
    ) {
      $a = load(A)
      B = store($a)
    }
  }
}
"""


def _inner_reordered(block: Block) -> Block:
    """``block`` with the indices of every block nested in it reversed (what
    ``vectorize`` does to a tiled kernel's register tiles), as new objects."""
    stmts = tuple(
        replace(_inner_reordered(s), idxs=s.idxs[::-1]) if isinstance(s, Block) else s
        for s in block.stmts
    )
    return replace(block, stmts=stmts)


def test_a_kernel_whose_inner_blocks_were_reordered_runs_only_block_and_tag_rules(
    monkeypatch,
) -> None:
    p = parse(TILED)
    seen: dict = {}
    verify(p, seen)
    root = p.root
    moved = Program(
        replace(
            root,
            stmts=tuple(_inner_reordered(s) if isinstance(s, Block) else s for s in root.stmts),
        )
    )
    assert moved != p
    full: list[str] = []
    real = verifier._verify_block

    def counting(scope, seen=None):
        full.append(scope.block.name)
        return real(scope, seen)

    monkeypatch.setattr(verifier, "_verify_block", counting)
    verify(moved, seen)
    assert len(full) == 1, full  # the root only
    assert _verdict(moved, None) == "valid"
