"""What the ``stripeml`` subcommands share: ``--input`` specs, error messages,
loading a program (a file or a bundled example) or an ONNX model's inputs,
``--target`` checks, the program options of ``run`` and ``ir``, and small
formatting helpers.

Failures a command reports are of three kinds, each with its exit status (the
table is in the README): :class:`UsageError` (bad command-line use, 2), a
:class:`~stripeml.StripeError` (the program, model or target file is wrong,
1) and :class:`OutOfMemory` (1).  :func:`stripeml.cli.main` prints any of them
as one message, never a traceback.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..demo import InputSpec, find_example, random_inputs
from ..errors import InternalError, StripeError, TargetError
from ..ir.dtypes import DTYPES

if TYPE_CHECKING:  # the ONNX frontend loads only for a model
    from ..onnx import OnnxFunction

PROG = "stripeml"
TARGET_HELP = (
    "interp, a bundled target (cpu, opencl, cuda, examples/npu ...; see `stripeml targets`) "
    "or a target .toml file (default: interp)"
)
#: ``--target``'s help for the commands that default to ``cpu`` (explore, tune).
CPU_TARGET_HELP = TARGET_HELP.replace("interp)", "cpu)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DIMS = re.compile(r"[0-9]+(x[0-9]+)*\Z")
_LOCATION = re.compile(r"([0-9]+):([0-9]+): ")
DTYPE_NAMES = tuple(DTYPES)  # bool i8 i16 i32 i64 u8 u16 u32 u64 f16 f32 f64


class UsageError(Exception):
    """Bad command-line use found after parsing (exit status 2)."""


class OutOfMemory(Exception):
    """Memory ran out while a command was doing something (exit status 1).

    The message says what the command was doing and, from NumPy's
    ``MemoryError``, what could not be allocated.
    """

    def __init__(self, doing: str, error: BaseException) -> None:
        detail = str(error).strip()
        super().__init__(f"out of memory while {doing}" + (f": {detail}" if detail else ""))


@contextmanager
def doing(what: str) -> Iterator[None]:
    """Turn a ``MemoryError`` raised inside into :class:`OutOfMemory` naming ``what``
    the command was doing (also one the API wrapped as an ``InternalError``: running
    out of memory is not a bug in stripeml)."""
    try:
        yield
    except MemoryError as exc:
        raise OutOfMemory(what, exc) from None
    except InternalError as exc:
        if isinstance(exc.__cause__, MemoryError):
            raise OutOfMemory(what, exc.__cause__) from None
        raise


INTERNAL_HINT = (
    "this is a bug in stripeml: please report it with the command line "
    f"(`{PROG} --debug ...` or STRIPEML_DEBUG=1 shows the traceback)"
)


def print_error(err: StripeError, filename: str, source: str = "", *, debug: bool = False) -> None:
    """Print ``err`` as :func:`format_error` does, on stderr; an
    :class:`~stripeml.errors.InternalError` (a bug surfaced as a StripeError)
    also gets the hint to report it, and with ``debug`` its cause's traceback."""
    print(format_error(err, filename, source), file=sys.stderr)
    if isinstance(err, InternalError):
        print(f"{PROG}: {INTERNAL_HINT}", file=sys.stderr)
        if debug and err.__cause__ is not None:
            cause = err.__cause__
            traceback.print_exception(type(cause), cause, cause.__traceback__, file=sys.stderr)


# --------------------------------------------------------------------------
# --input NAME=DxDxD[:dtype]


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``NAME=64x32[:dtype]`` or ``NAME=scalar[:dtype]`` (dtype defaults to f32).

    Raises :class:`argparse.ArgumentTypeError` (never a StripeError) with a
    message saying what is wrong, so argparse reports it as a usage error.
    """
    name, eq, rest = text.partition("=")
    name = name.strip()
    if not eq:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME=SHAPE[:DTYPE], e.g. A=64x32 or A=64x32:f64 or S=scalar"
        )
    if not _NAME.match(name):
        raise argparse.ArgumentTypeError(f"{text!r}: {name!r} is not a parameter name")
    shape_text, colon, dtype = rest.strip().partition(":")
    dtype = dtype.strip() if colon else "f32"
    if dtype not in DTYPES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: unknown dtype {dtype!r} (one of {', '.join(DTYPE_NAMES)})"
        )
    shape_text = shape_text.strip().lower()
    if shape_text == "scalar":
        return InputSpec(name, (), dtype)
    if not _DIMS.match(shape_text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: shape {shape_text!r} must be sizes joined by 'x' (64x32) or 'scalar'"
        )
    shape = tuple(int(d) for d in shape_text.split("x"))
    if any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be positive")
    return InputSpec(name, shape, dtype)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


# --------------------------------------------------------------------------
# Errors


def format_error(err: BaseException, filename: str, source: str = "") -> str:
    """``FILE:line:col: message`` plus the source line and a caret when ``err``
    has a location; ``FILE: message`` otherwise.  A :class:`TargetError` is
    about the target file, which its message already names: it prints as is.

    The location is ``err.line``/``err.column`` (1-based) when present, else a
    leading ``line:col:`` in the message (how the checker and shape binding
    report positions).  A snippet the error already carries is dropped: the
    snippet is redrawn here from ``source``.
    """
    text = str(err)
    if isinstance(err, TargetError):
        return text
    message = getattr(err, "message", None)
    if not isinstance(message, str):
        message = text.splitlines()[0] if text else type(err).__name__
    line, column = getattr(err, "line", None), getattr(err, "column", None)
    lead = _LOCATION.match(message)
    if lead and (not isinstance(line, int) or (int(lead[1]), int(lead[2])) == (line, column)):
        line, column, message = int(lead[1]), int(lead[2]), message[lead.end() :]
    if not isinstance(line, int) or not isinstance(column, int) or line < 1:
        return f"{filename}: {text or message}"
    out = f"{filename}:{line}:{column}: {message}"
    lines = source.splitlines()
    if line <= len(lines):
        src_line = lines[line - 1].expandtabs(1)
        out += f"\n    {src_line}\n    {' ' * (max(column, 1) - 1)}^"
    return out


# --------------------------------------------------------------------------
# Shared steps


def load_source(file: str) -> tuple[Path, str]:
    """The program's path and text; ``file`` may name a bundled example."""
    path = Path(file)
    if not path.is_file():
        example = find_example(file)
        if example is None:
            raise UsageError(
                f"cannot read {file!r}: no such file, and no bundled example of that name "
                f"(see `{PROG} demo --list`)"
            )
        path = example.path
    try:
        return path, path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {file!r}: {e}") from None


def function_name(path: Path) -> str:
    """The compiled function's name: the file stem, made an identifier."""
    name = re.sub(r"\W", "_", path.stem)
    return name if name[:1].isalpha() or name[:1] == "_" else f"_{name}"


def display_name(file: str, path: Path) -> str:
    """How messages name the program: as typed, or the bundled file's path."""
    return file if Path(file).is_file() else str(path)


def _check_distinct(given: Sequence[InputSpec]) -> None:
    """A :class:`UsageError` when two ``--input`` name the same input."""
    seen: set[str] = set()
    for spec in given:
        if spec.name in seen:
            raise UsageError(f"--input {spec.name} is given twice")
        seen.add(spec.name)


def input_specs(path: Path, given: Sequence[InputSpec]) -> tuple[InputSpec, ...]:
    _check_distinct(given)
    if given:
        return tuple(given)
    example = find_example(path)
    return example.inputs if example is not None else ()


def onnx_input_shapes(file: str, given: Sequence[InputSpec]) -> dict[str, tuple[int, ...]]:
    """The shapes ``--input`` gives an ONNX model's inputs, by name (their dtypes
    are the model's); a :class:`UsageError` when ``file`` is no file or a name is
    given twice."""
    if not os.path.isfile(file):
        raise UsageError(f"no such ONNX model: {file}")
    _check_distinct(given)
    return {spec.name: spec.shape for spec in given}


def onnx_inputs(
    fn: OnnxFunction, shapes: dict[str, tuple[int, ...]], seed: int
) -> list[np.ndarray]:
    """Seeded random inputs for the compiled model ``fn``, ``shapes`` (from
    :func:`onnx_input_shapes`) fixing its symbolic dimensions; a
    :class:`UsageError` when ``shapes`` names no graph input."""
    from ..onnx.cli import make_inputs

    names = [gi.name for gi in fn.graph.inputs]
    unknown = [n for n in shapes if n not in names]
    if unknown:
        raise UsageError(
            f"--input {', '.join(unknown)}: no such graph input "
            f"(the model takes {', '.join(names) or 'no inputs'})"
        )
    return make_inputs(fn, shapes, True, seed)


def ordered_specs(f: object, specs: Sequence[InputSpec]) -> tuple[InputSpec, ...]:
    """``specs`` in the program's parameter order; a :class:`UsageError` when the
    names do not match the parameters."""
    params = tuple(getattr(f, "params", ()))
    by_name = {s.name: s for s in specs}
    missing = [p for p in params if p not in by_name]
    unknown = [s.name for s in specs if s.name not in params]
    if missing or unknown:
        want = ", ".join(params) or "no inputs"
        parts = []
        if missing:
            parts.append(f"missing --input for {', '.join(missing)}")
        if unknown:
            parts.append(f"no parameter named {', '.join(unknown)}")
        raise UsageError(f"{'; '.join(parts)} (the program takes {want})")
    return tuple(by_name[p] for p in params)


def ordered_arrays(
    f: object, specs: Sequence[InputSpec], seed: int
) -> tuple[list[np.ndarray], tuple[InputSpec, ...]]:
    """Seeded random arrays in the program's parameter order (checks names match)."""
    ordered = ordered_specs(f, specs)
    with doing("building the random inputs"):
        arrays = random_inputs(ordered, seed)
    return [arrays[s.name] for s in ordered], ordered


def shape_only_arrays(specs: Sequence[InputSpec]) -> list[np.ndarray]:
    """Arrays with the shapes and dtypes of ``specs`` and no memory of their own
    (read-only broadcasts of one zero): enough to lower a program, which looks
    at shapes and dtypes only."""
    return [np.broadcast_to(np.zeros((), DTYPES[s.dtype]), s.shape) for s in specs]


def as_tuple(result: np.ndarray | tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return result if isinstance(result, tuple) else (result,)


def checksum(array: np.ndarray) -> tuple[float, str]:
    """The sum (as a float64) and the first 12 hex digits of the SHA-256 of the
    array's bytes in C order: enough to compare runs and backends by eye."""
    a = np.ascontiguousarray(array)
    return float(np.sum(a, dtype=np.float64)), hashlib.sha256(a.tobytes()).hexdigest()[:12]


def format_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def check_target(target: str) -> None:
    """A ``--target`` that names no bundled target and no file is a usage error."""
    if target == "interp":
        return
    from ..targets import resolve_target

    try:
        resolve_target(target)
    except TargetError as e:
        raise UsageError(str(e)) from None


def format_shape_tuple(shape: tuple[int, ...]) -> str:
    """``(64, 16)``; rank 0 prints ``()``."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def add_program_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file",
        metavar="FILE",
        help="a .tile file, or the name of a bundled example (see `stripeml demo --list`)",
    )
    p.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        type=parse_input_spec,
        metavar="NAME=SHAPE[:DTYPE]",
        help=(
            "one per parameter: SHAPE is sizes joined by 'x' (64x32) or 'scalar'; DTYPE one "
            f"of {' '.join(DTYPE_NAMES)} (default f32). Inputs are random, seeded by --seed. "
            "May be left out for a bundled example (the demo's shapes are used)"
        ),
    )
    p.add_argument(
        "-t",
        "--target",
        default="interp",
        help=TARGET_HELP,
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
