"""The ONNX backend conformance tests (node tests shipped with ``onnx``)
through ``stripeml.onnx.backend`` on the ``cpu`` target.

Excluded, and so reported as skipped/deselected rather than run:

* tests whose graph uses an operator the op library does not implement
  (computed from the registry; ``docs/onnx.md`` lists what is supported);
* the groups in ``exclusions.py``, each with its reason.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("onnx")

import onnx.backend.test  # noqa: E402
from onnx.backend.test.loader import load_model_tests  # noqa: E402

import stripeml.onnx.backend as stripe_backend  # noqa: E402
from stripeml.onnx.ops import lookup  # noqa: E402

from .exclusions import patterns  # noqa: E402

backend_test = onnx.backend.test.BackendTest(stripe_backend, __name__)
backend_test.include(r"^test_.*_cpu$")
for _pattern in patterns():
    backend_test.exclude(_pattern)

UNSUPPORTED: dict[str, list[str]] = {}  # test name -> operators the library lacks
for _case in load_model_tests(kind="node"):
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
