"""The pass manager's verification: incremental by default, the whole program after
every pass with STRIPEML_VERIFY=all; a pass that breaks the IR is caught either way."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pytest

import stripeml
from stripeml import api
from stripeml.errors import StripeError, VerifyError
from stripeml.ir import verifier
from stripeml.ir.affine import Affine
from stripeml.ir.nodes import Block, Program
from stripeml.passes import Fuse
from stripeml.passes.manager import run_pipeline

SOURCE = """function (A[N], B[N]) -> (C, D) {
    C = A + B;
    D = A * B;
}"""


def _program() -> Program:
    n = np.zeros(8, np.float32)
    return stripeml.compile(SOURCE, target="interp").lower(n, n).program


@dataclass(frozen=True)
class ShiftView:
    """A broken pass: the first kernel's first view reads one element too far."""

    name: ClassVar[str] = "shift_view"

    def run(self, program: Program) -> Program:
        root = program.root
        stmts = list(root.stmts)
        k = next(n for n, s in enumerate(stmts) if isinstance(s, Block))
        kernel = stmts[k]
        assert isinstance(kernel, Block)
        ref = kernel.refs[0]
        moved = replace(ref, access=(ref.access[0] + Affine.constant(1), *ref.access[1:]))
        stmts[k] = replace(kernel, refs=(moved, *kernel.refs[1:]))
        return Program(replace(root, stmts=tuple(stmts)))


@dataclass(frozen=True)
class ShrinkBuffer:
    """A broken pass that leaves every kernel alone: it halves a root buffer, so the
    (unchanged) kernels that view it now read past its end."""

    name: ClassVar[str] = "shrink_buffer"

    def run(self, program: Program) -> Program:
        root = program.root
        refs = list(root.refs)
        a = next(n for n, r in enumerate(refs) if r.into == "A")
        shape = refs[a].shape
        refs[a] = replace(refs[a], shape=replace(shape, sizes=(shape.sizes[0] // 2,)))
        return Program(replace(root, refs=tuple(refs)))


@pytest.mark.parametrize("verify_all", [False, True])
@pytest.mark.parametrize("bad", [ShiftView(), ShrinkBuffer()], ids=lambda p: p.name)
def test_a_pass_that_breaks_bounds_is_caught(verify_all: bool, bad: object) -> None:
    program = _program()
    run_pipeline(program, [Fuse()], verify_all=verify_all)  # a good pipeline passes
    with pytest.raises(VerifyError, match="exceed|differ|negative"):
        run_pipeline(program, [Fuse(), bad], verify_all=verify_all)  # type: ignore[list-item]


def test_incremental_verification_skips_what_no_pass_changed(monkeypatch) -> None:
    program = _program()
    checked: list[str] = []
    real = verifier._verify_block

    def counting(scope, seen=None):
        checked.append(scope.block.name)
        return real(scope, seen)

    monkeypatch.setattr(verifier, "_verify_block", counting)

    @dataclass(frozen=True)
    class Rename:
        """Changes nothing a kernel sees: a new root block object, same kernels."""

        name: ClassVar[str] = "rename"

        def run(self, program: Program) -> Program:
            return Program(replace(program.root, comment="renamed"))

    kernels = sum(1 for s in program.root.stmts if isinstance(s, Block))
    run_pipeline(program, [Rename()], verify_all=False)
    assert len(checked) == 2 + kernels, checked  # two roots, each kernel once
    checked.clear()
    run_pipeline(program, [Rename()], verify_all=True)
    assert len(checked) == 2 + 2 * kernels  # every kernel after every pass


def test_the_environment_chooses_the_mode(monkeypatch) -> None:
    seen: list[bool] = []
    from stripeml.passes import manager

    real = manager.run_pipeline

    def spy(program, passes, **kw):
        seen.append(kw["verify_all"])
        return real(program, passes, **kw)

    monkeypatch.setattr(manager, "run_pipeline", spy)
    n = np.ones(4, np.float32)
    for value, want in (("all", True), ("changed", False), ("", False)):
        monkeypatch.setenv(api.VERIFY_VARIABLE, value)
        c, d = stripeml.compile(SOURCE, target="interp")(n, n * 2)
        np.testing.assert_array_equal(c, n * 3)
        np.testing.assert_array_equal(d, n * 2)
        assert seen[-1] is want
    monkeypatch.setenv(api.VERIFY_VARIABLE, "sometimes")
    with pytest.raises(StripeError, match="STRIPEML_VERIFY"):
        stripeml.compile(SOURCE, target="interp")(n, n)


@dataclass(frozen=True)
class Retag:
    """Reverses each kernel's indices and adds ``tag``: what ``thread`` and
    ``vectorize`` do to most kernels."""

    tag: str
    name: ClassVar[str] = "retag"

    def run(self, program: Program) -> Program:
        stmts = tuple(
            replace(s, idxs=s.idxs[::-1], tags=s.tags | {self.tag}) if isinstance(s, Block) else s
            for s in program.root.stmts
        )
        return Program(replace(program.root, stmts=stmts))


def test_a_reordered_retagged_kernel_runs_only_its_block_and_tag_rules(monkeypatch) -> None:
    program = _program()
    full: list[str] = []
    only: list[str] = []
    real_full, real_only = verifier._verify_block, verifier._verify_block_only

    def counting_full(scope, seen=None):
        full.append(scope.block.name)
        return real_full(scope, seen)

    def counting_only(scope):
        only.append(scope.block.name)
        return real_only(scope)

    monkeypatch.setattr(verifier, "_verify_block", counting_full)
    monkeypatch.setattr(verifier, "_verify_block_only", counting_only)
    kernels = sum(1 for s in program.root.stmts if isinstance(s, Block))
    run_pipeline(program, [Retag("thread")], verify_all=False)
    assert len(full) == 2 + kernels and len(only) == kernels  # two roots, each kernel once
    full.clear()
    only.clear()
    run_pipeline(program, [Retag("thread")], verify_all=True)
    assert len(full) == 2 + 2 * kernels and not only
    with pytest.raises(VerifyError, match="undeclared tag #bogus"):
        run_pipeline(program, [Retag("bogus")], verify_all=False)


@dataclass(frozen=True)
class Unplace:
    """A broken pass that leaves every kernel alone: a root temporary loses its
    memory location."""

    name: ClassVar[str] = "unplace"

    def run(self, program: Program) -> Program:
        root = program.root
        refs = tuple(replace(r, location="") if r.into == "C" else r for r in root.refs)
        return Program(replace(root, refs=refs))


@pytest.mark.parametrize("verify_all", [False, True])
def test_a_changed_root_refinement_is_verified_again(verify_all: bool) -> None:
    with pytest.raises(VerifyError, match="ref 'C': empty memory location"):
        run_pipeline(_program(), [Fuse(), Unplace()], verify_all=verify_all)
