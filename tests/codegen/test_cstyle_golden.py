"""Golden text tests of the C-style printers: ``golden_c/<case>.txt`` (reviewed by hand).

A case file reads::

    rule: one line stating what the case shows
    made: how the Stripe program was obtained (Tile source, shapes, pipeline)
    options: key=value, ...          (generate_opencl / generate_cuda options)
    === stripe
    <Stripe IR: the code generators' input>
    === steps
    <one line per root statement: the launch metadata, or the special>
    === opencl
    <the OpenCL C source, or "error: <message>">
    === cuda
    <the CUDA C source, or "error: <message>">

The test parses the program, prints it with :func:`generate_opencl` and
:func:`generate_cuda` and compares the texts and the metadata (both dialects
launch the same way).  Nothing here needs pyopencl, PoCL, NVRTC or a GPU:
the programs are Stripe text, the printers are pure Python, and one test
checks that in a process where those imports fail.  ``tests/gpu/`` runs the
same printers on PoCL and NVRTC.  Set STRIPEML_UPDATE_GOLDEN=1 to rewrite the
``steps``, ``opencl`` and ``cuda`` sections from the current printers, then
review the diff.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stripeml
from stripeml.codegen.cuda import generate_cuda
from stripeml.codegen.gpu_abi import GpuModule
from stripeml.codegen.opencl import generate_opencl
from stripeml.errors import StripeError
from stripeml.ir import format, parse, verify

GOLDEN = Path(__file__).parent / "golden_c"
CASES = sorted(p.stem for p in GOLDEN.glob("*.txt"))
SECTIONS = ("stripe", "steps", "opencl", "cuda")
GENERATORS = {"opencl": generate_opencl, "cuda": generate_cuda}


def _read(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(header fields, sections) of a case file."""
    text = path.read_text()
    head, *rest = text.split("\n=== ")
    fields = {}
    for line in head.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    sections = {}
    for part in rest:
        name, _, body = part.partition("\n")
        sections[name.strip()] = body
    assert tuple(sections) == SECTIONS, f"{path.name}: sections {tuple(sections)}"
    return fields, sections


def _write(path: Path, head: str, sections: dict[str, str]) -> None:
    body = "".join(f"\n=== {name}\n{sections[name]}" for name in SECTIONS)
    path.write_text(head + body)


def _options(text: str) -> dict[str, int]:
    options = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        k, _, v = item.partition("=")
        options[k.strip()] = ast.literal_eval(v.strip())
    return options


def _steps(module: GpuModule) -> str:
    lines = []
    for step in module.steps:
        if step.kernel is not None:
            k = step.kernel
            lines.append(
                f"kernel {k.symbol} block={k.block_name} buffers={list(k.buffers)} "
                f"groups={k.groups} group_size={k.group_size} mapping={k.mapping} "
                f"shared_bytes={k.shared_bytes}"
            )
        else:
            assert step.special is not None
            s = step.special
            lines.append(f"special {s.op} in={list(s.inputs)} out={list(s.outputs)}")
    return "\n".join(lines) + "\n"


def _generate(dialect: str, program, options: dict[str, int]) -> tuple[str, str]:
    """(source or "error: ...", steps text or "") of ``program`` in ``dialect``."""
    try:
        module = GENERATORS[dialect](program, **options)
    except StripeError as e:
        return f"error: {e}\n", ""
    return module.source, _steps(module)


@pytest.mark.parametrize("case", CASES)
def test_golden_c(case: str) -> None:
    path = GOLDEN / f"{case}.txt"
    fields, sections = _read(path)
    assert fields.get("rule"), f"{case}: the file states no rule"
    assert fields.get("made"), f"{case}: the file does not say how the program was made"
    program = parse(sections["stripe"])
    assert format(program) == sections["stripe"], "the stripe text is in printed form"
    verify(program)
    options = _options(fields.get("options", ""))
    got = {}
    steps = set()
    for dialect in GENERATORS:
        got[dialect], step_text = _generate(dialect, program, options)
        if step_text:
            steps.add(step_text)
    assert len(steps) <= 1, "OpenCL and CUDA launch the kernels the same way"
    got["steps"] = steps.pop() if steps else "none\n"
    if os.environ.get("STRIPEML_UPDATE_GOLDEN"):
        head = path.read_text().split("\n=== ", 1)[0]
        _write(path, head, {**sections, **got})
        sections = {**sections, **got}
    for name in ("steps", "opencl", "cuda"):
        assert got[name] == sections[name], f"{case}: {name} differs"


def test_golden_cases_exist() -> None:
    # A glob that finds nothing would pass every parametrised case vacuously.
    assert len(CASES) >= 8, CASES


# Run in a fresh interpreter where the GPU stacks cannot be imported at all.
_NO_GPU_STACK = """
import sys
for name in ("pyopencl", "pocl_binary_distribution", "cuda", "cuda.bindings"):
    sys.modules[name] = None  # "import pyopencl" now raises ImportError
import pytest
try:
    import pyopencl  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("pyopencl is still importable")
sys.exit(pytest.main([sys.argv[1], "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                      "-k", "not test_golden_needs_no_gpu_stack"]))
"""


def test_golden_needs_no_gpu_stack() -> None:
    env = {k: v for k, v in os.environ.items() if k != "STRIPEML_UPDATE_GOLDEN"}
    # The child imports the same stripeml as this process.
    src = str(Path(stripeml.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (src, env.get("PYTHONPATH"))))
    done = subprocess.run(
        [sys.executable, "-c", _NO_GPU_STACK, __file__],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(CASES) + 1} passed" in done.stdout, done.stdout
