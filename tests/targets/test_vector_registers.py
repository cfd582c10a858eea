"""``vector_registers``: the ISA's vector registers, a fact of target files and the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from stripeml.errors import TargetError
from stripeml.passes.unroll import Unroll
from stripeml.targets import HostFacts, load_target, target_from_toml
from stripeml.targets.host import CpuId, vector_registers_of

from .helpers import HEADER, write


@pytest.mark.parametrize(
    ("triple", "features", "registers"),
    [
        ("x86_64-unknown-linux-gnu", {"avx512f", "avx2", "fma"}, 32),  # zmm0-31
        ("x86_64-unknown-linux-gnu", {"avx2", "fma"}, 16),  # ymm0-15
        ("x86_64-unknown-linux-gnu", set(), 16),  # xmm0-15
        ("aarch64-unknown-linux-gnu", {"neon"}, 32),  # v0-31
    ],
)
def test_registers_of_an_isa(triple: str, features: set[str], registers: int) -> None:
    cpu = CpuId(triple, "some-cpu", frozenset(features))
    assert vector_registers_of(cpu) == registers
    assert HostFacts(cpu=cpu).vector_registers == registers


def test_given_registers_are_not_detected() -> None:
    avx2 = CpuId("x86_64-unknown-linux-gnu", "haswell", frozenset({"avx2"}))
    assert HostFacts(cpu=avx2, vector_registers=32).vector_registers == 32


def test_a_file_states_them_and_they_default_to_16(tmp_path: Path) -> None:
    assert target_from_toml(HEADER).vector_registers == 16
    assert load_target(write(tmp_path, "vector_registers = 32\n" + HEADER)).vector_registers == 32


def test_auto_asks_the_host_and_options_may_name_them() -> None:
    avx512 = CpuId("x86_64-unknown-linux-gnu", "skx", frozenset({"avx512f", "avx2"}))
    text = (
        'vector_registers = "auto"\n'
        + HEADER
        + '[[pipeline]]\npass = "unroll"\noptions = { registers = "$vector_registers" }\n'
    )
    t = target_from_toml(text, host=HostFacts(cpu=avx512))
    assert t.vector_registers == 32
    (unroll,) = t.passes
    assert isinstance(unroll, Unroll) and unroll.registers == 32


@pytest.mark.parametrize("value", ["0", "-4", '"many"', "true"])
def test_bad_values_are_errors_naming_the_key(tmp_path: Path, value: str) -> None:
    with pytest.raises(TargetError, match="vector_registers"):
        load_target(write(tmp_path, f"vector_registers = {value}\n" + HEADER))


def test_they_are_part_of_the_fingerprint() -> None:
    """Code generated for 32 registers is not the code for 16: the cache key differs."""
    a = target_from_toml("vector_registers = 16\n" + HEADER)
    b = target_from_toml("vector_registers = 32\n" + HEADER)
    assert a.fingerprint() != b.fingerprint()
