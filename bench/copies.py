"""Copies per model: how much of a compiled model only moves data.

For each model of the benchmark set (``bench/models.py``), import it, compile
it for ``target="cpu"`` and count, in the optimised program's root:

* ``copy_kernels``: kernels whose statements are only loads and stores through
  ``assign`` views (transposes, halo copies, concatenation parts, layout
  changes), run on every call;
* ``constant_layouts``: such kernels that read only constants (weight panels),
  which run once;
* ``specials``: root specials by operation (``reshape``, ``gather``, ...), which
  the runtime runs on the host as whole-buffer copies;
* ``copied_bytes``: the bytes those kernels and specials write;
* ``kernels``: every root kernel.

Run::

    .venv/bin/python bench/copies.py                       # the whole set
    .venv/bin/python bench/copies.py zoo_shufflenet,transformer_encoder

One JSON line per model on stdout.  Nothing is timed.
"""

from __future__ import annotations

import json
import sys

import models  # bench/models.py, beside this script


def only_moves(block) -> bool:
    """A block of loads and assigning stores only (nested blocks included)."""
    from stripeml.ir.nodes import Block, Load, Store

    if any(r.agg not in ("", "assign") for r in block.refs if r.dir != "in"):
        return False
    return all(
        only_moves(s) if isinstance(s, Block) else isinstance(s, (Load, Store)) for s in block.stmts
    )


def count(name: str) -> dict:
    import numpy as np

    import stripeml.onnx
    from stripeml.analysis.constness import constness
    from stripeml.ir.nodes import Block, Special

    model, feeds = models.build(name)
    fn = stripeml.onnx.compile(model, target="cpu")
    arrays = [feeds[n] for n in fn.input_names]
    spec = fn.specialise(arrays)
    if spec.function is None:
        return {"model": name, "kernels": 0}
    exe = spec.function.lower(*spec.call_args(arrays))
    root = exe.program.root
    buffers = {r.into: r for r in root.refs}

    def nbytes(name: str) -> int:
        r = buffers[name]
        return int(np.prod(r.shape.sizes)) * np.dtype(_np(r.shape.dtype)).itemsize

    moves = [s for s in root.stmts if isinstance(s, Block) and only_moves(s)]
    const = set(constness(exe.program).temporaries)  # computed from constants alone
    # Layouts of constants (weight panels) run once, not per call: not counted.
    once = [
        k for k in moves if all(_constant(buffers, r.from_, const) for r in k.refs if r.dir == "in")
    ]
    copies = [k for k in moves if k not in once]
    specials: dict[str, int] = {}
    copied = 0
    for s in root.stmts:
        if isinstance(s, Special):
            specials[s.op] = specials.get(s.op, 0) + 1
            copied += sum(nbytes(o) for o in s.outputs)
    for k in copies:
        copied += sum(
            int(np.prod(r.shape.sizes)) * np.dtype(_np(r.shape.dtype)).itemsize
            for r in k.refs
            if r.dir == "out"
        ) * _points(k)
    return {
        "model": name,
        "kernels": sum(isinstance(s, Block) for s in root.stmts),
        "copy_kernels": len(copies),
        "constant_layouts": len(once),
        "specials": specials,
        "copied_bytes": copied,
    }


def _constant(buffers: dict, name: str, const: set) -> bool:
    r = buffers.get(name)
    return r is not None and (r.const or name in const)


def _points(block) -> int:
    n = 1
    for i in block.idxs:
        n *= i.range
    return n


def _np(dtype: str):
    from stripeml.ir.dtypes import to_numpy

    return to_numpy(dtype)


def main(argv: list[str]) -> int:
    names = argv[0].split(",") if argv else list(models.REGISTRY)
    for name in names:
        try:
            print(json.dumps(count(name)), flush=True)
        except Exception as e:  # a model that cannot run: say why, go on
            print(json.dumps({"model": name, "skipped": f"{type(e).__name__}: {e}"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
