"""bench/variants.py's target variants: each term replaces one pass option, the
result is a different target (another program-cache key), and bad terms are
usage errors before anything compiles.  Nothing here is timed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import variants  # noqa: E402


def _options(target, name):
    (spec,) = [p for p in target.pipeline if p.name == name]
    return dict(spec.options), spec.built


def test_base_is_the_cpu_target():
    base = variants.variant("base")
    assert base.name == "cpu" and any(p.name == "unroll" for p in base.pipeline)


def test_terms_replace_options_and_change_the_fingerprint():
    base = variants.variant("base")
    other = variants.variant("unroll.vector_groups=0+partial_sums.threads=1")
    options, built = _options(other, "unroll")
    assert options["vector_groups"] == 0 and built.vector_groups == 0
    assert _options(other, "partial_sums")[1].threads == 1
    # Everything else is as in the base target.
    assert _options(other, "thread")[0] == _options(base, "thread")[0]
    assert other.fingerprint() != base.fingerprint()


def test_an_off_term_leaves_a_pass_out():
    other = variants.variant("alias_view=off+unroll.rows=2")
    names = [p.name for p in other.pipeline]
    assert "alias_view" not in names and "unroll" in names
    assert _options(other, "unroll")[1].rows == 2
    with pytest.raises(SystemExit, match="no pass"):
        variants.variant("nosuch=off")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("unroll.vector_groups", "PASS.OPTION=VALUE"),
        ("nopass.x=1", "no pass"),
        ("unroll.nosuch=1", "no option 'nosuch'"),
        ("unroll.rows=-1", "must be positive"),
    ],
)
def test_bad_terms_are_usage_errors(spec, message):
    with pytest.raises(SystemExit, match=message):
        variants.variant(spec)


def test_a_fraction_is_a_float_option():
    # ``nest.fraction`` is a float option: "0.25" was passed on as a string and refused.
    other = variants.variant("nest.fraction=0.25+unroll.rows=3")
    options, built = _options(other, "nest")
    assert options["fraction"] == 0.25 and built.fraction == 0.25
    assert _options(other, "unroll")[1].rows == 3
    with pytest.raises(SystemExit, match="must be"):
        variants.variant("unroll.rows=1.5")
