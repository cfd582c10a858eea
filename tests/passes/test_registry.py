"""The pass registry, ``make_pass`` and the shape every pass has."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import ClassVar

import pytest

import stripeml.passes as passes
from pipelines import cpu_passes
from stripeml.errors import OptionError, StripeError
from stripeml.ir import parse
from stripeml.passes import PASSES, Dce, Fuse, make_pass, pass_options, register
from stripeml.passes.manager import run_pipeline

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

NOT_PASSES = {"__init__", "manager", "registry"}
PASS_FILES = sorted(
    p.stem
    for p in Path(passes.__file__).parent.glob("*.py")
    if p.stem not in NOT_PASSES and not p.stem.startswith("_")
)


def test_every_pass_file_is_registered_under_its_stem() -> None:
    assert sorted(PASSES) == PASS_FILES
    for stem in PASS_FILES:
        cls = PASSES[stem]
        assert cls.name == stem
        assert cls.__module__ == f"stripeml.passes.{stem}"


@pytest.mark.parametrize("name", sorted(PASSES))
def test_pass_shape(name: str) -> None:
    """A frozen dataclass with defaults for every option; the docs say requires/guarantees."""
    cls = PASSES[name]
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    instance = cls()  # every option has a default
    doc = importlib.import_module(cls.__module__).__doc__ or ""
    assert "Requires" in doc and "Guarantees" in doc
    assert cls.__doc__ and cls.__doc__.strip()
    assert hash(instance) == hash(cls())


def test_make_pass_builds_with_options() -> None:
    assert make_pass("fuse") == Fuse()
    assert make_pass("fuse", eltwise=False) == Fuse(eltwise=False)
    assert make_pass("dce") == Dce()
    assert pass_options(Fuse) == {
        "eltwise": bool,
        "into_contraction": bool,
        "contraction": bool,
        "unit_stride_reductions_only": bool,
        "reused_inputs": bool,
        "keep_epilogues": bool,
    }


def test_make_pass_unknown_pass_names_it_and_the_known_ones() -> None:
    with pytest.raises(
        StripeError,
        match=r"unknown pass 'fusion' \(known passes: .*dce, divide_late, epilogue, fuse.*\)",
    ):
        make_pass("fusion")


def test_make_pass_unknown_option_names_it() -> None:
    with pytest.raises(StripeError, match=r"pass 'fuse' has no option 'eltwsie' \(its options: "):
        make_pass("fuse", eltwsie=False)
    with pytest.raises(StripeError, match=r"pass 'dce' has no option 'x' \(its options: none\)"):
        make_pass("dce", x=1)


def test_make_pass_checks_option_types() -> None:
    with pytest.raises(StripeError, match=r"option 'eltwise' must be bool, got str 'no'"):
        make_pass("fuse", eltwise="no")


def test_register_rejects_malformed_passes() -> None:
    class NoName:
        pass

    with pytest.raises(TypeError, match="name"):
        register(NoName)

    @dataclasses.dataclass
    class Mutable:
        name: ClassVar[str] = "mutable"

    with pytest.raises(TypeError, match="frozen"):
        register(Mutable)
    assert "mutable" not in PASSES


def test_cpu_pipeline() -> None:
    """The cpu target's passes are its file's [[pipeline]] entries, in order, with
    ``$vector_width`` taking the host's value."""
    from stripeml.passes.unroll import Unroll
    from stripeml.passes.vectorize import Vectorize
    from stripeml.targets import TARGETS_DIR

    entries = tomllib.loads((TARGETS_DIR / "cpu.toml").read_text())["pipeline"]
    assert [p.name for p in cpu_passes()] == [e["pass"] for e in entries]
    assert [p.name for p in cpu_passes()][:5] == [
        "alias_reshape",
        "alias_view",
        "divide_late",
        Fuse.name,
        Dce.name,
    ]
    wide = cpu_passes(vector_width=16)
    assert any(isinstance(p, Unroll) and p.vector_width == 16 for p in wide)
    assert any(isinstance(p, Vectorize) and p.width == 16 for p in wide)


CHAIN = """block main [] #program (
    in A f32(4):(1)
    out O f32(4):(1)
    none T f32(4):(1)
) {
  block k0 [i0:4] #eltwise #kernel (
      in A[i0] f32(1):(1)
      out T[i0]:assign f32(1):(1)
  ) {
    $A = load(A)
    T = store($A)
  }
  block k1 [i0:4] #eltwise #kernel (
      in T[i0] f32(1):(1)
      out O[i0]:assign f32(1):(1)
  ) {
    $T = load(T)
    O = store($T)
  }
}
"""


def test_manager_records_changed_stages_and_times_every_pass() -> None:
    program = parse(CHAIN)
    seen = []
    result = run_pipeline(
        program, [Dce(), Fuse(), Fuse(), Dce()], check=lambda n, p: seen.append(n)
    )
    assert [name for name, _ in result.stages] == ["lower", "fuse", "dce"]
    assert [name for name, _ in result.timings] == ["dce", "fuse", "fuse", "dce"]
    assert all(t >= 0 for _, t in result.timings)
    assert seen == ["fuse", "dce"]
    assert "none T" not in result.stages[-1][1]


SELECTING = sorted(n for n, c in PASSES.items() if "select" in pass_options(c))


@pytest.mark.parametrize("name", SELECTING)
def test_every_select_option_is_a_selector(name: str) -> None:
    """``select`` is a tag selector in every pass that has one (``a | b, !c``), and a
    bad one is an error naming the option, when the pass is made."""
    assert len(SELECTING) >= 6
    make_pass(name, select="kernel | contraction, !fill")
    with pytest.raises(OptionError) as info:
        make_pass(name, select="kernel, !")
    assert info.value.option == "select"
