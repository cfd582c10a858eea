"""docs/onnx.md is generated from the op registry and must be current."""

from __future__ import annotations

from pathlib import Path

from stripeml.onnx.docs import render
from stripeml.onnx.ops import supported_ops

DOC = Path(__file__).resolve().parents[2] / "docs" / "onnx.md"


def test_docs_onnx_md_is_current():
    assert DOC.read_text() == render(), "regenerate: python -m stripeml.onnx.docs > docs/onnx.md"


def test_every_op_has_a_docstring():
    missing = [d.name for d in supported_ops() if not d.doc]
    assert not missing
