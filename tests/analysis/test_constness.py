"""Constness: which root statements compute the same values at every run."""

from __future__ import annotations

from stripeml.analysis.constness import constness
from stripeml.ir import parse

HEAD = """block [] #program (
    in W f32(4):(1) const
    in X f32(4):(1)
    out Y f32(4):(1)
"""


def program(temps: str, body: str):
    return parse(HEAD + temps + ") {\n" + body + "}\n")


def kernel(name: str, reads: list[str], write: str) -> str:
    """``write[i] = sum of reads[i]`` as a root kernel."""
    refs = "".join(f"      in {r}[i] f32(1):(1)\n" for r in reads)
    loads = "".join(f"    $l{k} = load({r})\n" for k, r in enumerate(reads))
    total = "$l0"
    for k in range(1, len(reads)):
        total_next = f"$s{k}"
        loads += f"    {total_next} = add({total}, $l{k}): f32\n"
        total = total_next
    return (
        f"  block {name} [i:4] #eltwise #kernel (\n{refs}"
        f"      out {write}[i]:assign f32(1):(1)\n  ) {{\n{loads}    {write} = store({total})\n  }}\n"
    )


def test_a_chain_from_a_constant_is_constant() -> None:
    p = program(
        "    none T f32(4):(1)\n    none U f32(4):(1)\n",
        kernel("t", ["W"], "T") + kernel("u", ["T"], "U") + kernel("y", ["U", "X"], "Y"),
    )
    c = constness(p)
    assert c.statements == {0, 1} and c.temporaries == {"T", "U"}


def test_a_statement_reading_a_variable_input_is_not() -> None:
    p = program(
        "    none T f32(4):(1)\n",
        kernel("t", ["W", "X"], "T") + kernel("y", ["T"], "Y"),
    )
    assert constness(p).statements == frozenset() and constness(p).temporaries == frozenset()


def test_results_are_never_constant() -> None:
    p = program("", kernel("y", ["W"], "Y"))
    assert constness(p).statements == frozenset()


def test_a_temporary_also_written_by_a_variable_statement_is_not() -> None:
    """T is written from W, then again from X: neither writer can run only once."""
    p = program(
        "    none T f32(4):(1)\n",
        kernel("t", ["W"], "T") + kernel("t2", ["X"], "T") + kernel("y", ["T"], "Y"),
    )
    c = constness(p)
    assert c.statements == frozenset() and c.temporaries == frozenset()


def test_a_temporary_read_before_its_writer_is_not() -> None:
    """y reads T before t writes it: at a fresh run it reads zeros, so t must run each time."""
    p = program(
        "    none T f32(4):(1)\n",
        kernel("y", ["T", "X"], "Y") + kernel("t", ["W"], "T"),
    )
    assert constness(p).statements == frozenset()


def test_without_constant_parameters_nothing_is_constant() -> None:
    text = (HEAD + "    none T f32(4):(1)\n) {\n").replace(" const", "") + (
        kernel("t", ["W"], "T") + kernel("y", ["T"], "Y") + "}\n"
    )
    assert constness(parse(text)).statements == frozenset()
