"""``torch.compile(model, backend="stripeml")`` against PyTorch eager and inductor.

Inference (``torch.no_grad``, eval mode), batch 1, 2 threads for everyone, in one
process: each model of ``bench/models.py`` that is a ``torch.nn`` module here
(ResNet-18, MobileNetV2, the 2-layer ``nn.TransformerEncoder``, and
``--models`` for others) is compiled with the ``stripeml`` backend and with
torch's default ``inductor`` backend, each output checked against eager, then
the three are timed interleaved: short blocks with a 50 ms pause before each
(a library's spinning threads slow whatever runs next), the median of every
call.  One JSON line per model (the fields of ``bench/run.py``; ``stripeml_s``
the stripeml backend's median, ``baselines`` eager's and inductor's,
``compile_s`` each backend's first call, ``compiles`` how many programs the
stripeml backend compiled, ``max_err`` its largest difference from eager
relative to eager's largest value).  ``nn.TransformerEncoder`` runs with
PyTorch's fused attention fast path off, which has no decomposition for the
backends to see.

Training (``--train``, default ``small_cnn,transformer_block``): one step is
forward + backward + ``torch.optim.SGD`` step, each backend on its own copy of
the model from the same weights (``case: "train"``; ``max_err`` compares the
first step's loss).  ``bert_base_nn`` is a BERT-base-shaped ``nn.TransformerEncoder``
(d 768, 12 heads, 12 layers, sequence 128).

    .venv/bin/python bench/bench_torch.py
    .venv/bin/python bench/bench_torch.py --models resnet18 --blocks 10
    .venv/bin/python bench/bench_torch.py --models resnet50,bert_base_nn --train ""
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = ("resnet18", "mobilenet_v2", "transformer_encoder")


def _calls(fn, x, seconds: float = 0.2) -> list[float]:
    times: list[float] = []
    start = time.perf_counter()
    while not times or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    return times


def _local(name: str):
    """Models made here (not in bench/models.py): (module, input) or None."""
    import models
    import torch
    import torch.nn as nn

    g = torch.Generator().manual_seed(3)
    if name == "bert_base_nn":
        m, inputs = models.transformer_encoder(seq=128, d=768, heads=12, layers=12)
        return m, inputs["input"]
    if name == "small_cnn":
        m = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32),
            nn.ReLU(), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
        )  # fmt: skip
        return m, torch.randn(8, 3, 32, 32, generator=g)
    if name == "transformer_block":

        class Block(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)

            def forward(self, x):
                mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
                return self.layer(x, src_mask=mask, is_causal=True)

        return Block(), torch.randn(4, 64, 256, generator=g)
    return None


def _train(name: str, blocks: int, inductor: bool) -> None:
    import copy

    import torch
    import torch.nn.functional as F

    import stripeml.torch

    module, x = _local(name)
    module.train()
    with torch.no_grad():
        target = torch.randn(module(x).shape, generator=torch.Generator().manual_seed(4))
    record: dict = {"bench": "torch", "case": "train", "sizes": {"model": name,
                    "input": list(x.shape)}, "threads": 2, "target": "cpu",
                    "load_avg_1m": round(os.getloadavg()[0], 2)}  # fmt: skip
    steps, compile_s, first = {}, {}, {}
    before = stripeml.torch.stats().get("compiles", 0)
    for backend in ["eager", "stripeml"] + (["inductor"] if inductor else []):
        m = copy.deepcopy(module)
        fn = m if backend == "eager" else torch.compile(m, backend=backend)
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)

        def step(_x, fn=fn, opt=opt):
            opt.zero_grad()
            loss = F.mse_loss(fn(_x), target)
            loss.backward()
            opt.step()
            return loss

        t = time.perf_counter()
        try:
            first[backend] = step(x).item()
        except Exception as exc:
            print(f"{name}: {backend} failed: {exc}".splitlines()[0], file=sys.stderr)
            continue
        compile_s[backend] = round(time.perf_counter() - t, 3)
        steps[backend] = step
    record["compiles"] = stripeml.torch.stats().get("compiles", 0) - before
    samples: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(blocks):
        for key, fn in steps.items():
            time.sleep(0.05)
            samples[key] += _calls(fn, x)
    record["recompiles_after_first_step"] = (
        stripeml.torch.stats().get("compiles", 0) - before - record["compiles"]
    )
    medians = {k: statistics.median(v) for k, v in samples.items()}
    ours = medians.get("stripeml")
    record.update(
        repeats=min(len(v) for v in samples.values()),
        stripeml_s=ours,
        baselines={k: v for k, v in medians.items() if k != "stripeml"},
        compile_s=compile_s,
        max_err={k: abs(v - first["eager"]) / abs(first["eager"]) for k, v in first.items()},
    )
    print(json.dumps(record), flush=True)
    if ours is not None:
        line = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in medians.items())
        print(f"{name} train step: {line} (stripeml/eager {ours / medians['eager']:.2f})",
              file=sys.stderr)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(DEFAULT))
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--no-inductor", action="store_true", help="leave inductor out")
    parser.add_argument(
        "--train",
        default="small_cnn,transformer_block",
        help="models timed for a training step (comma-separated, '' for none)",
    )
    args = parser.parse_args()
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(name, None)
    try:
        import torch
    except ImportError:
        print("bench_torch: torch is not installed (make bench-deps)", file=sys.stderr)
        return 0
    import stripeml.torch

    sys.path.insert(0, str(HERE))
    import models

    torch.set_num_threads(2)
    torch.backends.mha.set_fastpath_enabled(False)
    for name in [n for n in args.train.split(",") if n]:
        _train(name, args.blocks, not args.no_inductor)
    for name in [n for n in args.models.split(",") if n]:
        local = _local(name)
        if local is not None:
            module, x = local
        else:
            entry = models.REGISTRY[name]
            module, inputs = entry.make(**entry.params)
            x = next(iter(inputs.values()))
        module.eval()
        record: dict = {"bench": "torch", "case": "inference", "sizes": {"model": name,
                        "input": list(x.shape)}, "threads": 2, "target": "cpu",
                        "load_avg_1m": round(os.getloadavg()[0], 2)}  # fmt: skip
        with torch.no_grad():
            want = module(x)
            runners = {"eager": module}
            compile_s = {}
            before = stripeml.torch.stats().get("compiles", 0)
            backends = ["stripeml"] + ([] if args.no_inductor else ["inductor"])
            errors = {}
            for backend in backends:
                fn = torch.compile(module, backend=backend)
                t = time.perf_counter()
                try:
                    got = fn(x)
                except Exception as exc:  # inductor without a working C++ toolchain, say
                    print(f"{name}: {backend} failed: {exc}".splitlines()[0], file=sys.stderr)
                    continue
                compile_s[backend] = round(time.perf_counter() - t, 3)
                errors[backend] = float((got - want).abs().max() / want.abs().max())
                runners[backend] = fn
            record["compiles"] = stripeml.torch.stats().get("compiles", 0) - before
            samples: dict[str, list[float]] = {k: [] for k in runners}
            for _ in range(args.blocks):
                for key, fn in runners.items():
                    time.sleep(0.05)
                    samples[key] += _calls(fn, x)
        medians = {k: statistics.median(v) for k, v in samples.items()}
        ours = medians.get("stripeml")
        record.update(
            repeats=min(len(v) for v in samples.values()),
            stripeml_s=ours,
            baselines={k: v for k, v in medians.items() if k != "stripeml"},
            compile_s=compile_s,
            max_err=errors,
        )
        print(json.dumps(record), flush=True)
        if ours is not None:
            line = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in medians.items())
            print(f"{name}: {line} (stripeml/eager {ours / medians['eager']:.2f})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
