"""What the warm-start tests share: a small dense model, ``y = relu(x @ w + b)``
(a leaky one with ``alpha``), and a cold then a warm fresh process compiling a
model file on one disk cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

RNG = np.random.default_rng(14)
W = RNG.standard_normal((16, 8)).astype(np.float32)
B = RNG.standard_normal(8).astype(np.float32)
X = RNG.standard_normal((4, 16)).astype(np.float32)


def dense_model(alpha: float = 0.0) -> ModelProto:
    """``y = leaky_relu(x @ w + b, alpha)`` (``Relu`` when ``alpha`` is 0)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["z"]),
        helper.make_node("LeakyRelu", ["z"], ["y"], alpha=alpha)
        if alpha
        else helper.make_node("Relu", ["z"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cold_then_warm(
    child: str, model_file: str | Path, x: np.ndarray, tmp_path: Path
) -> list[tuple[object, np.ndarray]]:
    """Run ``child`` (Python source given ``MODEL X_NPY OUT_NPY``, saving its
    result to ``OUT_NPY`` and printing one JSON line last) twice in fresh
    processes on the cache folder ``tmp_path/cache``: the cold run, then the warm
    one.  Per run, the JSON it printed and the array it saved."""
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "STRIPEML_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for which in ("cold", "warm"):
        out = tmp_path / f"{which}.npy"
        proc = subprocess.run(
            [sys.executable, "-c", child, str(model_file), str(tmp_path / "x.npy"), str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append((json.loads(proc.stdout.strip().splitlines()[-1]), np.load(out)))
    return runs
