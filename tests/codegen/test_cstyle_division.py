"""The C printers' division helpers (``sm_div_*``, ``sm_mod_*``, ``sm_fmod_*``) have
no undefined behaviour and give NumPy's values, in both dialects.

The helpers are cut from the OpenCL C and CUDA C that the printers make for
``Q = A / B; R = A % B`` and built with the host's C compiler under
UndefinedBehaviorSanitizer (any UB aborts the program), then run on every
pair of edge operands and compared with NumPy.  PoCL cannot show this UB (its
compiler happens to wrap ``0 - INT_MIN``) and no GPU runs CUDA here, so this
is where the printed text itself is checked.  Skipped when no C compiler with
``-fsanitize=undefined`` is found.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.codegen.cuda import generate_cuda
from stripeml.codegen.opencl import generate_opencl
from stripeml.ir import parse

try:
    from test_int_division import INT_DTYPES, edges
except ImportError:  # tests/ imported as a package
    from tests.test_int_division import INT_DTYPES, edges

SOURCE = "function (A, B) -> (Q, R) { Q = A / B; R = A % B; }"
DTYPES = INT_DTYPES + ("float32", "float64")
SHORT = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
         "uint16": "u16", "uint32": "u32", "uint64": "u64", "float32": "f32", "float64": "f64"}  # fmt: skip

# What lets plain C compile each dialect's helpers (OpenCL C: long is 64 bits, char signed).
PRELUDE = {
    "opencl": """\
#define inline static inline
typedef unsigned char uchar; typedef unsigned short ushort;
typedef unsigned int uint; typedef unsigned long ulong;
_Static_assert(sizeof(long) == 8, "OpenCL's long is 64 bits");""",
    "cuda": """\
#define __device__
#define __forceinline__ inline
typedef unsigned char uchar; typedef unsigned short ushort; typedef unsigned int uint;
typedef long long i64_t; typedef unsigned long long u64_t;""",
}
GENERATORS = {"opencl": generate_opencl, "cuda": generate_cuda}


def _printed(dialect: str, dtype: str) -> str:
    """The source the dialect's printer makes for :data:`SOURCE` on ``dtype``."""
    x = np.zeros(4, dtype)
    ir = stripeml.compile(SOURCE, target="interp").lower(x, x).ir
    return GENERATORS[dialect](parse(ir)).source


def _helpers(source: str) -> list[str]:
    """The division helpers' definitions (one line each, at column 0; calls are indented)."""
    pattern = re.compile(r"^\S.* sm_(f?mod|div)_\w+\(.*\) \{")
    return [line for line in source.splitlines() if pattern.match(line)]


def _c_literal(dtype: str, v: float | int) -> str:
    if np.dtype(dtype).kind != "f":
        return f"({int(v)}LL)" if v >= 0 else f"(-{-int(v) - 1}LL - 1)"  # no -MIN literal
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return f"({float(v).hex()})"


def _main(dialect: str) -> tuple[str, list[tuple[str, str, float | int, float | int]]]:
    """A C program calling every helper on every edge pair (one line each), and the rows."""
    defs: list[str] = []
    calls: list[str] = []
    rows = []
    for dtype in DTYPES:
        dt = SHORT[dtype]
        defs += _helpers(_printed(dialect, dtype))
        kinds = ("fmod",) if dt.startswith("f") else ("div", "mod")
        e = edges(dtype).tolist()
        for kind in kinds:
            fmt = 'printf("%a\\n", (double)' if kind == "fmod" else 'printf("%lld %llu\\n", '
            for a in e:
                for b in e:
                    args = f"{_c_literal(dtype, a)}, {_c_literal(dtype, b)}"
                    call = f"sm_{kind}_{dt}({args})"
                    if kind != "fmod":
                        call = f"(long long){call}, (unsigned long long){call}"
                    calls.append(f"    {fmt}{call});")
                    rows.append((dtype, kind, a, b))
    program = "\n".join(
        ["#include <math.h>", "#include <stdio.h>", "#include <stdbool.h>", PRELUDE[dialect]]
        + sorted(set(defs))
        + ["int main(void) {"]
        + calls
        + ["    return 0;", "}"]
    )
    return program, rows


def _want(dtype: str, kind: str, a: float | int, b: float | int) -> np.generic:
    x, y = np.array(a, dtype), np.array(b, dtype)
    with np.errstate(all="ignore"):
        if kind == "div":
            return np.floor_divide(x, y)[()]
        return np.remainder(x, y)[()]


def _compiler() -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler on this machine")
    return cc


@pytest.mark.parametrize("dialect", ["opencl", "cuda"])
def test_division_helpers_have_no_ub_and_match_numpy(dialect: str, tmp_path: Path) -> None:
    cc = _compiler()
    program, rows = _main(dialect)
    src = tmp_path / f"{dialect}_division.c"
    src.write_text(program)
    exe = tmp_path / f"{dialect}_division"
    flags = ["-std=c11", "-O1", "-fsigned-char", "-fsanitize=undefined"]
    flags += ["-fno-sanitize-recover=all", "-fno-builtin"]
    built = subprocess.run([cc, *flags, str(src), "-o", str(exe), "-lm"], capture_output=True)
    if built.returncode != 0:
        if b"sanitize" in built.stderr or b"ubsan" in built.stderr:
            pytest.skip(f"{cc} cannot build with -fsanitize=undefined")
        pytest.fail(f"the {dialect} helpers do not build as C:\n{built.stderr.decode()}")
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, f"undefined behaviour in the {dialect} helpers:\n{ran.stderr}"
    lines = ran.stdout.splitlines()
    assert len(lines) == len(rows)
    bad = []
    for (dtype, kind, a, b), line in zip(rows, lines):
        want = _want(dtype, kind, a, b)
        if kind == "fmod":
            got = float.fromhex(line)
            ok = (math.isnan(got) and math.isnan(want)) or (
                got == want and math.copysign(1, got) == math.copysign(1, want)
            )
        else:
            signed, unsigned = (int(t) for t in line.split())
            got = signed if np.dtype(dtype).kind == "i" else unsigned
            ok = got == int(want)
        if not ok:
            bad.append(f"  {dialect} {kind} {dtype} ({a}, {b}): got {got!r}, NumPy {want!r}")
    assert not bad, f"{len(bad)} results differ from NumPy:\n" + "\n".join(bad[:12])


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_cuda_division_negates_in_the_unsigned_type(dtype: str) -> None:
    """``a / -1`` is ``-a`` taken in the unsigned type: ``0 - a`` overflows for MIN."""
    (div,) = [h for h in _helpers(_printed("cuda", dtype)) if " sm_div_" in h]
    unsigned = {"int8": "uchar", "int16": "ushort", "int32": "uint", "int64": "u64_t"}[dtype]
    assert f"(({unsigned})0 - ({unsigned})a)" in div, div
    assert "(0 - a)" not in div, div


@pytest.mark.parametrize("dialect", ["opencl", "cuda"])
def test_float_remainder_zero_is_copysigned(dialect: str) -> None:
    """fmod's zero has the dividend's sign; NumPy's remainder the divisor's."""
    (fmod,) = [h for h in _helpers(_printed(dialect, "float32")) if " sm_fmod_" in h]
    name = "copysignf" if dialect == "cuda" else "copysign"
    assert f"if (r == 0) return {name}(" in fmod, fmod


def test_cuda_helpers_compile_with_nvrtc() -> None:
    """The CUDA text is valid CUDA C (NVRTC, no GPU needed)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra is not installed")
    for dtype in DTYPES:
        x = np.zeros(4, dtype)
        exe = stripeml.compile(SOURCE, target="cuda").lower(x, x)
        assert ".entry" in exe._compiled.ptx
