"""Random affine contractions, checked against a brute-force oracle.

The strategy writes Tile source for one contraction with random affine index
polynomials; the oracle enumerates integer index tuples in plain Python loops,
keeps those where every access (output included) is in bounds and every
constraint holds, and aggregates per output element (unreached elements stay
0).  The oracle knows nothing of stripeml; ``test_references_selfcheck.py``
checks it against NumPy.

Every index is made to appear *alone* (coefficient +-1 plus a constant) in some
access dimension, so its range is always inferable and stripeml must not
raise.  The generator and the oracle live in ``tests/fuzz/`` (the differential
fuzzer extends both); this test draws the generator's default subset.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

try:
    from fuzz.choose import DrawChooser
    from fuzz.contraction import (  # noqa: F401  (re-exported for test_references_selfcheck)
        Access,
        Spec,
        Unbounded,
        bind_dims,
        brute_force,
        eval_int,
        index_ranges,
        output_shape,
    )
    from fuzz.gen_contraction import DIM_NAMES, Slot, gen_contraction
    from test_programs import TARGETS
except ImportError:  # tests/ imported as a package
    from tests.fuzz.choose import DrawChooser
    from tests.fuzz.contraction import (  # noqa: F401
        Access,
        Spec,
        Unbounded,
        bind_dims,
        brute_force,
        eval_int,
        index_ranges,
        output_shape,
    )
    from tests.fuzz.gen_contraction import DIM_NAMES, Slot, gen_contraction
    from tests.test_programs import TARGETS

# --------------------------------------------------------------------------
# The strategy (the generator itself is tests/fuzz/gen_contraction.py, which
# the differential fuzzer shares; the oracle is tests/fuzz/contraction.py)
# --------------------------------------------------------------------------


@st.composite
def contractions(draw) -> tuple[Spec, dict[str, tuple[int, ...]]]:
    """A random contraction and the input shapes to call it with."""
    ranks = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    dim_iter = iter(DIM_NAMES)
    slots = [
        Slot("AB"[t], tuple(next(dim_iter) for _ in range(rank))) for t, rank in enumerate(ranks)
    ]
    combo = "none" if len(slots) == 1 else draw(st.sampled_from(("*", "+")))
    agg = draw(st.sampled_from(("+", ">", "<", "*")))
    return gen_contraction(DrawChooser(draw), "O", slots, combo, agg, {})


def make_inputs(spec: Spec, shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if spec.agg == "*":
        # Keep products tame: factors near 1 (each tuple's value is near 1).
        lo, hi = (0.4, 0.6) if spec.combo == "+" else (0.8, 1.2)
    else:
        lo, hi = -1.0, 1.0
    return {name: rng.uniform(lo, hi, shapes[name]) for name, _ in spec.params}


# --------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@settings(
    max_examples=int(os.environ.get("STRIPEML_HYPOTHESIS_EXAMPLES", 60)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(drawn=contractions(), seed=st.integers(0, 2**32 - 1))
def test_random_contraction(target, drawn, seed):
    import stripeml

    spec, shapes = drawn
    source = spec.source()
    note(source)
    note(f"shapes: {shapes}")
    arrays = make_inputs(spec, shapes, seed)
    expected = brute_force(spec, arrays)
    # Output sizes come from the size expressions, evaluated independently.
    dims = bind_dims(spec, arrays)
    assert expected.shape == tuple(eval_int(s, dims) for s in spec.sizes)

    f = stripeml.compile(source, target=target)
    got = f(*(arrays[name] for name, _ in spec.params))
    assert isinstance(got, np.ndarray)
    assert got.shape == expected.shape
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
