"""Every pass option with an obvious domain is checked when the pass is built.

Sizes are never negative, counts and widths are positive, fractions lie in
(0, 1], locations are names (and, in a target file, memories the target
declares), selectors parse and name tags of the vocabulary.  A target file
that breaks one is rejected when it loads, naming the key
(``pipeline[0].options.fraction``); ``make_pass`` raises ``OptionError``
naming the option.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stripeml.errors import OptionError, TargetError
from stripeml.passes import PASSES, make_pass, pass_options
from stripeml.targets import bundled_targets, load_target

HEADER = (
    'backend = "interp"\n'
    '[[memory]]\nname = "DRAM"\nsize = "1 GiB"\n'
    '[[memory]]\nname = "SRAM"\nsize = "256 KiB"\n'
)

# (pass, options as TOML, the option named, what the message says)
BAD = [
    ("autotile", "fraction = 2.5", "fraction", "must be in (0, 1]"),
    ("autotile", "fraction = 0.0", "fraction", "must be in (0, 1]"),
    ("autotile", "fraction = -0.25", "fraction", "must be in (0, 1]"),
    ("autotile", "fraction = nan", "fraction", "must be in (0, 1]"),
    ("autotile", "memory_bytes = 0", "memory_bytes", "must be positive"),
    ("autotile", "line_bytes = -64", "line_bytes", "must be positive"),
    ("autotile", "min_tiles = 0", "min_tiles", "must be positive"),
    ("autotile", "max_candidates = 0", "max_candidates", "must be positive"),
    ("autotile", 'select = "contractoin"', "select", "'contractoin' is not a tag"),
    ("cache", 'location = "S RAM"', "location", "is not a memory location name"),
    ("cache", 'location = ""', "location", "must be one location name"),
    ("cache", 'location = "DRAM,SRAM"', "location", "must be one location name"),
    ("cache", 'location = "L1"', "location", "no memory named 'L1' (the target has DRAM, SRAM"),
    ("cache", "max_bytes = -1", "max_bytes", "must be 0 or more"),
    ("cache", 'location = "SRAM", select = "tiled,!cpy"', "select", "'cpy' is not a tag"),
    ("epilogue", 'select = "tiledd"', "select", "'tiledd' is not a tag"),
    ("halo", "max_bytes = -1", "max_bytes", "must be 0 or more"),
    ("halo", 'select = "a b"', "select", "bad tag selector"),
    ("pad", "multiple = -8", "multiple", "must be 0 or more"),
    ("pad", "locations = 5", "locations", "must be a location name or a list of them"),
    ("pad", 'locations = ["SRAM", "x y"]', "locations", "'x y' is not a memory location name"),
    ("pad", "locations = [1]", "locations", "1 is not a memory location name"),
    ("pad", 'locations = "SRAM, L9"', "locations", "no memory named 'L9'"),
    ("nest", "fraction = 1.5", "fraction", "must be in (0, 1]"),
    ("nest", "cache_bytes = -1", "cache_bytes", "must be 0 or more"),
    ("nest", "min_points = 0", "min_points", "must be positive"),
    ("nest", "min_rows = 0", "min_rows", "must be positive"),
    ("nest", "threads = 0", "threads", "must be positive"),
    ("nest", "vector_width = 0", "vector_width", "must be positive"),
    ("nest", 'location = "SRAM", select = "kernell"', "select", "'kernell' is not a tag"),
    ("nest", 'location = "L2"', "location", "no memory named 'L2' (the target has DRAM, SRAM"),
    ("nest", 'location = "DRAM,SRAM"', "location", "must be one location name"),
    ("place", "alignment = 0", "alignment", "must be positive"),
    ("place", 'locations = ["DRAM", "L2"]', "locations", "no memory named 'L2'"),
    ("thread", "threads = 0", "threads", "must be positive"),
    ("thread", 'select = "kernal"', "select", "'kernal' is not a tag"),
    ("unroll", "vector_width = 0", "vector_width", "must be positive"),
    ("unroll", "vectors = 0", "vectors", "must be positive"),
    ("unroll", "rows = -4", "rows", "must be positive"),
    ("unroll", "max_vectors = 0", "max_vectors", "must be positive"),
    ("unroll", "row_blocks = 0", "row_blocks", "must be positive"),
    ("unroll", "max_rows = -1", "max_rows", "must be 0 or more"),
    ("unroll", "pack_max_bytes = -1", "pack_max_bytes", "must be 0 or more"),
    ("unroll", "k_block = -256", "k_block", "must be 0 or more"),
    ("unroll", "mixed_vectors = -2", "mixed_vectors", "must be 0 or more"),
    ("vectorize", "width = 0", "width", "must be positive"),
]


@pytest.mark.parametrize(
    ("name", "options", "option", "what"), BAD, ids=[f"{b[0]}-{b[1]}" for b in BAD]
)
def test_target_files_name_the_bad_option(
    tmp_path: Path, name: str, options: str, option: str, what: str
) -> None:
    path = tmp_path / "chip.toml"
    path.write_text(f'{HEADER}[[pipeline]]\npass = "{name}"\noptions = {{ {options} }}\n')
    with pytest.raises(TargetError) as info:
        load_target(path)
    message = str(info.value)
    assert message.startswith(f"{path}: pipeline[0].options.{option}: pass '{name}': "), message
    assert what in message, message


GOOD = [
    ("autotile", "fraction = 1.0"),
    ("autotile", "fraction = 0.01"),
    ("cache", 'location = "SRAM", max_bytes = 0'),
    ("pad", 'multiple = 0, locations = "DRAM, SRAM"'),
    ("pad", 'locations = ["REGISTER"]'),
    ("place", 'alignment = 1, locations = ["DRAM", "SRAM"]'),
    ("thread", "threads = 1"),
    ("unroll", "max_rows = 0, pack_max_bytes = 0, k_block = 0"),
    ("vectorize", 'width = 1, select = "kernel,!fill|copy"'),
    ("epilogue", 'select = "*"'),
    ("nest", 'location = "SRAM", panels = false, min_rows = 1, fraction = 1.0, unit_taps = false'),
]


@pytest.mark.parametrize(("name", "options"), GOOD, ids=[f"{g[0]}-{g[1]}" for g in GOOD])
def test_edge_values_inside_the_domain_load(tmp_path: Path, name: str, options: str) -> None:
    path = tmp_path / "chip.toml"
    path.write_text(f'{HEADER}[[pipeline]]\npass = "{name}"\noptions = {{ {options} }}\n')
    assert [p.name for p in load_target(path).passes] == [name]


def test_every_bundled_target_is_valid() -> None:
    for name, path in bundled_targets().items():
        assert load_target(path).passes, name


def _numeric_options() -> list[tuple[str, str]]:
    out = []
    for name, cls in sorted(PASSES.items()):
        for option, kind in pass_options(cls).items():
            if kind in (int, float):
                out.append((name, option))
    return out


@pytest.mark.parametrize(("name", "option"), _numeric_options())
def test_no_numeric_option_takes_a_negative_value(name: str, option: str) -> None:
    """The audit: every int or float option of every registered pass has a domain."""
    with pytest.raises(OptionError) as info:
        make_pass(name, **{option: -1})
    assert info.value.option == option
    assert f"option '{option}'" in str(info.value)


def test_defaults_are_inside_their_domains() -> None:
    for name, cls in PASSES.items():
        defaults = {
            f.name: f.default
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING
        }
        assert make_pass(name, **defaults) == cls()


def test_locations_in_python_are_not_checked_against_a_target() -> None:
    """Built in Python (tests, golden files), a pass may name any location: only a
    target file knows which memories exist."""
    assert make_pass("cache", location="SRAM").location == "SRAM"
    assert make_pass("place", locations="DRAM, L1").locations == ("DRAM", "L1")
