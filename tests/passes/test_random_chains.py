"""Random chains of elementwise statements (and row reductions) through fuse + dce.

The strategy writes Tile source: inputs ``A[N, M]``, ``B[M]`` and ``C[N, 1]``,
then statements ``T1 .. Tk``, each an elementwise expression of earlier names
(broadcasting freely) or, now and then, a row reduction ``Tj[n, 0 : N, 1] =
+(X[n, m])`` (or ``>``) of an ``[N, M]`` name.  The program's results are the
last statement and a random subset of the others.  Lowered, run through the CPU
pipeline with every stage re-run on the interpreter, the results must match
the unfused program.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import stripeml
from pipelines import cpu_passes
from stripeml.passes.manager import run_pipeline
from stripeml.runtime.interp import run

from .helpers import assert_close, chain_inputs, checker

INPUTS = {"A": ("N", "M"), "B": ("M",), "C": ("N", "1")}
UNARY = ["tanh({})", "sigmoid({})", "relu({})", "abs({})", "-{}", "exp(tanh({}))", "({} * 0.5)"]
BINARY = ["{} + {}", "{} - {}", "{} * {}", "max({}, {})", "min({}, {})", "({} > {} ? {0} : {1})"]


def _broadcast(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    n = max(len(a), len(b))
    a = ("1",) * (n - len(a)) + a
    b = ("1",) * (n - len(b)) + b
    return tuple(x if y == "1" else y for x, y in zip(a, b))


@st.composite
def chains(draw) -> tuple[str, list[str]]:
    shapes = dict(INPUTS)
    lines = []
    for j in range(1, draw(st.integers(1, 7)) + 1):
        name = f"T{j}"
        full = [n for n, s in shapes.items() if s == ("N", "M")]
        if full and draw(st.integers(0, 4)) == 0:
            agg = draw(st.sampled_from(["+", ">"]))
            src = draw(st.sampled_from(full))
            lines.append(f"{name}[n, 0 : N, 1] = {agg}({src}[n, m]);")
            shapes[name] = ("N", "1")
            continue
        names = sorted(shapes)
        if draw(st.booleans()):
            x = draw(st.sampled_from(names))
            expr = draw(st.sampled_from(UNARY)).format(x)
            shape = shapes[x]
        else:
            x, y = draw(st.sampled_from(names)), draw(st.sampled_from(names + ["0.25"]))
            template = draw(st.sampled_from(BINARY))
            expr = template.replace("{0}", x).replace("{1}", y).format(x, y)
            shape = _broadcast(shapes[x], shapes.get(y, ()))
        lines.append(f"{name} = {expr};")
        shapes[name] = shape
    last = f"T{len(lines)}"
    others = [f"T{j}" for j in range(1, len(lines))]
    outputs = [last] + draw(st.lists(st.sampled_from(others), unique=True)) if others else [last]
    params = ", ".join(f"{n}[{', '.join(s)}]" for n, s in INPUTS.items())
    body = "\n    ".join(lines)
    return f"function ({params}) -> ({', '.join(outputs)}) {{\n    {body}\n}}", outputs


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains(), n=st.integers(1, 3), m=st.integers(1, 4))
def test_random_chain_fuses_without_changing_results(chain, n: int, m: int) -> None:
    source, _outputs = chain
    note(source)
    inputs = chain_inputs(n, m)
    program = stripeml.compile(source, target="interp").lower(**inputs).program
    expected = run(program, inputs)
    tol = {"rtol": 1e-5, "atol": 1e-6}
    result = run_pipeline(program, cpu_passes(), check=checker(inputs, expected, **tol))
    note(result.stages[-1][1])
    stripeml.ir.verify(result.program)
    assert_close(run(result.program, inputs), expected, "final", **tol)
    kernels = [s for s in result.program.root.stmts if isinstance(s, stripeml.ir.Block)]
    assert len(kernels) <= len(program.root.stmts)
