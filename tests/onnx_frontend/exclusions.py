"""ONNX node tests that stripeml's backend does not run, grouped by reason.

Each key is the reason, each value a list of regular expressions matched
against test names (``test_<name>_cpu``).  Tests whose graph uses an operator
the op library does not implement are excluded by ``test_node_suite.py``
itself (computed from the registry; ``docs/onnx.md`` lists what is
supported); this file names the rest: tests of supported operators that need
something stripeml does not do.
"""

from __future__ import annotations

EXCLUDED: dict[str, list[str]] = {
    "strings: stripeml tensors are numeric": [
        r"^test_.*_string.*",
        r"^test_strnorm.*",
        r"^test_regex_full_match.*",
        # string keys (LabelEncoder's numeric mappings are supported, ops/ml.py)
        r"^test_ai_onnx_ml_label_encoder_tensor_mapping_cpu$",
        r"^test_ai_onnx_ml_label_encoder_tensor_value_only_mapping_cpu$",
    ],
    "float16: the reference rounds differently (one float16 ulp off, beyond rtol=1e-3)": [
        r"^test_attention_4d_causal_fp16_expanded_cpu$",
        r"^test_causal_conv_with_state_silu_fp16_expanded_cpu$",
        # 8 lanes too (znver3): one element 2 float16 ulps off (rtol 1.03e-3)
        r"^test_attention_4d_gqa_with_past_and_present_fp16_expanded_cpu$",
        # the same definitions, expanded by the importer (ops/functions.py)
        r"^test_attention_4d_causal_fp16_cpu$",
        r"^test_causal_conv_with_state_silu_fp16_cpu$",
        r"^test_attention_4d_gqa_with_past_and_present_fp16_cpu$",
    ],
    "the expected values carry the reference's float32 FFT rounding (an imaginary "
    "part of 1.9e-7 where the exact inverse is 0, the input being real integers), "
    "beyond the tests' absolute tolerance of 1e-7 (test_ops_spectral.py checks the "
    "same transforms against a float64 FFT)": [
        r"^test_dft_inverse_cpu$",
        r"^test_dft_inverse_opset19_cpu$",
    ],
    "random draws: the stored values are one draw of a generator the onnx reference "
    "does not reproduce either, even seeded (test_runtime_sizes.py checks the draws "
    "against the reference's with a seed, and their statistics without)": [
        r"^test_bernoulli.*",
    ],
    "image file codecs (JPEG, PNG, TIFF, WebP ...): decoding a file is not tensor "
    "computation; decode images before calling the model": [
        r"^test_image_decoder_.*",
    ],
    "sequences and optionals (not tensors)": [
        r"^test_sequence_.*",
        r"^test_optional_.*",
        r"^test_split_to_sequence.*",
        r"^test_identity_opt.*",
        r"^test_identity_sequence.*",
        r"^test_if_opt_cpu$",  # a branch returns an optional
        r"^test_if_seq_cpu$",  # a branch returns a sequence
        r"^test_loop13_seq_cpu$",  # the loop carries a sequence
        r"^test_loop16_seq_none_cpu$",  # an optional sequence
    ],
    "training-mode attributes (dropout and batch norm in training mode: the "
    "importer compiles inference graphs)": [
        r"^test_.*training.*",
    ],
}


#: Excluded only where the host's CPU has 16 f32 lanes (AVX-512): the CPU
#: backend's vector sums then run over 16 partial sums instead of 8, and the
#: float32 rounding they give differs from the reference's float16 arithmetic
#: by up to 3 float16 ulps (``test_float16_within_ulps`` checks that bound).
WIDE_VECTORS: dict[str, list[str]] = {
    "float16 on 16-lane hosts: vector sums round differently (<= 3 float16 ulps off, "
    "beyond rtol=1e-3)": [
        r"^test_attention_4d_fp16_expanded_cpu$",
        r"^test_attention_4d_gqa_causal_nonpad_decode_fp16_expanded_cpu$",
        r"^test_attention_4d_fp16_cpu$",
        r"^test_attention_4d_gqa_causal_nonpad_decode_fp16_cpu$",
    ],
}


def patterns(vector_width: int = 8) -> list[str]:
    """Every excluded pattern, for a host whose CPU target has ``vector_width`` lanes."""
    groups = list(EXCLUDED.values())
    if vector_width >= 16:
        groups += WIDE_VECTORS.values()
    return [p for group in groups for p in group]


def float16_ulp_cases() -> list[str]:
    """Test names (without ``_cpu``) of the float16 cases excluded for rounding."""
    groups = [g for reason, g in EXCLUDED.items() if reason.startswith("float16")]
    groups += WIDE_VECTORS.values()
    return [p[len("^test_") : -len("_cpu$")] for g in groups for p in g]
