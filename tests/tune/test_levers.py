"""The levers a tune has beyond register tiles: a convolution left direct
(``winograd``'s ``enabled``) and small kernels on one thread (``thread``'s
``serial_below``), each a choice for one kernel, checked against NumPy."""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.ir.nodes import work_estimate
from stripeml.passes._kernel_choices import kernel_key, tuning_point
from stripeml.passes.manager import run_pipeline
from stripeml.tuning.space import axes, neighbours

from .helpers import MATMUL, matmul_inputs, root_kernels, through_point

TWO_CONVS = """
function (I[N, H, W, C], K1[KH, KW, C, M], K2[KH, KW, M, P]) -> (O) {
    T[n, y, x, m : N, H - 2, W - 2, M] = +(I[n, y + ky, x + kx, c] * K1[ky, kx, c, m]);
    O[n, y, x, p : N, H - 4, W - 4, P] = +(T[n, y + ky, x + kx, m] * K2[ky, kx, m, p]);
}
"""


def _convs():
    rng = np.random.default_rng(3)
    image = rng.standard_normal((1, 20, 20, 32)).astype(np.float32)
    k1 = (rng.standard_normal((3, 3, 32, 32)) * 0.1).astype(np.float32)
    k2 = (rng.standard_normal((3, 3, 32, 32)) * 0.1).astype(np.float32)
    f = stripeml.compile(TWO_CONVS, target="cpu", threads=2, constants={"K1": k1, "K2": k2})
    t = np.zeros((1, 18, 18, 32), np.float32)
    for ky in range(3):
        for kx in range(3):
            t += np.einsum("nyxc,cm->nyxm", image[:, ky : ky + 18, kx : kx + 18], k1[ky, kx])
    want = np.zeros((1, 16, 16, 32), np.float32)
    for ky in range(3):
        for kx in range(3):
            want += np.einsum("nyxm,mp->nyxp", t[:, ky : ky + 16, kx : kx + 16], k2[ky, kx])
    return f, image, want


def test_the_space_has_both_levers():
    f, image, _ = _convs()
    space = axes(f.target, tuning_point(f.target.passes))
    found = {(a.pass_name, a.option): a for a in space}
    assert found[("winograd", "enabled")].start is True
    assert found[("thread", "serial_below")].start == 0
    steps = list(neighbours({}, space))
    assert {"winograd": {"enabled": False}} in steps
    assert {"thread": {"serial_below": 1 << 18}} in steps


def test_one_convolution_left_direct():
    f, image, want = _convs()
    passes, program, at_point = through_point(f, [image])
    convs = [k for k in root_kernels(at_point) if "contraction" in k.tags]
    assert len(convs) == 2
    plain = run_pipeline(program, passes).program
    wino = {k.name for k in root_kernels(plain) if "winograd" in k.tags}
    # the control: both convolutions are rewritten without a choice
    assert any(n.startswith(convs[0].name) for n in wino)
    assert any(n.startswith(convs[1].name) for n in wino)
    choice = {kernel_key(at_point.root, convs[0]): {"winograd": {"enabled": False}}}
    tuned = run_pipeline(program, passes, choices=choice).program
    wino = {k.name for k in root_kernels(tuned) if "winograd" in k.tags}
    assert not any(n.startswith(convs[0].name + "_") for n in wino)
    assert any(n.startswith(convs[1].name + "_") for n in wino)
    got = f.backend.compile(tuned).run({"I": image, "K1": f.constants["K1"],
                                        "K2": f.constants["K2"]})["O"]  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_small_kernels_on_one_thread():
    f, image, want = _convs()
    passes, program, at_point = through_point(f, [image])
    second = [k for k in root_kernels(at_point) if "contraction" in k.tags][1]
    plain = run_pipeline(program, passes).program
    parts = [k for k in root_kernels(plain) if k.name.startswith(second.name)]
    threaded = [k for k in parts if "thread" in k.tags]
    assert threaded  # the control: without a choice its parts are split
    below = 1 << 22
    small = {k.name for k in parts if work_estimate(k) < below}
    large = {k.name for k in parts if work_estimate(k) >= below and "thread" in k.tags}
    assert small
    choice = {kernel_key(at_point.root, second): {"thread": {"serial_below": below}}}
    tuned = run_pipeline(program, passes, choices=choice).program
    by_name = {k.name: k for k in root_kernels(tuned)}
    for name in small:
        assert "serial" in by_name[name].tags and "thread" not in by_name[name].tags
    for name in large:
        assert "thread" in by_name[name].tags
    others = {k.name for k in root_kernels(plain) if not k.name.startswith(second.name)}
    assert all("serial" not in by_name[n].tags for n in others if n in by_name)
    compiled = f.backend.compile(tuned)
    infos = {s.kernel.block_name: s.kernel for s in compiled.module.steps if s.kernel}
    assert all(not infos[n].splittable for n in small if n in infos)
    assert any(n in infos for n in small)
    got = compiled.run({"I": image, "K1": f.constants["K1"], "K2": f.constants["K2"]})["O"]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_serial_kernel_runs_whole_on_one_thread():
    """A ``#serial`` matmul is one step the runtime never splits, and computes A @ B."""
    f = stripeml.compile(MATMUL, target="cpu", threads=2)
    a, b = matmul_inputs(96, 128, 256)
    passes, program, at_point = through_point(f, [a, b])
    (k,) = root_kernels(at_point)
    plain = f.backend.compile(run_pipeline(program, passes).program)
    assert any(s.kernel.splittable for s in plain.module.steps if s.kernel)  # the control
    choice = {kernel_key(at_point.root, k): {"thread": {"serial_below": 1 << 24}}}
    tuned = f.backend.compile(run_pipeline(program, passes, choices=choice).program)
    assert not any(s.kernel.splittable for s in tuned.module.steps if s.kernel)
    np.testing.assert_allclose(tuned.run({"A": a, "B": b})["C"], a @ b, rtol=1e-4, atol=1e-4)


SHARED = """
function (I[N, H, W, C], K1[KH, KW, C, M], K2[KH, KW, M, P]) -> (O, S) {
    T[n, y, x, m : N, H - 2, W - 2, M] = +(I[n, y + ky, x + kx, c] * K1[ky, kx, c, m]);
    R = relu(T);
    O[n, y, x, p : N, H - 4, W - 4, P] = +(R[n, y + ky, x + kx, m] * K2[ky, kx, m, p]);
    S = T * 2.0;
}
"""


def test_a_choice_elsewhere_never_changes_what_winograd_merges():
    """``winograd`` merges a convolution's only reader into its output
    transform.  Run on a segment (the kernels before another kernel's choice),
    it would not see that ``S`` reads the convolution's result too; the
    segments' runs contradict each other, so the pass runs whole, as without
    choices, and a choice that changes nothing changes nothing."""
    rng = np.random.default_rng(5)
    image = rng.standard_normal((1, 20, 20, 32)).astype(np.float32)
    k1 = (rng.standard_normal((3, 3, 32, 32)) * 0.1).astype(np.float32)
    k2 = (rng.standard_normal((3, 3, 32, 32)) * 0.1).astype(np.float32)
    f = stripeml.compile(SHARED, target="cpu", threads=2, constants={"K1": k1, "K2": k2})
    passes, program, at_point = through_point(f, [image])
    last = root_kernels(at_point)[-1]  # S = T * 2
    assert "eltwise" in last.tags
    plain = run_pipeline(program, passes).program
    assert any("winograd" in k.tags for k in root_kernels(plain))  # the control
    choice = {kernel_key(at_point.root, last): {"winograd": {"enabled": False}}}
    tuned = run_pipeline(program, passes, choices=choice).program
    assert tuned == plain
    t = np.zeros((1, 18, 18, 32), np.float32)
    for ky in range(3):
        for kx in range(3):
            t += np.einsum("nyxc,cm->nyxm", image[:, ky : ky + 18, kx : kx + 18], k1[ky, kx])
    got = f.backend.compile(tuned).run({"I": image, "K1": k1, "K2": k2})
    np.testing.assert_allclose(got["S"], 2 * t, rtol=1e-3, atol=1e-3)
