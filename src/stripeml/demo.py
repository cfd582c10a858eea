"""The bundled example programs and the demo that checks them against NumPy.

The example ``.tile`` files live in ``stripeml/examples/`` inside the package,
so they ship with an installed stripeml; the repository's top-level
``examples/`` folder only points here.  :data:`EXAMPLES` says, for each file,
which inputs to feed it and how to compute the expected result with NumPy.
The references are written independently of the Tile programs (plain NumPy,
computed in float64) so that the demo really checks the compiler.

``stripeml demo`` is :func:`run_demo`: compile and run every example, compare,
print :func:`format_table`.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import stripeml

from .ir.dtypes import DTYPES

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"

Arrays = tuple[np.ndarray, ...]


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One input of a program: its parameter name, shape and dtype name (``f32``...)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "f32"

    def describe(self) -> str:
        """``A f32[64x32]``; rank 0 prints as ``s f32[scalar]``."""
        return f"{self.name} {self.dtype}[{format_shape(self.shape)}]"


def format_shape(shape: Sequence[int]) -> str:
    """``(64, 32)`` -> ``64x32``; ``()`` -> ``scalar``."""
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A random array: standard normal floats, small integers, fair booleans.

    Integers stay small (``-8..7`` signed, ``0..15`` unsigned) so that sums and
    products do not overflow in the narrow types.
    """
    np_dtype = DTYPES[dtype]
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.startswith("f"):
        return np.asarray(rng.standard_normal(shape)).astype(np_dtype)
    low, high = (-8, 8) if dtype.startswith("i") else (0, 16)
    return np.asarray(rng.integers(low, high, size=shape)).astype(np_dtype)


def random_inputs(specs: Sequence[InputSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random arrays for ``specs``, by name, in the order given."""
    rng = np.random.default_rng(seed)
    return {s.name: random_array(rng, s.shape, s.dtype) for s in specs}


# --------------------------------------------------------------------------
# NumPy references.  Each takes the inputs in parameter order and computes in
# float64; the comparison casts nothing, it measures |got - want|.


def _f64(*xs: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(x, dtype=np.float64) for x in xs]


def ref_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = _f64(a, b)
    return a @ b


def ref_conv2d(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    i, k = _f64(i, k)
    n, h, w, _ = i.shape
    kh, kw, _, co = k.shape
    ph, pw = kh // 2, kw // 2
    padded = np.pad(i, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    out = np.zeros((n, h, w, co))
    for dy in range(kh):
        for dx in range(kw):
            window = padded[:, dy : dy + h, dx : dx + w, :]
            out += np.tensordot(window, k[dy, dx], axes=([3], [0]))
    return out


def ref_maxpool(i: np.ndarray) -> np.ndarray:
    (i,) = _f64(i)
    n, h, w, c = i.shape
    cropped = i[:, : h // 2 * 2, : w // 2 * 2, :]
    return cropped.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def ref_softmax(x: np.ndarray) -> np.ndarray:
    (x,) = _f64(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def ref_layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    x, g, b = _f64(x, g, b)
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * g + b


def ref_cumsum(i: np.ndarray) -> np.ndarray:
    (i,) = _f64(i)
    return np.cumsum(i)


def ref_transpose(i: np.ndarray) -> np.ndarray:
    (i,) = _f64(i)
    return i.T.copy()


def ref_mlp(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    x, w, bias = _f64(x, w, bias)
    return np.maximum(x @ w + bias, 0.0)


def ref_conv1d_dilated(i: np.ndarray, k: np.ndarray, dilation: int = 2) -> np.ndarray:
    i, k = _f64(i, k)
    n, x, _ = i.shape
    t, _, co = k.shape
    out_len = x - dilation * (t - 1)
    out = np.zeros((n, out_len, co))
    for tap in range(t):
        start = tap * dilation
        out += np.einsum("nxc,cd->nxd", i[:, start : start + out_len, :], k[tap])
    return out


def ref_gelu(x: np.ndarray) -> np.ndarray:
    (x,) = _f64(x)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Example:
    """A bundled program, the inputs the demo feeds it and its NumPy reference.

    ``inputs`` are in the program's parameter order; ``outputs`` are the
    expected ``(name, dtype)`` of its results in declared order.  A result
    passes when ``|got - want| <= atol + rtol * |want|`` everywhere.
    """

    name: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[tuple[str, str], ...]
    reference: Callable[..., np.ndarray | Arrays]
    rtol: float = 1e-4
    atol: float = 1e-4

    @property
    def file(self) -> str:
        return f"{self.name}.tile"

    @property
    def path(self) -> Path:
        return EXAMPLES_DIR / self.file

    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def expected(self, arrays: dict[str, np.ndarray]) -> Arrays:
        want = self.reference(*(arrays[s.name] for s in self.inputs))
        return want if isinstance(want, tuple) else (want,)


def _ins(*specs: tuple[str, tuple[int, ...]]) -> tuple[InputSpec, ...]:
    return tuple(InputSpec(name, shape) for name, shape in specs)


EXAMPLES: tuple[Example, ...] = (
    Example("matmul", _ins(("A", (48, 32)), ("B", (32, 40))), (("C", "f32"),), ref_matmul),
    Example(
        "conv2d", _ins(("I", (2, 10, 10, 3)), ("K", (3, 3, 3, 8))), (("O", "f32"),), ref_conv2d
    ),
    Example("maxpool", _ins(("I", (2, 8, 8, 4))), (("O", "f32"),), ref_maxpool),
    Example("softmax", _ins(("X", (8, 50))), (("Y", "f32"),), ref_softmax),
    Example(
        "layernorm",
        _ins(("X", (8, 64)), ("G", (64,)), ("B", (64,))),
        (("Y", "f32"),),
        ref_layernorm,
    ),
    Example("cumsum", _ins(("I", (100,))), (("O", "f32"),), ref_cumsum),
    Example("transpose", _ins(("I", (24, 40))), (("O", "f32"),), ref_transpose),
    Example(
        "mlp",
        _ins(("X", (16, 32)), ("W", (32, 24)), ("Bias", (24,))),
        (("Y", "f32"),),
        ref_mlp,
    ),
    Example(
        "conv1d_dilated",
        _ins(("I", (2, 20, 4)), ("K", (3, 4, 6))),
        (("O", "f32"),),
        ref_conv1d_dilated,
    ),
    Example("gelu", _ins(("X", (16, 32))), (("Y", "f32"),), ref_gelu),
)


def find_example(name_or_path: str | Path) -> Example | None:
    """The registry entry for a bundled example, by name (``matmul``), file
    name (``matmul.tile``) or a path to the bundled file; ``None`` otherwise."""
    text = str(name_or_path)
    for ex in EXAMPLES:
        if text in (ex.name, ex.file):
            return ex
    path = Path(text)
    if path.is_file():
        resolved = path.resolve()
        for ex in EXAMPLES:
            if ex.path == resolved:
                return ex
    return None


# --------------------------------------------------------------------------
# Running the demo.


@dataclass(frozen=True, slots=True)
class DemoResult:
    """The outcome of one example: ``error`` is set when it did not compile or run."""

    name: str
    shapes: str
    target: str
    max_abs_err: float | None
    ok: bool
    seconds: float
    error: str = ""


def check_example(ex: Example, target: str = "interp", seed: int = 0) -> DemoResult:
    """Compile and run ``ex`` on ``target`` and compare with its NumPy reference.

    The time is compile + first call (which binds the shapes and lowers).
    Errors of any kind become a failed result carrying the message, so that
    one broken example does not hide the others; only running out of memory
    (``MemoryError``) propagates.
    """
    shapes = ", ".join(format_shape(s.shape) for s in ex.inputs)
    arrays = random_inputs(ex.inputs, seed)
    source = ex.source()
    start = time.perf_counter()
    try:
        f = stripeml.compile(source, target=target, name=ex.name)
        missing = [s.name for s in ex.inputs if s.name not in f.params]
        if missing or len(f.params) != len(ex.inputs):
            raise ValueError(
                f"parameters {list(f.params)} do not match the demo inputs "
                f"{[s.name for s in ex.inputs]}"
            )
        got = f(*(arrays[p] for p in f.params))
        seconds = time.perf_counter() - start
        got = got if isinstance(got, tuple) else (got,)
        err, problems = _compare(ex, got, ex.expected(arrays))
    except stripeml.StripeError as e:
        return DemoResult(
            ex.name, shapes, target, None, False, time.perf_counter() - start, f"{ex.file}: {e}"
        )
    except MemoryError:
        raise  # not a bug in the example: the command line reports it once
    except Exception as e:  # a compiler bug: report it, keep going
        detail = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        return DemoResult(
            ex.name,
            shapes,
            target,
            None,
            False,
            time.perf_counter() - start,
            f"{ex.file}: internal error {type(e).__name__}: {e}\n{detail}",
        )
    return DemoResult(ex.name, shapes, target, err, not problems, seconds, "; ".join(problems))


def _compare(ex: Example, got: Arrays, want: Arrays) -> tuple[float | None, list[str]]:
    """Largest absolute error over all outputs, and what was wrong (if anything)."""
    problems: list[str] = []
    if len(got) != len(want):
        return None, [f"{ex.file}: {len(got)} outputs, expected {len(want)}"]
    worst = 0.0
    for (name, dtype), g, w in zip(ex.outputs, got, want):
        g = np.asarray(g)
        if g.shape != w.shape:
            problems.append(f"{name}: shape {g.shape}, expected {w.shape}")
            continue
        if g.dtype != DTYPES[dtype]:
            problems.append(f"{name}: dtype {g.dtype}, expected {DTYPES[dtype]}")
        diff = np.abs(g.astype(np.float64) - w)
        if np.isnan(diff).any():
            worst = np.inf
            problems.append(f"{name}: NaN where a number was expected")
            continue
        err = float(diff.max(initial=0.0))
        worst = max(worst, err)
        if np.any(diff > ex.atol + ex.rtol * np.abs(w)):
            problems.append(f"{name}: max abs error {err:.3g} beyond tolerance")
    return worst, problems


def run_demo(target: str = "interp", names: Sequence[str] = (), seed: int = 0) -> list[DemoResult]:
    """Check every example (or those named) on ``target``."""
    stripeml.compile  # noqa: B018 - import the compiler now, outside the timings
    chosen = [ex for ex in EXAMPLES if not names or ex.name in names]
    return [check_example(ex, target, seed) for ex in chosen]


def format_table(results: Sequence[DemoResult]) -> str:
    """The demo table: example, input shapes, target, max abs error, OK/FAIL, time."""
    header = ("example", "input shapes", "target", "max abs err", "result", "time")
    rows = [
        (
            r.name,
            r.shapes,
            r.target,
            "-" if r.max_abs_err is None else f"{r.max_abs_err:.2e}",
            "OK" if r.ok else "FAIL",
            f"{r.seconds * 1e3:.1f} ms",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    right = {3, 5}  # numbers line up on the right

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])
