"""ONNX node tests that stripeml's backend does not run, grouped by reason.

Each key is the reason, each value a list of regular expressions matched
against test names (``test_<name>_cpu``).  Tests of operators the op library
does not implement are skipped by ``is_compatible`` (see ``docs/onnx.md`` for
the supported list); this file names the rest: tests of supported operators
that need something stripeml deliberately does not do.
"""

from __future__ import annotations

EXCLUDED: dict[str, list[str]] = {
    "strings: stripeml tensors are numeric": [
        r"^test_.*_string.*",
        r"^test_strnorm.*",
        r"^test_regex_full_match.*",
    ],
    "empty tensors (a dimension of size 0) are not supported": [],
    "bfloat16, float8, float4 and int4 element types have no Stripe dtype": [
        r"^test_.*_bfloat16.*",
        r"^test_.*float8.*",
        r"^test_.*_e4m3.*",
        r"^test_.*_e5m2.*",
        r"^test_.*float4.*",
        r"^test_.*_int4.*",
        r"^test_.*_uint4.*",
        r"^test_.*_int2.*",
        r"^test_.*_uint2.*",
    ],
    "sequences and optionals (not tensors)": [
        r"^test_sequence_.*",
        r"^test_optional_.*",
        r"^test_split_to_sequence.*",
        r"^test_identity_opt.*",
        r"^test_identity_sequence.*",
    ],
    "training ops and training-mode attributes": [
        r"^test_.*training.*",
        r"^test_adagrad.*",
        r"^test_adam.*",
        r"^test_momentum.*",
        r"^test_nesterov.*",
        r"^test_gradient.*",
    ],
}


def patterns() -> list[str]:
    return [p for group in EXCLUDED.values() for p in group]
