"""Golden text tests, one file per rule: ``golden/<pass>/<case>.txt`` (reviewed by hand).

A case file reads::

    rule: one line stating the rule the case shows
    options: key=value, ...          (optional: the pass's options)
    === before
    <Stripe IR>
    === after
    <Stripe IR, or the word "unchanged">

The test parses ``before``, runs the pass named by the folder, and compares
the printed result with ``after`` ("unchanged": the pass returns the very same
program object).  Both texts verify, and the result computes what ``before``
computes on random inputs.  Set STRIPEML_UPDATE_GOLDEN=1 to rewrite the
``after`` sections (except "unchanged" ones), then review the diff.

``golden/README.md`` indexes the cases: per pass, each rule and the case
that shows it.  Two tests keep it honest: every registered pass has a
folder of cases, and every case file is listed under its pass (and every
listed file exists).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from stripeml.ir import format, parse, verify
from stripeml.passes import PASSES, make_pass

from .helpers import assert_same_results

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(f"{p.parent.name}/{p.stem}" for p in GOLDEN.glob("*/*.txt"))
INDEX = GOLDEN / "README.md"


def _read(path: Path) -> tuple[str, dict[str, object], str, str]:
    head, rest = path.read_text().split("=== before\n", 1)
    before, after = rest.split("=== after\n", 1)
    rule, options = "", {}
    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key == "rule":
            rule = value.strip()
        elif key == "options":
            for item in filter(None, (s.strip() for s in value.split(","))):
                k, _, v = item.partition("=")
                options[k.strip()] = ast.literal_eval(v.strip())
    return rule, options, before, after


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    path = GOLDEN / f"{case}.txt"
    rule, options, before, after = _read(path)
    assert rule, f"{case}: the file states no rule"
    program = parse(before)
    assert format(program) == before, "the before text is in printed form"
    verify(program)
    result = make_pass(path.parent.name, **options).run(program)
    if after.strip() == "unchanged":
        assert result is program, f"{case}: expected no change\n{format(result)}"
        return
    text = format(result)
    if os.environ.get("STRIPEML_UPDATE_GOLDEN"):
        path.write_text(path.read_text().split("=== after\n", 1)[0] + "=== after\n" + text)
        after = text
    assert text == after
    verify(result)
    assert_same_results(program, result)


def _indexed() -> set[str]:
    """``pass/case.txt`` for every case file the index lists under a ``## `pass` `` heading."""
    listed: set[str] = set()
    section = None
    for line in INDEX.read_text().splitlines():
        heading = re.fullmatch(r"## `(\w+)`", line.strip())
        if heading:
            section = heading.group(1)
        elif section is not None:
            listed.update(f"{section}/{name}" for name in re.findall(r"`(\w+\.txt)`", line))
    return listed


def test_every_registered_pass_has_golden_cases() -> None:
    missing = sorted(name for name in PASSES if not any((GOLDEN / name).glob("*.txt")))
    assert not missing, f"registered passes without golden cases: {missing}"


def test_index_lists_every_case() -> None:
    on_disk = {f"{p.parent.name}/{p.name}" for p in GOLDEN.glob("*/*.txt")}
    listed = _indexed()
    assert not on_disk - listed, f"cases missing from golden/README.md: {sorted(on_disk - listed)}"
    assert not listed - on_disk, f"golden/README.md lists no such cases: {sorted(listed - on_disk)}"
