"""The C printers' bitwise operations, shifts and bit casts have no undefined
behaviour and give NumPy's values, in both dialects.

C leaves a shift by the width or more undefined (OpenCL masks the amount, so a
GPU would give ``x << (n % width)``), and a left shift of a negative signed
value, or one into the sign bit, undefined too; NumPy defines every amount
(0, or -1 for ``>>`` of a negative value, from the width on; a negative
amount counts as huge).  As in ``test_cstyle_division.py``, the expressions
and helpers the printers make are built with the host's C compiler under
UndefinedBehaviorSanitizer (any UB aborts), run on every pair of edge
operands and shift amounts, and compared with NumPy; and NVRTC compiles the
CUDA of whole programs.  Skipped when no C compiler with
``-fsanitize=undefined`` is found.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.codegen.cuda import CudaStyle
from stripeml.codegen.opencl import OpenCLStyle

try:
    from test_cstyle_division import PRELUDE, _c_literal, _compiler

    from test_bitwise import shift_amounts
    from test_int_division import INT_DTYPES, edges
except ImportError:  # tests/ imported as a package
    from tests.codegen.test_cstyle_division import PRELUDE, _c_literal, _compiler
    from tests.test_bitwise import shift_amounts
    from tests.test_int_division import INT_DTYPES, edges

STYLES = {"opencl": OpenCLStyle(), "cuda": CudaStyle()}
SHORT = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
         "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}  # fmt: skip
BINARY = {"bit_and": np.bitwise_and, "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor,
          "shl": np.left_shift, "shr": np.right_shift}  # fmt: skip


def _program(dialect: str) -> tuple[str, list[tuple[str, str, int, int]]]:
    """A C program printing ``op(a, b)`` for every op, dtype and operand pair."""
    style = STYLES[dialect]
    helpers: dict[str, str] = {}

    def need(kind: str, dt: str, src: str = "") -> str:
        name, text = style.helper(kind, dt, src)
        helpers.setdefault(name, text)
        return name

    defs, calls, rows = [], [], []
    for dtype in INT_DTYPES:
        dt = SHORT[dtype]
        t = style.ctype(dt)
        for op in (*BINARY, "bit_not"):
            args = ["a"] if op == "bit_not" else ["a", "b"]
            expr = style.intrinsic(op, args, [dt] * len(args), dt, need)
            params = ", ".join(f"{t} {a}" for a in args)
            defs.append(f"static {t} f_{op}_{dt}({params}) {{ return {expr}; }}")
        values = [int(v) for v in edges(dtype).tolist()]
        amounts = [int(v) for v in shift_amounts(dtype).tolist()]
        for op in (*BINARY, "bit_not"):
            for a in values:
                for b in (
                    amounts if op in ("shl", "shr") else values[:1] if op == "bit_not" else values
                ):
                    lit = f"({t}){_c_literal(dtype, a)}"
                    call = f"f_{op}_{dt}({lit})" if op == "bit_not" else (
                        f"f_{op}_{dt}({lit}, ({t}){_c_literal(dtype, b)})"
                    )  # fmt: skip
                    calls.append(f'    printf("%lld %llu\\n", (long long){call}, '
                                 f"(unsigned long long){call});")  # fmt: skip
                    rows.append((dtype, op, a, b))
    source = "\n".join(
        ["#include <stdio.h>", "#include <stdbool.h>", PRELUDE[dialect]]
        + list(helpers.values())
        + defs
        + ["int main(void) {"]
        + calls
        + ["    return 0;", "}"]
    )
    return source, rows


def _want(dtype: str, op: str, a: int, b: int) -> int:
    x, y = np.array(a, dtype), np.array(b, dtype)
    return int(~x if op == "bit_not" else BINARY[op](x, y))


@pytest.mark.parametrize("dialect", ["opencl", "cuda"])
def test_bitwise_and_shifts_have_no_ub_and_match_numpy(dialect: str, tmp_path: Path) -> None:
    cc = _compiler()
    program, rows = _program(dialect)
    src = tmp_path / f"{dialect}_bitwise.c"
    src.write_text(program)
    exe = tmp_path / f"{dialect}_bitwise"
    flags = ["-std=c11", "-O1", "-fsigned-char", "-fsanitize=undefined"]
    flags += ["-fno-sanitize-recover=all", "-fno-builtin"]
    built = subprocess.run([cc, *flags, str(src), "-o", str(exe)], capture_output=True)
    if built.returncode != 0:
        if b"sanitize" in built.stderr or b"ubsan" in built.stderr:
            pytest.skip(f"{cc} cannot build with -fsanitize=undefined")
        pytest.fail(f"the {dialect} bitwise code does not build as C:\n{built.stderr.decode()}")
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, f"undefined behaviour in the {dialect} bitwise code:\n{ran.stderr}"
    lines = ran.stdout.splitlines()
    assert len(lines) == len(rows)
    bad = []
    for (dtype, op, a, b), line in zip(rows, lines):
        signed, unsigned = (int(v) for v in line.split())
        got = signed if np.dtype(dtype).kind == "i" else unsigned
        want = _want(dtype, op, a, b)
        if got != want:
            bad.append(f"  {dialect} {op} {dtype} ({a}, {b}): got {got}, NumPy {want}")
    assert not bad, f"{len(bad)} results differ from NumPy:\n" + "\n".join(bad[:12])


@pytest.mark.parametrize("dialect", ["opencl", "cuda"])
def test_bool_operands_print_as_logic(dialect: str) -> None:
    """``~`` of a bool promoted to int 1 is -2, still true: bools print as logic."""
    style = STYLES[dialect]
    assert style.intrinsic("bit_not", ["a"], ["bool"], "bool", None) == "(!a)"
    assert style.intrinsic("bit_xor", ["a", "b"], ["bool"] * 2, "bool", None) == "(a != b)"


BITCASTS = "function (F, D, I, B) -> (FI, IF, DU, UD, IU, BU) { FI = bitcast_int(F, 32); IF = bitcast_float(FI, 32); DU = bitcast_uint(D, 64); UD = bitcast_float(DU, 64); IU = bitcast_uint(I, 8); BU = bitcast_uint(B, 8); }"  # noqa: E501
SHIFTS = (
    "function (A, B) -> (L, R, N, X) { L = A << B; R = A >> B; N = ~A; X = (A & B) | (A ^ B); }"
)


def test_cuda_compiles_with_nvrtc() -> None:
    """The CUDA text of shifts, bitwise operations and bit casts is valid CUDA C
    (NVRTC, no GPU needed)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra is not installed")
    for dtype in INT_DTYPES:
        x = np.zeros(4, dtype)
        exe = stripeml.compile(SHIFTS, target="cuda").lower(x, x)
        assert ".entry" in exe._compiled.ptx
        assert f"sm_shl_{SHORT[dtype]}" in exe.code and f"sm_shr_{SHORT[dtype]}" in exe.code
    args = (np.zeros(4, np.float32), np.zeros(4), np.zeros(4, np.int8), np.zeros(4, bool))
    exe = stripeml.compile(BITCASTS, target="cuda").lower(*args)
    assert ".entry" in exe._compiled.ptx
    assert "__float_as_int(" in exe.code and "__longlong_as_double(" in exe.code
