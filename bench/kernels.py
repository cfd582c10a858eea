"""Where a model's time goes: stripeml's worst kernels, with roofline figures,
next to onnxruntime's per-node profile (``bench/bench_onnx.py --kernels``).

For one model (random weights, batch 1, the ``cpu`` target):

* stripeml: ``Executable.profile`` (median seconds per kernel over the runs,
  after one warm-up call), with each kernel's FLOPs, GFLOP/s, GB/s and share
  of the roofline bound (docs/cpu-backend.md, "Profiles and the roofline";
  the machine's ceilings are measured once, then read from the disk cache);
* the ONNX nodes each kernel computes: the importer writes ``// OpType name``
  before each node's Tile statements, and a kernel's comment lists the
  statements it runs (a fused kernel several).  Kernels a pass made for
  another (``k1_T4_T2_halo_copy``, ``k1_T4_panels``) count for that one's nodes;
* onnxruntime (CPU provider, the same thread count) with
  ``SessionOptions.enable_profiling``: per node of its optimised graph the
  median duration of its ``<node>_kernel_time`` events.  Its "extended"
  optimisations (the default here) fuse nodes but keep their names (a Conv
  with its BatchNormalization and Relu is ``FusedConv`` named after the
  Conv); ``--ort-level all`` adds the NCHWc layout rewrite, whose nodes get
  new names (``r2_nchwc``) that match nothing.

The table prints the slowest ``--top`` kernels (default 15) with the
onnxruntime time of the nodes they compute (several kernels of one node each
show that node's whole time), then onnxruntime's slowest nodes with the
stripeml time of the kernels that compute them.  ``--json`` prints one JSON
line per kernel (the fields of bench/run.py, the roofline figures under
``roofline``) and one ``kernels_summary`` line instead.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

_OUTPUT = re.compile(r"\s*([A-Za-z_]\w*)\s*(?:\[|=)")
_ORT_SUFFIX = "_kernel_time"


@dataclass
class OrtNode:
    """One node of onnxruntime's optimised graph, as its profile saw it."""

    name: str
    op: str
    seconds: float  # median over the runs
    kernels: list[str] = field(default_factory=list)  # stripeml kernels computing it


def nodes_by_tensor(source: str) -> dict[str, tuple[str, str]]:
    """``{tensor: (op type, node name)}`` from the ``// OpType name`` comments
    the ONNX importer writes before each node's statements."""
    found: dict[str, tuple[str, str]] = {}
    current: tuple[str, str] | None = None
    for line in source.splitlines():
        text = line.strip()
        if text.startswith("//"):
            op, _, name = text[2:].strip().partition(" ")
            current = (op, name.strip())
            continue
        m = _OUTPUT.match(text)
        if m and current is not None and not text.startswith("function"):
            found.setdefault(m[1], current)
    return found


def kernel_nodes(
    rows: Sequence, source: str, kernels: Sequence[str]
) -> dict[str, list[tuple[str, str]]]:
    """The ONNX nodes ``(op type, name)`` of each kernel in ``rows`` (its
    statements' outputs), a helper kernel taking those of the kernel whose
    name it extends."""
    tensors = nodes_by_tensor(source)
    own: dict[str, list[tuple[str, str]]] = {}
    for row in rows:
        nodes: dict[tuple[str, str], None] = {}
        for stmt in row.statement.split("; "):
            m = _OUTPUT.match(stmt)
            if m and m[1] in tensors:
                nodes[tensors[m[1]]] = None
        own[row.kernel] = list(nodes)
    for name in kernels:  # kernels without a profile row (constant steps) too
        own.setdefault(name, [])
    out: dict[str, list[tuple[str, str]]] = {}
    for name, nodes in own.items():
        if not nodes:
            parents = [k for k in own if own[k] and name.startswith(k + "_")]
            if parents:
                nodes = own[max(parents, key=len)]
        out[name] = nodes
    return out


def ort_profile(model, feeds: Mapping[str, np.ndarray], threads: int, runs: int, level: str):
    """onnxruntime's per-node medians ``{name: OrtNode}`` over ``runs`` runs."""
    import onnxruntime as ort

    levels = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        opts.graph_optimization_level = levels[level]
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
        session.run(None, dict(feeds))  # warm-up: its events are dropped below
        for _ in range(runs):
            session.run(None, dict(feeds))
        with open(session.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
    times: dict[str, list[float]] = defaultdict(list)
    ops: dict[str, str] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") != "Node" or not name.endswith(_ORT_SUFFIX):
            continue
        node = name[: -len(_ORT_SUFFIX)]
        times[node].append(e.get("dur", 0) * 1e-6)  # microseconds
        ops[node] = e.get("args", {}).get("op_name", "?")
    return {
        n: OrtNode(n, ops[n], statistics.median(t[-runs:]) if runs else 0.0)
        for n, t in times.items()
    }


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f}"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def report(
    name: str,
    load: Callable,
    feeds_for: Callable,
    *,
    as_json: bool = False,
    runs: int = 20,
    top: int = 15,
    ort_level: str = "extended",
) -> None:
    """Compile and profile model ``name`` (``load(name)``, ``feeds_for(model)``: the
    bench's own helpers) on both, and print the tables (or JSON lines)."""
    import stripeml.onnx
    from stripeml.runtime.peaks import target_peaks

    model = load(name)
    feeds = feeds_for(model)
    fn = stripeml.onnx.compile(model, target="cpu")
    arrays = [feeds[n] for n in fn.input_names]
    spec = fn.specialise(arrays)
    if spec.function is None:
        print(f"{name}: every output is a constant: nothing runs")
        return
    args = spec.call_args(arrays)
    exe = spec.function.lower(*args)
    exe(*args)  # warm-up: constant kernels run once, pages are touched
    rows = exe.profile(*args, repeat=runs)
    target = exe.function.target
    peaks = target_peaks(target)
    nodes = kernel_nodes(rows, spec.source, list(exe.work))
    ort = ort_profile(model, feeds, target.threads, runs, ort_level)
    for row in rows:
        for _, node in nodes.get(row.kernel, []):
            if node in ort:
                ort[node].kernels.append(row.kernel)
    by_kernel = {r.kernel: r for r in rows}
    ours_total = sum(r.seconds for r in rows)
    theirs_total = sum(n.seconds for n in ort.values())

    def ort_seconds(kernel: str) -> float | None:
        found = [ort[n].seconds for _, n in nodes.get(kernel, []) if n in ort]
        return sum(found) if found else None

    if as_json:
        base = {"bench": "onnx", "threads": target.threads, "target": target.name}
        for rank, row in enumerate(rows, 1):
            theirs = ort_seconds(row.kernel)
            print(
                json.dumps(
                    {
                        **base,
                        "case": "kernel",
                        "sizes": {
                            "model": name,
                            "rank": rank,
                            "kernel": row.kernel,
                            "statement": row.statement,
                            "nodes": [f"{op} {n}" for op, n in nodes.get(row.kernel, [])],
                        },
                        "repeats": runs,
                        "stripeml_s": row.seconds,
                        "baselines": {} if theirs is None else {"onnxruntime": theirs},
                        "roofline": {
                            k: getattr(row, k)
                            for k in ("flops", "bytes", "gflops", "gbps", "peak_fraction", "bound")
                        },
                    }
                )
            )
        summary = {
            **base,
            "case": "kernels_summary",
            "sizes": {"model": name, "kernels": len(rows), "ort_nodes": len(ort)},
            "repeats": runs,
            "stripeml_s": ours_total,
            "baselines": {"onnxruntime": theirs_total},
            "peaks": {"gflops": peaks.gflops, "gbps": peaks.gbps},
            "ort_level": ort_level,
        }
        print(json.dumps(summary))
        return

    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    print(
        f"{name}: stripeml cpu, {target.threads} threads; ceilings "
        f"{num(peaks.gflops, '.1f')} GFLOP/s, {num(peaks.gbps, '.1f')} GB/s; onnxruntime "
        f"({ort_level} optimisations, {target.threads} threads); medians of {runs} runs"
    )
    print(
        f"sum of kernels {ours_total * 1e3:.2f} ms (stripeml, {len(rows)} kernels), "
        f"sum of nodes {theirs_total * 1e3:.2f} ms (onnxruntime, {len(ort)} nodes)"
    )
    print()
    head = (
        f"{'#':>3} {'kernel':<26} {'ms':>8} {'%':>5} {'MFLOP':>9} {'GFLOP/s':>8} {'GB/s':>7} "
        f"{'%peak':>6} {'bound':<7} {'ort ms':>8}  nodes / statement"
    )
    print(head)
    print("-" * len(head))
    for rank, row in enumerate(rows[:top], 1):
        share = 100 * row.seconds / ours_total if ours_total else 0.0
        frac = "-" if row.peak_fraction is None else f"{100 * row.peak_fraction:.0f}%"
        where = ", ".join(f"{op} {n}" for op, n in nodes.get(row.kernel, [])) or _short(
            row.statement, 40
        )
        print(
            f"{rank:>3} {_short(row.kernel, 26):<26} {_ms(row.seconds):>8} {share:5.1f} "
            f"{row.flops / 1e6:9.1f} {row.gflops:8.1f} {row.gbps:7.1f} {frac:>6} "
            f"{row.bound or '-':<7} {_ms(ort_seconds(row.kernel)):>8}  {_short(where, 48)}"
        )
    print()
    print("onnxruntime's slowest nodes, with the stripeml kernels computing them")
    head = f"{'#':>3} {'node':<20} {'op':<18} {'ort ms':>8} {'stripeml ms':>11}  kernels"
    print(head)
    print("-" * len(head))
    worst = sorted(ort.values(), key=lambda n: -n.seconds)
    for rank, node in enumerate(worst[:top], 1):
        ours = sum(by_kernel[k].seconds for k in node.kernels) if node.kernels else None
        print(
            f"{rank:>3} {_short(node.name, 20):<20} {_short(node.op, 18):<18} "
            f"{_ms(node.seconds):>8} {_ms(ours):>11}  {_short(', '.join(node.kernels), 50)}"
        )
