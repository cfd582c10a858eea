"""The C printers' ``dot4``: a plain-C helper ``sm_dot4`` in both dialects, with no
undefined or implementation-defined behaviour, giving NumPy's values.

As in ``test_cstyle_bitwise.py``, the helper the printers make is built with
the host's C compiler under UndefinedBehaviorSanitizer (``-funsigned-char`` as
well as ``-fsigned-char``: the helper must not depend on the sign of ``char``)
and run on edge and random words; the reference is the words' bytes viewed
with NumPy and summed in int64.  Skipped when no C compiler is found.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.codegen.cuda import CudaStyle, generate_cuda
from stripeml.codegen.opencl import OpenCLStyle, generate_opencl

try:
    from test_cstyle_division import PRELUDE, _compiler
except ImportError:  # tests/ imported as a package
    from tests.codegen.test_cstyle_division import PRELUDE, _compiler

STYLES = {"opencl": OpenCLStyle(), "cuda": CudaStyle()}
GENERATORS = {"opencl": generate_opencl, "cuda": generate_cuda}


def _words() -> np.ndarray:
    edges = [0, 1, -1, 127, 128, 255, 2**31 - 1, -(2**31), 0x7F7F7F7F, 0x01020304, -0x7F7F7F80]
    edges += [0x80808080 - 2**32, 0x00FF00FF, 0x7F807F80]
    rng = np.random.default_rng(4)
    rand = rng.integers(-(2**31), 2**31, size=20)
    return np.array([*edges, *rand], np.int64).astype(np.int32)


def _ref(a: int, b: int) -> int:
    ua = np.array([a], "<i4").view(np.uint8).astype(np.int64)
    sb = np.array([b], "<i4").view(np.int8).astype(np.int64)
    return int((ua * sb).sum())


def _program(dialect: str, values: np.ndarray) -> str:
    style = STYLES[dialect]
    helpers: dict[str, str] = {}

    def need(kind: str, dt: str, src: str = "") -> str:
        name, text = style.helper(kind, dt, src)
        helpers.setdefault(name, text)
        return name

    expr = style.intrinsic("dot4", ["a", "b"], ["i32", "i32"], "i32", need)
    assert expr == "sm_dot4(a, b)"
    lits = ", ".join(f"(int)({int(v)}LL)" for v in values.tolist())
    return "\n".join(
        ["#include <stdio.h>", "#include <stdbool.h>", PRELUDE[dialect], *helpers.values()]
        + [f"static int f(int a, int b) {{ return {expr}; }}"]
        + [f"static const int V[] = {{{lits}}};", "int main(void) {"]
        + [f"    for (int i = 0; i < {len(values)}; ++i)"]
        + [f"        for (int j = 0; j < {len(values)}; ++j)"]
        + ['            printf("%d\\n", f(V[i], V[j]));', "    return 0;", "}"]
    )


@pytest.mark.parametrize("char_sign", ["-fsigned-char", "-funsigned-char"])
@pytest.mark.parametrize("dialect", ["opencl", "cuda"])
def test_dot4_helper_has_no_ub_and_matches_numpy(
    dialect: str, char_sign: str, tmp_path: Path
) -> None:
    cc = _compiler()
    values = _words()
    src = tmp_path / f"{dialect}_dot4.c"
    src.write_text(_program(dialect, values))
    exe = tmp_path / f"{dialect}_dot4"
    flags = ["-std=c11", "-O1", char_sign, "-fsanitize=undefined", "-fno-sanitize-recover=all"]
    built = subprocess.run([cc, *flags, str(src), "-o", str(exe)], capture_output=True)
    if built.returncode != 0:
        if b"sanitize" in built.stderr or b"ubsan" in built.stderr:
            pytest.skip(f"{cc} cannot build with -fsanitize=undefined")
        pytest.fail(f"the {dialect} dot4 helper does not build as C:\n{built.stderr.decode()}")
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, f"undefined behaviour in the {dialect} dot4 helper:\n{ran.stderr}"
    got = [int(line) for line in ran.stdout.splitlines()]
    want = [_ref(int(a), int(b)) for a in values for b in values]
    bad = [
        f"  dot4({int(values[k // len(values)])}, {int(values[k % len(values)])}): "
        f"got {g}, NumPy {w}"
        for k, (g, w) in enumerate(zip(got, want))
        if g != w
    ]
    assert len(got) == len(want)
    assert not bad, f"{len(bad)} results differ from NumPy:\n" + "\n".join(bad[:12])


GEMM = """function (X[M, K], W4[K4, N]) -> (C) {
    X4 = view_int(X, 32);
    C[m, n : M, N] = +(dot4(X4[m, k], W4[k, n]));
}"""


@pytest.mark.parametrize("shape", [(5, 3, 7), (64, 64, 64)])
@pytest.mark.parametrize("dialect", ["opencl", "cuda"])
def test_dot4_gemm_prints_the_helper_and_keeps_the_view_on_the_host(
    dialect: str, shape: tuple[int, int, int]
) -> None:
    """The GPU targets' pipelines keep ``dot4`` (naive or tiled kernels alike): the
    kernel calls ``sm_dot4``, defined once, and the byte view is a host step."""
    m, k4, n = shape
    x = np.zeros((m, 4 * k4), np.uint8)
    w4 = np.zeros((k4, n), np.int32)
    program = stripeml.compile(GEMM, target=dialect).lower(x, w4).program
    module = GENERATORS[dialect](program, max_group_size=256, shared_memory=32768, strip=4)
    assert module.source.count("int sm_dot4(int a, int b)") == 1
    assert "sm_dot4(" in module.source.split("sm_dot4(int a, int b)")[1]
    specials = [s.special.op for s in module.steps if s.special is not None]
    assert specials == ["bitview"]
