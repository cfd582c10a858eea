"""Golden text for the lowering of a few programs (reviewed by hand).

Each ``golden/NAME.tile`` states its input signature in a first-line comment;
``golden/NAME.ir`` is the expected Stripe IR.  Set STRIPEML_UPDATE_GOLDEN=1 to
rewrite the expectations, then review the diff before committing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

import stripeml

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.stem for p in GOLDEN.glob("*.tile"))
DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}


def _inputs(source: str) -> list[np.ndarray]:
    header = source.splitlines()[0]
    specs = re.findall(r"(\w+)=(\w+)\[([\d,]*)\]", header)
    return [
        np.zeros(tuple(int(d) for d in dims.split(",") if d), DTYPES[dt]) for _, dt, dims in specs
    ]


@pytest.mark.parametrize("name", CASES)
def test_lowering_golden(name: str) -> None:
    source = (GOLDEN / f"{name}.tile").read_text()
    exe = stripeml.compile(source, name=name, target="interp").lower(*_inputs(source))
    expected_path = GOLDEN / f"{name}.ir"
    if os.environ.get("STRIPEML_UPDATE_GOLDEN"):
        expected_path.write_text(exe.ir)
    assert exe.ir == expected_path.read_text()
    assert stripeml.ir.format(stripeml.ir.parse(exe.ir)) == exe.ir
