"""The thread-count knob: ``compile(..., threads=)`` and ``STRIPEML_NUM_THREADS``.

The count becomes the target's ``threads`` fact before its pipeline is built,
so the ``thread`` pass (``$threads``) and the CPU runtime see the same number;
results are checked against NumPy either way.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.api import THREADS_VARIABLE
from stripeml.errors import StripeError, TargetError
from stripeml.targets import INTERP, load_target, resolve

MATMUL = "function (A[M, K], B[K, N]) -> (C) {\n    C[m, n : M, N] = +(A[m, k] * B[k, n]);\n}\n"
SRC = Path(stripeml.__file__).parent


@pytest.fixture(autouse=True)
def _no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)


@pytest.fixture
def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((64, 48)).astype(np.float32),
        rng.standard_normal((48, 80)).astype(np.float32),
    )


def _thread_pass_counts(f: stripeml.api.Function) -> list[int]:
    return [p.threads for p in f.target.passes if p.name == "thread"]


def _check(f: stripeml.api.Function, a: np.ndarray, b: np.ndarray, threads: int) -> str:
    """``f`` runs on ``threads`` threads everywhere, and computes ``a @ b``; its IR."""
    assert f.target.threads == threads
    assert _thread_pass_counts(f) == [threads]
    assert f.backend.options.threads == threads  # type: ignore[attr-defined]
    exe = f.lower(a, b)
    assert exe._compiled.threads == threads  # type: ignore[attr-defined]
    np.testing.assert_allclose(f(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    return exe.ir


def test_one_thread_means_no_thread_splits(inputs: tuple[np.ndarray, np.ndarray]) -> None:
    ir = _check(stripeml.compile(MATMUL, threads=1), *inputs, threads=1)
    assert "#thread" not in ir


def test_two_threads_split_the_kernel(inputs: tuple[np.ndarray, np.ndarray]) -> None:
    ir = _check(stripeml.compile(MATMUL, threads=2), *inputs, threads=2)
    assert "#thread" in ir


def test_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, inputs: tuple[np.ndarray, np.ndarray]
) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, "1")
    assert "#thread" not in _check(stripeml.compile(MATMUL), *inputs, threads=1)
    monkeypatch.setenv(THREADS_VARIABLE, " 3 ")
    assert stripeml.compile(MATMUL).target.threads == 3
    _check(stripeml.compile(MATMUL, threads=2), *inputs, threads=2)  # the argument wins
    monkeypatch.setenv(THREADS_VARIABLE, "")  # empty: unset
    assert stripeml.compile(MATMUL).target == resolve("cpu")


@pytest.mark.parametrize("value", ["x", "0", "-2", "1.5", "4 threads"])
def test_a_bad_variable_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, value)
    with pytest.raises(
        StripeError, match=rf"^{THREADS_VARIABLE}='{value.strip()}': must be a positive"
    ):
        stripeml.compile(MATMUL)


@pytest.mark.parametrize("value", [0, -1, True, "2", 1.5])
def test_a_bad_argument_is_an_error(value: object) -> None:
    with pytest.raises(StripeError, match=r"threads= must be a positive integer .* got "):
        stripeml.compile(MATMUL, threads=value)  # type: ignore[arg-type]


def test_targets_are_frozen_and_cached_per_file_and_count() -> None:
    three = resolve("cpu", threads=3)
    assert resolve("cpu", threads=3) is three
    assert resolve("cpu", threads=2).threads == 2 and resolve("cpu", threads=2) != three
    assert resolve("cpu") is resolve("cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        three.threads = 1  # type: ignore[misc]


def test_references_follow_and_the_file_is_still_checked(tmp_path: Path) -> None:
    path = tmp_path / "chip.toml"
    path.write_text(
        'backend = "cpu"\nthreads = 8\n[[memory]]\nname = "DRAM"\nsize = "1 GiB"\n'
        '[[pipeline]]\npass = "thread"\noptions = { threads = "$threads" }\n'
    )
    assert load_target(path).passes[0].threads == 8  # type: ignore[attr-defined]
    target = load_target(path, threads=3)
    assert target.threads == 3 and target.passes[0].threads == 3  # type: ignore[attr-defined]
    path.write_text(path.read_text().replace("threads = 8", "threads = 0"))
    with pytest.raises(TargetError, match=r"chip\.toml: threads: must be a positive integer"):
        load_target(path, threads=3)


def test_target_objects_and_the_interpreter() -> None:
    built = load_target("cpu", threads=2)
    assert stripeml.compile(MATMUL, target=built, threads=2).target is built
    with pytest.raises(
        TargetError, match=r"threads=3: target 'cpu' is a Target built with threads=2"
    ):
        stripeml.compile(MATMUL, target=built, threads=3)
    assert stripeml.compile(MATMUL, target="interp", threads=4).target is INTERP


def test_a_target_object_ignores_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    built = load_target("cpu", threads=2)
    monkeypatch.setenv(THREADS_VARIABLE, "1")
    assert stripeml.compile(MATMUL, target=built).target is built


def test_onnx_compile_takes_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import stripeml.onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 48])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [48, 80])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x, w], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    a, b = np.ones((64, 48), np.float32), np.arange(48 * 80, dtype=np.float32).reshape(48, 80) / 100
    for threads in (1, 2):
        f = stripeml.onnx.compile(model, threads=threads)
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5)
        exe = f.lower(a, b)
        assert exe is not None and exe.function.target.threads == threads
        assert ("#thread" in exe.ir) == (threads > 1)
    monkeypatch.setenv(THREADS_VARIABLE, "1")
    assert stripeml.onnx.compile(model).resolved_target.threads == 1
    monkeypatch.setenv(THREADS_VARIABLE, "many")
    with pytest.raises(StripeError, match=THREADS_VARIABLE):
        stripeml.onnx.compile(model)


def test_the_variable_is_read_at_the_api_boundary_only() -> None:
    """STYLE.md: no environment variable read deep inside; options flow down."""
    readers = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if f'"{THREADS_VARIABLE}"' in path.read_text(encoding="utf-8")
    )
    assert readers == ["api/__init__.py"]  # the module stripeml.api
