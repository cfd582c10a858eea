"""How a training step runs: the tensors the forward graph saves that are reshapes
of one another are views of one result (no copy in the program), and the
programs' split kernels run on PyTorch's own OpenMP team (no second set of
threads competing with PyTorch's spinning workers), with eager's gradients."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional
st = pytest.importorskip("stripeml.torch")


def _model() -> Any:
    # 3-D activations: the backward of each Linear needs its input as a matrix, so
    # the forward saves relu(x) and its (batch * seq, features) view
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())


def _steps(model: Any, compiled: Any, x: Any, steps: int = 3) -> None:
    eager = copy.deepcopy(model)
    target = torch.randn(4, 16, 32, generator=torch.Generator().manual_seed(1))
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_m = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        losses = []
        for m, opt in ((eager, opt_e), (compiled, opt_m)):
            opt.zero_grad()
            loss = F.mse_loss(m(x), target)
            loss.backward()
            losses.append(loss.item())
            if step == 0 and m is compiled:
                for (name, p), q in zip(eager.named_parameters(), model.parameters()):
                    torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)
            opt.step()
        assert losses[1] == pytest.approx(losses[0], rel=1e-4), (step, losses)


def test_saved_reshapes_are_views_of_one_result() -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = _model()
    compiled = torch.compile(model, backend="stripeml")
    x = torch.randn(4, 16, 32)
    saved: list[Any] = []

    def pack(t: Any) -> Any:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        compiled(x).sum().backward()
    _steps(model, compiled, x)
    forward = [p for p in st.last_programs(4) if p.kind == "forward"][-1]
    header = forward.source.split("{", 1)[0]
    outputs = set(re.findall(r"\w+", header.split("->", 1)[1]))
    reshapes = re.findall(r"(\w+) = reshape\((\w+),", forward.source)
    both = [(t, s) for t, s in reshapes if t in outputs and s in outputs]
    assert not both, f"outputs that are reshapes of outputs (copies): {both}"
    # the saved relu(x) and its matrix view share memory
    shared = [
        (a.shape, b.shape)
        for i, a in enumerate(saved)
        for b in saved[i + 1 :]
        if a.data_ptr() == b.data_ptr() and a.shape != b.shape and a.numel() == b.numel()
    ]
    assert shared, [t.shape for t in saved]


def test_kernels_run_on_torchs_openmp_team(monkeypatch) -> None:
    from stripeml.runtime import omp_team
    from stripeml.torch import threads

    if threads.openmp_team() is None:
        pytest.skip("PyTorch's parallel backend is not OpenMP here")
    calls = {"team": 0}
    run_batch = omp_team.TeamPool.run_batch

    def counted(self: Any, batch: Any, ptrs: int) -> bool:
        calls["team"] += 1
        return run_batch(self, batch, ptrs)

    monkeypatch.setattr(omp_team.TeamPool, "run_batch", counted)
    for entry, want_team in ((threads._ENTRY[0], True), (None, False)):
        monkeypatch.setattr(threads, "_ENTRY", [entry])
        calls["team"] = 0
        torch.manual_seed(0)
        torch._dynamo.reset()
        model = nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 32))
        compiled = torch.compile(model, backend="stripeml")
        _steps(model, compiled, torch.randn(4, 16, 32))
        assert (calls["team"] > 0) == want_team, calls


def test_thread_choice_follows_the_faster_and_probes_again() -> None:
    """Calls alternate (team first) for a probe, then the faster one runs; a probe
    that confirms the choice doubles the run before the next, one that changes it
    starts over at FIRST_RUN."""
    from stripeml.torch.threads import ThreadChoice

    c = ThreadChoice((1, 2))
    P, first = ThreadChoice.PROBE, ThreadChoice.FIRST_RUN

    def calls(n: int, team_s: float, native_s: float) -> list[bool]:
        seen = []
        for _ in range(n):
            t = c.next_is_team()
            seen.append(t)
            c.record(t, team_s if t else native_s)
        return seen

    assert calls(2 * P, 5e-3, 1e-3) == [True, False] * P
    assert not c.team and c.probes == 1
    assert calls(first, 5e-3, 1e-3) == [False] * first  # the native pool, faster
    assert calls(2 * P, 1e-3, 2e-3) == [True, False] * P  # probe again: the team wins
    assert c.team and c.probes == 2
    assert calls(first, 1e-3, 2e-3) == [True] * first  # changed: FIRST_RUN again
    calls(2 * P, 1e-3, 2e-3)  # confirmed: the next run is twice as long
    assert calls(2 * first, 1e-3, 2e-3) == [True] * (2 * first)
    assert c.next_is_team() and c._probing == 2 * P


def test_parameters_arrays_are_kept_between_steps_and_follow_new_memory(monkeypatch) -> None:
    """A parameter's array is made once and handed over again at later steps (the
    runtime then knows it); an in-place update is read where it was written,
    and a parameter given new memory (``p.data = ...``) is read there."""
    from stripeml.torch import tensors

    made: list[Any] = []
    original = tensors.host_array

    def spy(t: Any, layout: Any = None) -> Any:
        made.append(t)
        return original(t, layout)

    monkeypatch.setattr(tensors, "host_array", spy)
    from stripeml.runtime.cpu_run import CpuCompiled

    runs: list[set[int]] = []  # per program run: the addresses its kernels were given
    run_steps = CpuCompiled._run_steps

    def kernels(self: Any, pointers: Any, storages: Any, constant: bool = False) -> None:
        runs.append({p for p in pointers if p})
        run_steps(self, pointers, storages, constant)

    monkeypatch.setattr(CpuCompiled, "_run_steps", kernels)
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = _model()
    compiled = torch.compile(model, backend="stripeml")
    x = torch.randn(4, 16, 32)
    _steps(model, compiled, x, steps=2)
    params = list(model.parameters())
    made.clear()
    runs.clear()
    _steps(model, compiled, x, steps=2)  # (in-place SGD updates between steps)
    assert not any(any(t is p for p in params) for t in made), "a parameter was turned again"
    assert all(any(p.data_ptr() in run for run in runs) for p in params)
    with torch.no_grad():
        model[0].weight.data = torch.randn(64, 32)  # new memory
    runs.clear()
    _steps(model, compiled, x, steps=2)  # (losses and gradients as eager's)
    assert any(model[0].weight.data_ptr() in run for run in runs), "read the old memory"


def test_saved_channels_last_activations_are_permuted_views() -> None:
    """A convolution's output is stored channels-last in the forward program; saved
    for the backward, it comes back as PyTorch's permuted view of that memory
    (no transposing copy), which the backward program reads as stored, with
    eager's gradients (the depthwise and max-pool backward read it too)."""
    from stripeml.torch.tensors import dense_layout

    torch.manual_seed(0)
    torch._dynamo.reset()
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, groups=8),
        nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 4, 1), nn.Flatten(), nn.Linear(64, 3),
    )  # fmt: skip
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="stripeml")
    x = torch.randn(2, 3, 8, 8)
    saved: list[Any] = []

    def pack(t: Any) -> Any:
        saved.append(t)
        return t

    for step in range(2):
        model.zero_grad()
        eager.zero_grad()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            compiled(x).square().sum().backward()
        eager(x).square().sum().backward()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=f"{step} {name}")
    permuted = [t for t in saved if t.dim() == 4 and dense_layout(t) == (0, 2, 3, 1)]
    assert permuted, [(tuple(t.shape), t.stride()) for t in saved]


def test_a_kept_parameter_array_goes_with_its_tensor() -> None:
    import gc
    import weakref

    from stripeml.torch.tensors import HeldArrays

    held = HeldArrays()
    p = torch.nn.Parameter(torch.randn(4, 4))
    arr = held.array(0, p, None)
    assert arr is not None and held.array(0, p, None) is arr  # kept, handed again
    memory = weakref.ref(arr)
    del arr, p
    gc.collect()
    assert memory() is None and not held._held  # nothing keeps its memory alive


@pytest.mark.parametrize("pool", ["2x2", "3x3-s2-p1"])
def test_batch_norm_and_max_pool_train_channels_last(pool: str) -> None:
    """Between two convolutions, training-mode BatchNorm, ReLU and max pooling
    (values and indices, forward and backward) stay stored channels-last: no
    transposing copy of an activation in either program (``lower_layout.py``),
    and at every step eager's outputs, gradients and running statistics
    (overlapping padded windows: several taps of a window tie at ReLU's 0)."""
    from stripeml.torch.programs import last_programs

    torch.manual_seed(0)
    torch._dynamo.reset()
    mp = nn.MaxPool2d(2) if pool == "2x2" else nn.MaxPool2d(3, stride=2, padding=1)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), mp,
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5),
    )  # fmt: skip
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="stripeml")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_m = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(3)
    for step in range(4):
        x = torch.randn(4, 3, 12, 12, generator=g)
        outs = []
        for m, opt in ((eager, opt_e), (compiled, opt_m)):
            opt.zero_grad()
            y = m(x)
            y.square().sum().backward()
            opt.step()
            outs.append(y.detach())
        torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-5, msg=str(step))
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=f"{step} {name}")
    for (name, b), c in zip(eager.named_buffers(), model.buffers()):
        torch.testing.assert_close(c, b, rtol=1e-4, atol=1e-5, msg=name)
    sources = {p.kind: p.source for p in last_programs(2)}
    assert set(sources) == {"forward", "backward"}
    transpose = re.compile(r"\[i0, i1, i2, i3 : [^\]]*\] = =\(\w+\[i0, i2, i3, i1\]\)")
    for kind, source in sources.items():
        assert not transpose.findall(source), (kind, transpose.findall(source))


def test_attention_heads_split_without_host_copies() -> None:
    """Splitting a projection into heads (``[L, N, E]`` viewed ``[L, N * H, E / H]``)
    and merging them back are reshapes of which neither shape refines the
    other: each is one copy kernel into the shape refining both, then a view,
    so no program is left with a ``reshape`` copy on the host; the gradients
    are eager's."""
    from stripeml.torch.programs import last_programs

    torch.manual_seed(0)
    torch._dynamo.reset()
    model = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="stripeml")
    x = torch.randn(2, 8, 32)
    for m in (eager, compiled):
        m(x).square().sum().backward()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    programs = last_programs(2)
    assert {p.kind for p in programs} == {"forward", "backward"}
    for p in programs:
        assert "special reshape" not in p.optimised, p.kind


def test_bias_and_activation_of_a_3d_linear_fuse_into_its_matmul() -> None:
    """A linear layer on a 3-D input is ``mm`` on the flattened rows, a view back,
    then the bias and the activation on the view: they are written before the
    view (``lower_layout.before_reshape``), so the matrix product's kernel
    applies them (no kernel of their own); outputs and gradients are eager's."""
    from stripeml.torch.programs import last_programs

    torch.manual_seed(0)
    torch._dynamo.reset()
    # (sizes the pipeline tiles: a tiled matrix product takes elementwise work)
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 128), nn.ReLU())
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="stripeml")
    x = torch.randn(4, 64, 128)
    for m in (eager, compiled):
        m(x).square().sum().backward()
    torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    (forward,) = [p for p in last_programs() if p.kind == "forward"][-1:]
    kernels = re.findall(r"^  block (\S+) .*?// (.*)$", forward.optimised, re.M)
    for act in ("relu(", "erf("):
        found = [text for _, text in kernels if act in text]
        assert found and all("+(" in text for text in found), (act, kernels)
