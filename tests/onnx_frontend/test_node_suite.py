"""The ONNX backend conformance tests (node tests shipped with ``onnx``)
through ``stripeml.onnx.backend`` on the ``cpu`` target.

Excluded, and so reported as skipped/deselected rather than run:

* tests whose graph uses an operator the op library does not implement
  (computed from the registry; ``docs/onnx.md`` lists what is supported);
* the groups in ``exclusions.py``, each with its reason.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx.backend.test  # noqa: E402
from onnx.backend.test.loader import load_model_tests  # noqa: E402

import stripeml.onnx.backend as stripe_backend  # noqa: E402
from stripeml.onnx.ops import lookup  # noqa: E402
from stripeml.targets import resolve  # noqa: E402

from .exclusions import float16_ulp_cases, patterns  # noqa: E402

backend_test = onnx.backend.test.BackendTest(stripe_backend, __name__)
backend_test.include(r"^test_.*_cpu$")
for _pattern in patterns(resolve("cpu").vector_width):
    backend_test.exclude(_pattern)

UNSUPPORTED: dict[str, list[str]] = {}  # test name -> operators the library lacks
_CASES = {c.name: c for c in load_model_tests(kind="node")}
for _case in _CASES.values():
    _missing = sorted(
        {n.op_type for n in _case.model.graph.node if lookup(n.op_type, n.domain) is None}
    )
    if _missing:
        UNSUPPORTED[_case.name] = _missing
        backend_test.exclude("^" + re.escape(_case.name) + "_cpu$")

# Only node tests here: the zoo models are downloaded by the runner, and the
# light models have their own tests (test_models.py).
backend_test.exclude(
    r"^test_(bvlc_alexnet|densenet121|inception_v1|inception_v2|resnet50|shufflenet"
    r"|squeezenet|vgg19|zfnet512)_.*"
)

globals().update(backend_test.test_cases)


@pytest.mark.parametrize("name", float16_ulp_cases())
def test_float16_within_ulps(name: str) -> None:
    """The float16 cases excluded for rounding are still right to 3 float16 ulps."""
    case = _CASES[f"test_{name}"]
    inputs, expected = case.data_sets[0]
    got = stripe_backend.prepare(case.model, "CPU").run(inputs)
    for g, want in zip(got, expected):
        assert g.dtype == want.dtype == np.float16
        ulps = np.abs(g.view(np.int16).astype(np.int32) - want.view(np.int16).astype(np.int32))
        assert int(ulps.max()) <= 3, name
