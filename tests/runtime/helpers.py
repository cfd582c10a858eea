"""Shared helpers for the interpreter tests, and the memory mappings' flags."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stripeml.errors import StripeError
from stripeml.ir.nodes import Program
from stripeml.runtime.interp import run

MODES = ("general", "fast", "auto")
# The CPU backend runs every program too and must agree with the interpreter:
# scalar code on one thread and 8-lane vector code on two threads (split even
# when a kernel is small, so the threaded path runs on the tests' small sizes).
CPU_VARIANTS = (
    dict(threads=1, vector_width=1),
    dict(threads=2, vector_width=8, min_chunk_work=1 << 10),
)
# What the CPU backend does not compile yet (it says so with a StripeError).
CPU_UNSUPPORTED = ("inside a kernel is not supported",)


def run_cpu(program: Program, inputs, outputs=None, **options):
    """Compile ``program`` for the CPU and run it (None when the backend says it can't)."""
    from stripeml.runtime.cpu import CpuBackend, CpuOptions

    try:
        compiled = CpuBackend(CpuOptions(**options)).compile(program)
    except StripeError as exc:
        if any(m in str(exc) for m in CPU_UNSUPPORTED):
            return None
        raise
    outs = None if outputs is None else {k: v.copy() for k, v in outputs.items()}
    return compiled.run(inputs, outs)


def run_all(program: Program, inputs, outputs=None, rtol=1e-5, atol=1e-5, chunk=True):
    """Run in every mode (and with tiny chunks); check they agree; return the general result."""
    results = []
    variants = [dict(mode=m) for m in MODES]
    if chunk:
        variants.append(dict(mode="general", chunk_points=7))
    for kw in variants:
        outs = None if outputs is None else {k: v.copy() for k, v in outputs.items()}
        results.append(run(program, inputs, outs, **kw))
    for options in CPU_VARIANTS:
        got = run_cpu(program, inputs, outputs, **options)
        if got is not None:
            results.append(got)
            variants.append(dict(target="cpu", **options))
    first = results[0]
    for other, kw in zip(results[1:], variants[1:]):
        assert first.keys() == other.keys()
        for name in first:
            assert other[name].dtype == first[name].dtype, (kw, name)
            # Native math functions may differ from NumPy's in the last bits
            # (their accuracy is tested against NumPy in tests/codegen).
            cpu = kw.get("target") == "cpu"
            np.testing.assert_allclose(
                other[name],
                first[name],
                rtol=max(rtol, 4e-6) if cpu else rtol,
                atol=max(atol, 1e-6) if cpu else atol,
                err_msg=str(kw),
            )
    return first


def smaps_field(address: int, field: str) -> list[str]:
    """The words after ``field:`` in ``/proc/self/smaps`` for the mapping holding
    ``address`` (Linux)."""
    current = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            current = lo <= address < hi
        elif current and line.startswith(f"{field}:"):
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def vm_flags(address: int) -> set[str]:
    """The VmFlags of the mapping holding ``address`` (Linux)."""
    return set(smaps_field(address, "VmFlags"))
