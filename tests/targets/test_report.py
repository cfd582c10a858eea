"""Peak bytes per location (``analysis.memory``) and the report texts."""

from __future__ import annotations

from stripeml import ir
from stripeml.analysis.memory import allocation_bytes, allocations, is_placed, peak_bytes
from stripeml.targets import Memory, load_target
from stripeml.targets.report import describe_target, format_bytes, format_traffic

PLACED = """
block main [] #program (
    in A f32(8):(1)
    out O f32(8):(1)
    none T f32(8):(1)
    none U f64(4):(1) @SRAM:0
    none V f32(4):(1) @SRAM:16
    none W f32(4, 4):(4, 1) @SRAM:64
) {
  block k [i:8] (
      none R f32(2):(1) @SRAM
  ) {
  }
}
"""


def test_peak_bytes_uses_offsets_and_sums_the_rest() -> None:
    program = ir.parse(PLACED)
    assert [r.into for r in allocations(program)] == ["T", "U", "V", "W", "R"]
    assert allocation_bytes(program.root.ref("W")) == 64
    # SRAM: max(0 + 32, 16 + 16, 64 + 64) = 128 placed, plus R's 8 unplaced bytes.
    assert peak_bytes(program) == {"SRAM": 136, "DRAM": 32}
    assert is_placed(program)


def test_unplaced_programs_sum_their_allocations() -> None:
    program = ir.parse(PLACED.replace("@SRAM:0", "@SRAM").replace("@SRAM:16", "@SRAM"))
    program = ir.parse(ir.format(program).replace("@SRAM:64", "@SRAM"))
    assert peak_bytes(program) == {"DRAM": 32, "SRAM": 32 + 16 + 64 + 8}
    assert not is_placed(program)


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (0, 512, 1024, 1536, 32 << 10, 3 << 30)] == [
        "0 B",
        "512 B",
        "1 KiB",
        "1.5 KiB",
        "32 KiB",
        "3 GiB",
    ]


def test_format_traffic_follows_the_memories_then_the_rest() -> None:
    memories = (Memory("DRAM", 1 << 30, 64), Memory("SRAM", 256 << 10, 64))
    text = format_traffic({"DRAM": 100, "REGISTER": 4}, {"DRAM": 50}, memories, {"SRAM": 300 << 10})
    lines = text.splitlines()
    assert lines[0].split() == ["location", "read", "(B)", "written", "(B)", "total", "(B)", "size"]
    assert lines[1].split() == ["DRAM", "100", "50", "150", "1", "GiB"]
    assert lines[2].split() == ["SRAM", "0", "0", "0", "256", "KiB"]
    assert lines[3].split() == ["REGISTER", "4", "0", "4", "-"]
    assert lines[4].split() == ["all", "104", "50", "154"]
    assert "SRAM" in lines[-1] and "EXCEEDS THE MEMORY" in lines[-1]


def test_describe_target_lists_every_fact() -> None:
    text = describe_target(load_target("cuda"))
    for expected in ("backend            cuda", "compute units      132", "SHARED", "fuse()"):
        assert expected in text
