"""Shared by the tuning tests: a small program, an isolated cache, a wrong pass."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Block, Intrinsic, Program, Statement
from stripeml.passes._kernel_choices import tuning_point
from stripeml.passes.manager import run_pipeline
from stripeml.tile.bind import signature_of

MATMUL = """
function (A[M, K], B[K, N]) -> (C) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
}
"""


def matmul_inputs(m: int = 48, k: int = 64, n: int = 96) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (
        rng.standard_normal((m, k)).astype(np.float32),
        rng.standard_normal((k, n)).astype(np.float32),
    )


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder (and so a fresh tuning database) for one test."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(folder))
    return folder


def compile_matmul() -> stripeml.api.Function:
    return stripeml.compile(MATMUL, target="cpu", threads=2)


def _mul_to_add(stmts: tuple[Statement, ...]) -> tuple[Statement, ...]:
    out: list[Statement] = []
    for s in stmts:
        if isinstance(s, Intrinsic) and s.op == "mul":
            s = replace(s, op="add")
        elif isinstance(s, Block):
            s = replace(s, stmts=_mul_to_add(s.stmts))
        out.append(s)
    return tuple(out)


def wrong_when(cls: type, option: str, value: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make pass ``cls`` compute something else (``a + b`` for ``a * b``) when its
    ``option`` is ``value``: a candidate a correct search must throw away."""
    original = cls.run

    def run(self, program: Program) -> Program:
        done = original(self, program)
        if getattr(self, option) == value:
            return Program(replace(done.root, stmts=_mul_to_add(done.root.stmts)))
        return done

    monkeypatch.setattr(cls, "run", run)


def root_kernels(program: Program) -> list[Block]:
    """The root blocks of ``program``, in order."""
    return [s for s in program.root.stmts if isinstance(s, Block)]


def through_point(f: stripeml.api.Function, inputs: list[np.ndarray]) -> tuple:
    """``f``'s passes, its lowered program for ``inputs``, and that program at
    the tuning point (the input of the first pass with tunable options)."""
    passes = f.target.passes
    program = f.lowered(signature_of(inputs))
    return passes, program, run_pipeline(program, passes[: tuning_point(passes)]).program
