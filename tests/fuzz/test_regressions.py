"""Every saved regression case (``regressions/*.json``) replayed on every target.

A program case must come out ``ok`` (or a documented ``unsupported``) on each
target; a parser case must raise nothing but StripeErrors.  A case whose bug
is not fixed yet carries ``xfail`` (the reason and the targets it fails on):
those targets are strict expected failures, so the fix shows up as an XPASS
that asks for the mark to go.
"""

from __future__ import annotations

import json

import pytest

from .backends import ALL_TARGETS, available_targets
from .minimise import REGRESSIONS
from .pool import Pool
from .program import from_json

FILES = sorted(REGRESSIONS.glob("*.json"))
RECORDS = {p.name: json.loads(p.read_text()) for p in FILES}
PROGRAMS = [n for n, r in RECORDS.items() if "case" in r]
PARSERS = [n for n, r in RECORDS.items() if "text" in r]


@pytest.fixture(scope="module")
def pool():
    with Pool(1, 120.0) as p:
        yield p


def _one(pool: Pool, func: str, payload: dict, timeout: float) -> dict:
    return [r for _, r in pool.run([(0, func, payload)], timeout)][-1]


def test_regression_files_are_well_formed() -> None:
    assert set(PROGRAMS) | set(PARSERS) == set(RECORDS)
    for name in PROGRAMS:
        record = RECORDS[name]
        program, inputs = from_json(record["case"])
        assert program.source() == record["source"], name  # the text shown is the case run
        assert set(inputs) == {p.name for p in program.params}, name
        xfail = record.get("xfail")
        assert xfail is None or (xfail["reason"] and set(xfail["targets"]) <= set(ALL_TARGETS)), (
            name
        )


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_program_regression(pool: Pool, request, name: str, target: str) -> None:
    if target not in available_targets():
        pytest.skip(f"{target} is not available here")
    record = RECORDS[name]
    xfail = record.get("xfail")
    if xfail and target in xfail["targets"]:
        request.applymarker(pytest.mark.xfail(reason=xfail["reason"], strict=True))
    payload = {
        "case": record["case"],
        "seed": record["found"].get("seed") or 0,
        "targets": [target],
        "modes": {target: record.get("mode") or "positional"},
    }
    result = _one(pool, "runner:check", payload, 120.0)
    assert "reference_crash" not in result, result["reference_crash"]
    outcome = result["outcomes"][0] if result.get("outcomes") else result
    assert outcome["status"] in ("ok", "unsupported"), f"{record['source']}\n{outcome}"


@pytest.mark.parametrize("name", PARSERS)
def test_parser_regression(pool: Pool, request, name: str) -> None:
    record = RECORDS[name]
    if record.get("xfail"):
        request.applymarker(pytest.mark.xfail(reason=record["xfail"]["reason"], strict=True))
    payload = {"kind": record["parser"], "text": record["text"]}
    if record.get("index") is not None:  # the corpus entry whose inputs a Tile mutant gets
        payload["index"] = record["index"]
    result = _one(pool, "mutate:check", payload, 5.0)
    assert result["status"] == "ok", f"{record['text']!r}\n{result}"
