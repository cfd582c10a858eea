"""The C printers' integer ``+ - *``, negation and ``abs`` wrap as NumPy does,
with no undefined behaviour, in both dialects.

C leaves signed overflow undefined, and optimising compilers assume it never
happens (``abs(x) >= 0`` may fold to true); NumPy wraps.  The expressions the
printers make for each operation are put in small C functions, built with the
host's C compiler under UndefinedBehaviorSanitizer (any UB aborts) and run on
every pair of edge operands (``MIN``, ``MAX``, -1, 0, 1, ...), and the results
are compared with NumPy's.  Skipped when no C compiler with
``-fsanitize=undefined`` is found (as ``test_cstyle_division.py``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from stripeml.codegen.cuda import CudaStyle
from stripeml.codegen.opencl import OpenCLStyle

try:
    from test_cstyle_division import PRELUDE, _c_literal, _compiler

    from test_int_division import edges
except ImportError:  # tests/ imported as a package
    from tests.codegen.test_cstyle_division import PRELUDE, _c_literal, _compiler
    from tests.test_int_division import edges

STYLES = {"opencl": OpenCLStyle(), "cuda": CudaStyle()}
DTYPES = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64"}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
UNARY = {"neg": np.negative, "abs": np.abs}


def _no_helpers(name: str, dt: str, src: str = "") -> str:
    raise AssertionError(f"wrapping arithmetic asked for a helper {name}")


def _program(dialect: str) -> tuple[str, list[tuple[str, str, int, int]]]:
    style = STYLES[dialect]
    defs, calls, rows = [], [], []
    for dtype, dt in DTYPES.items():
        t = style.ctype(dt)
        for op in (*BINARY, *UNARY):
            args = ["a", "b"] if op in BINARY else ["a"]
            expr = style.intrinsic(op, args, [dt] * len(args), dt, _no_helpers)
            params = ", ".join(f"{t} {a}" for a in args)
            defs.append(f"static {t} f_{op}_{dt}({params}) {{ return {expr}; }}")
        for agg in ("add", "mul"):  # an aggregation's step: acc = acc (agg) x
            expr = style.combine(agg, "a", "b", dt)
            defs.append(f"static {t} g_{agg}_{dt}({t} a, {t} b) {{ return {expr}; }}")
        e = [int(v) for v in edges(dtype).tolist()]
        for a in e:
            for b in e:
                lit = f"({t}){_c_literal(dtype, a)}, ({t}){_c_literal(dtype, b)}"
                for op in BINARY:
                    calls.append(f'    printf("%lld\\n", (long long)f_{op}_{dt}({lit}));')
                    rows.append((dtype, op, a, b))
                for agg in ("add", "mul"):
                    calls.append(f'    printf("%lld\\n", (long long)g_{agg}_{dt}({lit}));')
                    rows.append((dtype, agg, a, b))
            for op in UNARY:
                calls.append(f'    printf("%lld\\n", (long long)f_{op}_{dt}(({t}){_c_literal(dtype, a)}));')  # fmt: skip
                rows.append((dtype, op, a, 0))
    text = "\n".join(
        ["#include <stdio.h>", "#include <stdbool.h>", PRELUDE[dialect], *defs, "int main(void) {"]
        + calls
        + ["    return 0;", "}"]
    )
    return text, rows


def _want(dtype: str, op: str, a: int, b: int) -> int:
    x, y = np.array(a, dtype), np.array(b, dtype)
    with np.errstate(all="ignore"):
        if op in UNARY:
            return int(UNARY[op](x))
        return int(BINARY[op](x, y))


@pytest.mark.parametrize("dialect", ["opencl", "cuda"])
def test_signed_arithmetic_wraps_without_ub(dialect: str, tmp_path: Path) -> None:
    cc = _compiler()
    text, rows = _program(dialect)
    src = tmp_path / f"{dialect}_wrapping.c"
    src.write_text(text)
    exe = tmp_path / f"{dialect}_wrapping"
    flags = [
        "-std=c11",
        "-O2",
        "-fsigned-char",
        "-fsanitize=undefined",
        "-fno-sanitize-recover=all",
    ]
    built = subprocess.run([cc, *flags, str(src), "-o", str(exe)], capture_output=True)
    if built.returncode != 0:
        if b"sanitize" in built.stderr or b"ubsan" in built.stderr:
            pytest.skip(f"{cc} cannot build with -fsanitize=undefined")
        pytest.fail(f"the {dialect} expressions do not build as C:\n{built.stderr.decode()}")
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, (
        f"undefined behaviour in {dialect} arithmetic:\n{ran.stderr[-2000:]}"
    )
    lines = ran.stdout.splitlines()
    assert len(lines) == len(rows)
    bad = [
        f"  {dialect} {op} {dtype} ({a}, {b}): got {line}, NumPy {_want(dtype, op, a, b)}"
        for (dtype, op, a, b), line in zip(rows, lines)
        if int(line) != _want(dtype, op, a, b)
    ]
    assert not bad, f"{len(bad)} results differ from NumPy:\n" + "\n".join(bad[:12])
