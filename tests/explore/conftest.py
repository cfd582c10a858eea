"""Pages the explorer tests share, each written once per test process."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import stripeml

pytest.importorskip("matplotlib", reason="the explore extra (matplotlib) is not installed")

MLP = (Path(stripeml.__file__).parent / "examples" / "mlp.tile").read_text()


def mlp_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (
        rng.standard_normal((256, 384), np.float32),
        rng.standard_normal((384, 256), np.float32),
        rng.standard_normal((256,), np.float32),
    )


def light_resnet50() -> str:
    onnx = pytest.importorskip("onnx")
    path = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
    if not path.is_file():
        pytest.skip(f"the onnx package ships no {path.name}")
    return str(path)


@pytest.fixture(scope="session")
def npu_exe():
    """The dense layer on examples/npu: two kernels, SRAM tiles placed by ``place``."""
    return stripeml.compile(MLP, target="examples/npu").lower(*mlp_inputs())


@pytest.fixture(scope="session")
def npu_page(npu_exe, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("explore") / "mlp-npu.html"
    npu_exe.explore(out, *mlp_inputs())
    return out


@pytest.fixture(scope="session")
def resnet_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``stripeml explore`` on the light ResNet-50 for the CPU (the issue's command)."""
    from stripeml.cli import main

    model = light_resnet50()
    out = tmp_path_factory.mktemp("explore") / "resnet.html"
    assert main(["explore", model, "--target", "cpu", "-o", str(out)]) == 0
    assert os.path.getsize(out) > 0
    return out
