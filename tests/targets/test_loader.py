"""Loading target files: the format, ``auto`` detection, references, every error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stripeml.errors import StripeError, TargetError
from stripeml.passes import PASSES
from stripeml.targets import (
    TARGETS_DIR,
    HostFacts,
    Memory,
    PassSpec,
    Target,
    load_target,
    parse_size,
    resolve_target,
    target_from_toml,
)
from stripeml.targets.host import detect_caches, detect_threads, detect_vector_width

from .helpers import HEADER, cpuinfo_vector_width, fake_sysfs, write

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

GOOD = """
name = "toy"
description = "a toy chip"
backend = "interp"
threads = 4
vector_width = 8
max_threads_per_group = 256
subgroup_size = 32
shared_memory = "48 KiB"
compute_units = 8

[[memory]]
name = "DRAM"
size = "2 GiB"
line = 128
bandwidth_gbs = 100

[[memory]]
name = "SRAM"
size = 262144
bandwidth_gbs = 1000.5

[[pipeline]]
pass = "fuse"
options = { eltwise = false }

[[pipeline]]
pass = "dce"
"""


# -- good files ------------------------------------------------------------------


def test_good_file_loads_every_fact(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    t = load_target(path)
    assert isinstance(t, Target)
    assert (t.name, t.description, t.backend) == ("toy", "a toy chip", "interp")
    assert (t.threads, t.vector_width) == (4, 8)
    assert (t.max_threads_per_group, t.subgroup_size, t.compute_units) == (256, 32, 8)
    assert t.shared_memory_bytes == 48 * KiB
    assert t.memories == (
        Memory("DRAM", 2 * GiB, 128, 100.0),
        Memory("SRAM", 256 * KiB, 64, 1000.5),  # line defaults to 64
    )
    assert t.memory_names == ("DRAM", "SRAM") and t.memory("SRAM").size_bytes == 256 * KiB
    assert t.pipeline == (PassSpec("fuse", (("eltwise", False),)), PassSpec("dce"))
    assert t.source == str(path)
    assert t.describe_pipeline() == "fuse(eltwise=False) -> dce()"


def test_passes_are_built_from_the_registry(tmp_path: Path) -> None:
    t = load_target(write(tmp_path, GOOD))
    fuse, dce = t.passes
    assert isinstance(fuse, PASSES["fuse"]) and fuse.eltwise is False
    assert isinstance(dce, PASSES["dce"])
    assert t.passes == (fuse, dce)  # frozen dataclasses: equal each time
    assert t.passes[0] is fuse  # built once, when the file was loaded


def test_defaults(tmp_path: Path) -> None:
    t = load_target(write(tmp_path, HEADER, "my_chip.toml"))
    assert t.name == "my_chip"  # the file stem
    assert (t.threads, t.vector_width) == (1, 1)
    assert t.pipeline == () and t.passes == ()
    assert t.max_threads_per_group is None and t.shared_memory_bytes is None


def test_targets_are_hashable_values(tmp_path: Path) -> None:
    a = load_target(write(tmp_path, GOOD, "a.toml"))
    b = load_target(write(tmp_path, GOOD, "b.toml"))
    assert a == b and hash(a) == hash(b)  # the source file is not part of the value


def test_pipeline_options_may_be_a_subtable(tmp_path: Path) -> None:
    text = HEADER + '[[pipeline]]\npass = "fuse"\n[pipeline.options]\ncontraction = false\n'
    assert load_target(write(tmp_path, text)).pipeline == (
        PassSpec("fuse", (("contraction", False),)),
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, 0),
        (4096, 4096),
        ("4096", 4096),
        ("512 B", 512),
        ("32 KiB", 32 * KiB),
        ("32KiB", 32 * KiB),
        ("1.5 MiB", 3 * MiB // 2),
        ("16 GiB", 16 * GiB),
        ("1 TiB", 1 << 40),
        ("2 kB", 2000),
        ("3 MB", 3_000_000),
        ("16 GB", 16 * 10**9),
        ("1 gib", GiB),
    ],
)
def test_parse_size(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (-1, "negative"),
        ("12 parsecs", "is not a size"),
        ("KiB", "is not a size"),
        ("0.3 B", "whole number"),
        (1.5, "got float"),
        (True, "got boolean"),
    ],
)
def test_parse_size_errors(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_size(text)


# -- auto -------------------------------------------------------------------------

AUTO = """
backend = "cpu"
threads = "auto"
vector_width = "auto"
[[memory]]
name = "DRAM"
size = "auto"
line = "auto"
[[memory]]
name = "L3"
size = "auto"
line = "auto"
[[memory]]
name = "L2"
size = "auto"
line = "auto"
[[memory]]
name = "L1"
size = "auto"
line = "auto"
"""


def test_auto_from_a_fake_sysfs(tmp_path: Path) -> None:
    root = fake_sysfs(
        tmp_path / "cache",
        [
            (1, "Data", "48K", "64"),
            (1, "Instruction", "32K", "64"),
            (2, "Unified", "2048K", "64"),
            (3, "Unified", "36M", "128"),
        ],
    )
    host = HostFacts(cache_root=root, threads=6, vector_width=16, dram_bytes=64 * GiB)
    t = target_from_toml(AUTO, host=host)
    assert (t.threads, t.vector_width) == (6, 16)
    assert t.memories == (
        Memory("DRAM", 64 * GiB, 64),  # DRAM's line: the smallest cache level's
        Memory("L3", 36 * MiB, 128),
        Memory("L2", 2 * MiB, 64),
        Memory("L1", 48 * KiB, 64),
    )


def test_auto_falls_back_without_sysfs(tmp_path: Path) -> None:
    host = HostFacts(cache_root=tmp_path / "missing", threads=1, vector_width=4, dram_bytes=GiB)
    t = target_from_toml(AUTO, host=host)
    sizes = {m.name: (m.size_bytes, m.line_bytes) for m in t.memories}
    assert sizes == {
        "DRAM": (GiB, 64),
        "L3": (8 * MiB, 64),
        "L2": (512 * KiB, 64),
        "L1": (32 * KiB, 64),
    }


def test_auto_skips_malformed_sysfs_entries(tmp_path: Path) -> None:
    root = fake_sysfs(
        tmp_path / "cache",
        [
            (1, "Data", "32K", None),  # no line size: 64
            (2, "Unified", "lots", "64"),  # unreadable size: skipped
            (None, "Unified", "1M", "64"),  # no level: skipped
            (3, "Unified", "16384K", "0"),  # nonsense line: 64
        ],
    )
    caches = detect_caches(root)
    assert {k: (c.size_bytes, c.line_bytes) for k, c in caches.items()} == {
        1: (32 * KiB, 64),
        3: (16 * MiB, 64),
    }
    assert HostFacts(cache_root=root).cache(2).size_bytes == 512 * KiB  # the fallback


def test_auto_on_this_machine() -> None:
    t = target_from_toml(AUTO)
    assert t.threads == detect_threads() == len(os.sched_getaffinity(0))
    assert t.vector_width == detect_vector_width() in (4, 8, 16)
    if cpuinfo_vector_width() is not None:  # the kernel's own view of the CPU agrees
        assert t.vector_width == cpuinfo_vector_width()
    assert all(m.size_bytes > 0 and m.line_bytes > 0 for m in t.memories)


def test_host_facts_are_detected_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    import stripeml.targets.host as host_mod

    def boom() -> int:
        raise AssertionError("vector width detected although no file asked for it")

    monkeypatch.setattr(host_mod, "detect_vector_width", boom)
    assert target_from_toml(HEADER).vector_width == 1


# -- references ---------------------------------------------------------------------

REFS = """
backend = "interp"
threads = 3
vector_width = 16
subgroup_size = 32
[[memory]]
name = "DRAM"
size = "1 GiB"
bandwidth_gbs = 12.5
[[memory]]
name = "L1"
size = "32 KiB"
line = 128
[[pipeline]]
pass = "probe"
options = { size = "$L1.size", sizes = ["$threads", "$vector_width", "$L1.line", 7] }
[[pipeline]]
pass = "probe"
options = { fraction = 0.25, memory = "L1", size = "$subgroup_size" }
[[pipeline]]
pass = "probe"
options = { fraction = "$DRAM.bandwidth_gbs" }
"""


def test_references_are_substituted(probe_pass: type, tmp_path: Path) -> None:
    text = REFS.replace('fraction = "$DRAM.bandwidth_gbs"', "fraction = 1, flag = true")
    t = load_target(write(tmp_path, text))
    first, second, third = t.passes
    assert first == probe_pass(size=32 * KiB, sizes=(3, 16, 128, 7))
    assert second == probe_pass(fraction=0.25, memory="L1", size=32)
    assert third == probe_pass(fraction=1, flag=True)


def test_reference_to_a_float_fact(probe_pass: type, tmp_path: Path) -> None:
    # 12.5 GB/s is a float, so it type-checks as the float option; the pass's own
    # check (fraction <= 1) then rejects it, naming the entry.
    with pytest.raises(TargetError, match=r"pipeline\[2\]\.options: pass 'probe': fraction"):
        load_target(write(tmp_path, REFS))


# -- errors -------------------------------------------------------------------------

MEM2 = HEADER + '[[memory]]\nname = "SRAM"\nsize = "256 KiB"\n'
FUSE = HEADER + '[[pipeline]]\npass = "fuse"\n'

ERRORS = [
    ("unknown_top_key", 'color = "red"\n' + HEADER, "color", "unknown key"),
    ("not_toml", HEADER + "threads = \n", "", "not valid TOML"),
    ("name_type", 'name = 3\n' + HEADER, "name", "must be a non-empty string, got integer 3"),
    ("backend_missing", '[[memory]]\nname = "DRAM"\nsize = 1\n', "backend", "missing"),
    ("backend_unknown", HEADER.replace('"interp"', '"tpu"'), "backend", "unknown backend 'tpu'"),
    ("threads_type", 'threads = "many"\n' + HEADER, "threads", "positive integer or 'auto'"),
    ("threads_zero", "threads = 0\n" + HEADER, "threads", "positive integer, got 0"),
    ("threads_bool", "threads = true\n" + HEADER, "threads", "got boolean True"),
    ("vector_float", "vector_width = 1.5\n" + HEADER, "vector_width", "got float 1.5"),
    ("gpu_auto", 'subgroup_size = "auto"\n' + HEADER, "subgroup_size", "got string 'auto'"),
    ("shared_negative", "shared_memory = -1\n" + HEADER, "shared_memory", "must not be negative"),
    ("no_memory", 'backend = "interp"\n', "memory", "at least one [[memory]]"),
    ("memory_table", 'backend = "interp"\nmemory = 3\n', "memory", "array of tables"),
    ("memory_key", HEADER + "speed = 3\n", "memory[0].speed", "unknown key"),
    ("memory_negative", HEADER.replace('"1 GiB"', "-4"), "memory[0].size", "must not be negative"),
    ("memory_unit", HEADER.replace('"1 GiB"', '"12 parsecs"'), "memory[0].size", "is not a size"),
    ("memory_no_size", 'backend = "interp"\n[[memory]]\nname = "DRAM"\n', "memory[0].size", "missing"),
    ("memory_no_name", 'backend = "interp"\n[[memory]]\nsize = 1\n', "memory[0].name", "missing"),
    ("memory_bad_name", MEM2.replace('"SRAM"', '"S RAM"'), "memory[1].name", "not a location name"),
    ("memory_twice", MEM2.replace('"SRAM"', '"DRAM"'), "memory[1].name", "declared twice"),
    ("memory_line_zero", HEADER + "line = 0\n", "memory[0].line", "must be positive"),
    ("bandwidth_type", HEADER + 'bandwidth_gbs = "fast"\n', "memory[0].bandwidth_gbs", "a number"),
    ("bandwidth_negative", HEADER + "bandwidth_gbs = -1\n", "memory[0].bandwidth_gbs", "positive"),
    ("memory_auto_unknown", MEM2.replace('"256 KiB"', '"auto"'), "memory[1].size", "'auto' is detected only"),
    ("memory_order", MEM2.replace('"256 KiB"', '"2 GiB"'), "memory[1].size", "from the largest"),
    ("pipeline_type", HEADER.replace("[[memory]]", 'pipeline = "fuse"\n[[memory]]'), "pipeline", "array of tables"),
    ("pass_missing", HEADER + "[[pipeline]]\n", "pipeline[0].pass", "missing"),
    ("pass_unknown", FUSE + '[[pipeline]]\npass = "fusion"\n', "pipeline[1].pass", "unknown pass 'fusion'"),
    ("pipeline_key", FUSE + "enabled = true\n", "pipeline[0].enabled", "unknown key"),
    ("options_type", FUSE + "options = 3\n", "pipeline[0].options", "must be a table"),
    ("option_unknown", FUSE + "options = { eltwsie = true }\n", "pipeline[0].options.eltwsie", "has no option 'eltwsie'"),
    ("option_type", FUSE + 'options = { eltwise = "no" }\n', "pipeline[0].options.eltwise", "must be bool, got str 'no'"),
    ("option_table", FUSE + "options = { eltwise = { a = 1 } }\n", "pipeline[0].options.eltwise", "cannot be a table"),
    ("reference_unknown", FUSE + 'options = { eltwise = "$L4.size" }\n', "pipeline[0].options.eltwise", "unknown reference '$L4.size'"),
    ("reference_unset", FUSE + 'options = { eltwise = "$subgroup_size" }\n', "pipeline[0].options.eltwise", "unknown reference '$subgroup_size'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "key", "what"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_errors_name_the_file_and_key(tmp_path: Path, text: str, key: str, what: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TargetError) as info:
        load_target(path)
    message = str(info.value)
    assert isinstance(info.value, StripeError)
    assert message.startswith(f"{path}: {key}: " if key else f"{path}: "), message
    assert what in message, message


def test_probe_option_errors_name_the_entry(probe_pass: type, tmp_path: Path) -> None:
    text = FUSE + (
        '[[pipeline]]\npass = "dce"\n[[pipeline]]\npass = "probe"\noptions = { fraction = "half" }\n'
    )
    with pytest.raises(TargetError) as info:
        load_target(write(tmp_path, text))
    assert str(info.value).startswith(f"{tmp_path / 'chip.toml'}: pipeline[2].options.fraction: ")
    assert "must be float, got str 'half'" in str(info.value)
    bad_array = FUSE.replace('"fuse"', '"probe"') + 'options = { sizes = [1, "$nope"] }\n'
    with pytest.raises(TargetError, match=r"pipeline\[0\]\.options\.sizes\[1\]: unknown reference"):
        load_target(write(tmp_path, bad_array))


# -- finding files ------------------------------------------------------------------


def test_resolve_names_and_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    npu = TARGETS_DIR / "examples" / "npu.toml"
    assert resolve_target("cpu") == TARGETS_DIR / "cpu.toml"
    assert resolve_target("examples/npu") == npu
    assert resolve_target("npu") == npu
    assert resolve_target(str(npu)) == npu
    monkeypatch.chdir(tmp_path)  # relative paths that do not exist: the bundled files
    assert resolve_target("targets/examples/npu.toml") == npu
    assert resolve_target("examples/npu.toml") == npu
    mine = write(tmp_path, HEADER, "npu.toml")
    assert resolve_target("npu.toml") == Path("npu.toml")  # an existing file wins
    assert load_target(Path(mine)).name == "npu"


def test_resolve_errors(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match=r"unknown target 'tpu' \(known: interp, cpu"):
        resolve_target("tpu")
    with pytest.raises(TargetError, match="no such target file"):
        resolve_target(str(tmp_path / "nope.toml"))
    with pytest.raises(TargetError, match="no such target file"):
        load_target("targets/nope.toml")
