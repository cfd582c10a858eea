"""``thread`` decides kernels equal up to names once, from a key built without
printing IR (:func:`stripeml.passes.thread.choice_key`); kernels that differ in
anything the choice reads (which buffers alias, an access) are decided apart,
and every marked index is race-free (brute force) with the interpreter's
results unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from stripeml.analysis import canonical
from stripeml.ir import Block, parse, printer
from stripeml.passes import thread as thread_module
from stripeml.passes.manager import run_pipeline
from stripeml.passes.thread import Thread, choice_key
from stripeml.runtime.interp import run

from .helpers import checker

try:
    from analysis.brute import brute_race_free_nested  # tests/analysis/brute.py
except ImportError:  # tests/ imported as a package
    from tests.analysis.brute import brute_race_free_nested

# Two layers equal up to names (k0/k1), then two kernels of one shape that differ
# in aliasing: k2 reads and writes two buffers, k3 shifts one buffer in place
# (its point i reads what point i + 1 writes: only j is race-free).
SOURCE = """\
block layers [] #program (
    in A f32(4, 8):(8, 1)
    in W f32(8):(1)
    none T f32(4, 8):(8, 1)
    none U f32(4, 9):(9, 1)
    out V f32(4, 8):(8, 1)
    out Y f32(5, 9):(9, 1)
) {
  block k0_T [i:4, j:8] #eltwise #kernel (
      in A[i, j] f32(1, 1):(8, 1)
      in W[j] f32(1):(1)
      out T[i, j]:assign f32(1, 1):(8, 1)
  ) {
    $A = load(A)
    $W = load(W)
    $1 = mul($A, $W): f32
    T = store($1)
  }
  block k1_V [i:4, j:8] #eltwise #kernel (
      in T[i, j] f32(1, 1):(8, 1)
      in W[j] f32(1):(1)
      out V[i, j]:assign f32(1, 1):(8, 1)
  ) {
    $T = load(T)
    $W = load(W)
    $2 = mul($T, $W): f32
    V = store($2)
  }
  block k2_U [i:4, j:8] #eltwise #kernel (
      in A[i, j] f32(1, 1):(8, 1)
      out U[i, j]:assign f32(1, 1):(9, 1)
  ) {
    $x = load(A)
    U = store($x)
  }
  block k3_Y [i:4, j:8] #eltwise #kernel (
      in Y0 = Y[i + 1, j] f32(1, 1):(9, 1)
      out Y[i, j]:assign f32(1, 1):(9, 1)
  ) {
    $x = load(Y0)
    Y = store($x)
  }
}
"""


def test_layers_equal_up_to_names_share_a_key_aliasing_does_not() -> None:
    root = parse(SOURCE).root
    k0, k1, k2, k3 = (s for s in root.stmts if isinstance(s, Block))
    assert choice_key(k0) == choice_key(k1)
    assert choice_key(k2) != choice_key(k3)  # Y read and written: another key
    assert hash(choice_key(k0)) == hash(choice_key(k1))


def test_thread_decides_each_distinct_kernel_once_without_printing(monkeypatch) -> None:
    program = parse(SOURCE)
    asked: list[str] = []
    real = thread_module.choose_thread_index

    def counting(block, threads, line=0):
        asked.append(block.name)
        return real(block, threads, line)

    def no_printing(*args, **kwargs):
        raise AssertionError("thread printed IR to decide")

    monkeypatch.setattr(thread_module, "choose_thread_index", counting)
    monkeypatch.setattr(printer, "format_block", no_printing)
    monkeypatch.setattr(canonical, "format_block", no_printing)  # its canonical form
    inputs = {"A": np.arange(32, dtype=np.float32).reshape(4, 8), "W": np.ones(8, np.float32)}
    out = Thread(threads=2).run(program)
    assert asked == ["k0_T", "k2_U", "k3_Y"]  # k1 is k0 up to names
    monkeypatch.undo()
    expected = run(program, inputs)
    check = checker(inputs, expected)
    run_pipeline(program, [Thread(threads=2)], check=check)
    marked = {s.name: s for s in out.root.stmts if isinstance(s, Block) and "thread" in s.tags}
    assert set(marked) == {"k0_T", "k1_V", "k2_U", "k3_Y"}
    for k in marked.values():
        assert k.idxs[0].name in brute_race_free_nested(k), k.name
    assert marked["k3_Y"].idxs[0].name == "j"  # i races in place
    assert marked["k0_T"].idxs[0].name == marked["k1_V"].idxs[0].name


@pytest.mark.parametrize("field", ["access", "scalar", "constant"])
def test_kernels_differing_beyond_names_get_other_keys(field: str) -> None:
    root = parse(SOURCE).root
    k0 = next(s for s in root.stmts if isinstance(s, Block))
    text = SOURCE
    if field == "access":
        other = text.replace("in W[j] f32(1):(1)\n      out T", "in W[0] f32(1):(1)\n      out T")
    elif field == "scalar":  # one scalar used twice where k0 uses two
        other = text.replace("$1 = mul($A, $W): f32", "$1 = mul($A, $A): f32")
    else:
        other = text.replace(
            "    $1 = mul($A, $W): f32\n    T = store($1)",
            "    $c = const(1.0): f32\n    $1 = mul($A, $c): f32\n    T = store($1)",
        )
    changed = next(s for s in parse(other).root.stmts if isinstance(s, Block))
    assert changed != k0
    assert choice_key(changed) != choice_key(k0)


CUBE = """\
block cube [] #program (
    in A f32(4, 4, 8):(32, 8, 1)
    out O f32(4, 4, 8):(32, 8, 1)
) {
  block k0_O [a:4, b:4, c:8] #eltwise #kernel (
      in A[a, b, c] f32(1, 1, 1):(32, 8, 1)
      out O[a, b, c]:assign f32(1, 1, 1):(32, 8, 1)
  ) {
    $A = load(A)
    O = store($A)
  }
}
"""


def test_a_kernel_s_accesses_are_traced_once_for_all_its_candidates(monkeypatch) -> None:
    """``a`` and ``b`` both split evenly (``c`` is the written unit stride): their
    chunks' bytes come from one tracing of the kernel's accesses, and the choice
    is race-free with the interpreter's results unchanged."""
    program = parse(CUBE)
    traced: list[str] = []
    real = thread_module.accesses

    def counting(block):
        traced.append(block.name)
        return real(block)

    monkeypatch.setattr(thread_module, "accesses", counting)
    out = Thread(threads=2).run(program)
    assert traced == ["k0_O"]
    monkeypatch.undo()
    (k,) = [s for s in out.root.stmts if isinstance(s, Block)]
    assert "thread" in k.tags and k.idxs[0].name in brute_race_free_nested(k)
    a = np.arange(128, dtype=np.float32).reshape(4, 4, 8)
    np.testing.assert_array_equal(run(out, {"A": a})["O"], a)
