"""The ``stripeml`` command line (``stripeml.cli``) and the demo registry.

Most tests replace ``stripeml.compile`` with a small fake so that the command
line is tested on its own; the ``test_real_*`` tests run the real compiler.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml import cli, demo
from stripeml.demo import EXAMPLES, InputSpec

MATMUL_BAD = "function (A[M, K], B[K, N]) -> (C) {\n    C[m, n : M, N] = +(A[m, k] @ B[k, n]);\n}\n"


# --------------------------------------------------------------------------
# A fake compiler: enough of the documented API (params, outputs, __call__,
# lower -> .ir/.stages/.code) to drive the CLI.


class FakeExecutable:
    def __init__(self, fn: FakeFunction) -> None:
        self.ir = f"block {fn.name} [] #program ( )"
        self.stages = [("lower", self.ir + " // lowered"), ("fuse", self.ir)]
        self.code = ""


class FakeFunction:
    def __init__(self, source: str, target: str, name: str) -> None:
        header = re.search(r"function\s*\((.*?)\)\s*->\s*\((.*?)\)", source, re.S)
        assert header is not None
        params = re.sub(r"\[[^\]]*\]", "", header[1])
        self.params = tuple(p.strip() for p in params.split(",") if p.strip())
        self.outputs = tuple(o.strip() for o in header[2].split(","))
        self.name, self.target, self.source = name, target, source
        self.calls = 0

    def __call__(self, *arrays: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
        if len(arrays) != len(self.params):
            raise stripeml.ShapeError(f"{self.name} takes {len(self.params)} input(s)")
        self.calls += 1
        example = next((ex for ex in EXAMPLES if ex.source() == self.source), None)
        if example is not None:
            outs = example.expected(dict(zip(self.params, arrays)))
            return (
                tuple(o.astype(np.float32) for o in outs)
                if len(outs) > 1
                else outs[0].astype(np.float32)
            )
        return np.full((2, 3), 1.5, dtype=np.float32)

    def lower(self, *arrays: np.ndarray) -> FakeExecutable:
        return FakeExecutable(self)


def fake_compile(source: str, target: str = "interp", *, name: str = "main") -> FakeFunction:
    for line, text in enumerate(source.splitlines(), start=1):
        if "@" in text and not text.lstrip().startswith("#"):
            column = text.index("@") + 1
            raise stripeml.TileSyntaxError("unexpected character '@'", line, column, source)
    return FakeFunction(source, target, name)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stripeml, "compile", fake_compile, raising=False)


@pytest.fixture
def tile_file(tmp_path: Path) -> Path:
    path = tmp_path / "mm.tile"
    path.write_text(
        "function (A[M, K], B[K, N]) -> (C) {\n    C[m, n : M, N] = +(A[m, k] * B[k, n]);\n}\n"
    )
    return path


@pytest.fixture
def bad_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad.tile"
    path.write_text(MATMUL_BAD)
    return path


# --------------------------------------------------------------------------
# --help and --version


@pytest.mark.parametrize("argv", [[], ["run"], ["ir"], ["demo"]])
def test_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: stripeml")
    if argv:
        assert f"stripeml {argv[0]}" in out


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["--help"])
    out = capsys.readouterr().out
    for command in ("run", "ir", "demo"):
        assert re.search(rf"^\s+{command}\s", out, re.M)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"stripeml {stripeml.__version__}"


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: stripeml" in capsys.readouterr().err


# --------------------------------------------------------------------------
# --input NAME=SHAPE[:DTYPE]


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("A=64x32", InputSpec("A", (64, 32), "f32")),
        ("B=32x16:f64", InputSpec("B", (32, 16), "f64")),
        ("X=7", InputSpec("X", (7,), "f32")),
        ("Idx=2x3x4:i64", InputSpec("Idx", (2, 3, 4), "i64")),
        ("M=5x5:bool", InputSpec("M", (5, 5), "bool")),
        ("S=scalar", InputSpec("S", (), "f32")),
        ("s=scalar:i32", InputSpec("s", (), "i32")),
        ("H=1x1:f16", InputSpec("H", (1, 1), "f16")),
        ("U=8:u8", InputSpec("U", (8,), "u8")),
    ],
)
def test_parse_input_spec(text: str, spec: InputSpec) -> None:
    assert cli.parse_input_spec(text) == spec


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("A64x32", "NAME=SHAPE"),
        ("=64x32", "not a parameter name"),
        ("1A=3", "not a parameter name"),
        ("A=", "shape"),
        ("A=3xx4", "shape"),
        ("A=3x4x", "shape"),
        ("A=3,4", "shape"),
        ("A=-3", "shape"),
        ("A=0x4", "positive"),
        ("A=3x4:f128", "unknown dtype"),
        ("A=3x4:", "unknown dtype"),
        ("A=scalar:float", "unknown dtype"),
    ],
)
def test_parse_input_spec_rejects(text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=why):
        cli.parse_input_spec(text)


def test_bad_input_spec_is_a_usage_error(
    fake: None, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", str(tile_file), "--input", "A=3x"]) == 2
    err = capsys.readouterr().err
    assert "usage: stripeml run" in err
    assert "--input" in err and "'A=3x'" in err
    assert "Traceback" not in err


def test_input_given_twice(fake: None, tile_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", str(tile_file), "-i", "A=2x3", "-i", "A=2x3", "-i", "B=3x4"]
    assert cli.main(argv) == 2
    assert "given twice" in capsys.readouterr().err


def test_missing_and_unknown_inputs(
    fake: None, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", str(tile_file), "-i", "A=2x3", "-i", "Z=3"]) == 2
    err = capsys.readouterr().err
    assert "missing --input for B" in err
    assert "no parameter named Z" in err
    assert "the program takes A, B" in err


def test_missing_file(fake: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", str(tmp_path / "nope.tile"), "-i", "A=2"]) == 2
    err = capsys.readouterr().err
    assert "nope.tile" in err and "no such file" in err
    assert "Traceback" not in err


def test_bad_repeat(fake: None, tile_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", str(tile_file), "--repeat", "0"]) == 2
    assert "--repeat" in capsys.readouterr().err


# --------------------------------------------------------------------------
# run / ir / demo with the fake compiler


def test_run_prints_outputs_and_times(
    fake: None, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", str(tile_file), "-i", "A=4x3", "-i", "B=3x2:f64", "--repeat", "3"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "A f32[4x3], B f64[3x2]" in out
    total, digest = cli.checksum(np.full((2, 3), 1.5, dtype=np.float32))
    assert total == 9.0
    assert re.search(rf"output\s+C\s+shape \(2, 3\)\s+dtype float32\s+sum 9\s+sha256 {digest}", out)
    assert "compile + first run" in out and "median of 3 runs" in out


def test_run_inputs_are_seeded_and_in_parameter_order(
    monkeypatch: pytest.MonkeyPatch, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[tuple[np.ndarray, ...]] = []

    class Recording(FakeFunction):
        def __call__(self, *arrays: np.ndarray) -> np.ndarray:
            seen.append(arrays)
            return arrays[0]

    monkeypatch.setattr(
        stripeml,
        "compile",
        lambda s, target="interp", name="": Recording(s, target, name),
        raising=False,
    )
    # Given in the "wrong" order: the CLI passes them in parameter order.
    argv = ["run", str(tile_file), "-i", "B=3x2:i32", "-i", "A=4x3", "--repeat", "1"]
    assert cli.main([*argv, "--seed", "7"]) == 0
    assert cli.main([*argv, "--seed", "7"]) == 0
    assert cli.main([*argv, "--seed", "8"]) == 0
    (a1, b1), _, (a2, b2), _, (a3, _), _ = seen
    assert a1.shape == (4, 3) and a1.dtype == np.float32
    assert b1.shape == (3, 2) and b1.dtype == np.int32
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(b1, b2)
    assert not np.array_equal(a1, a3)


def test_run_scalar_input(fake: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "scale.tile"
    path.write_text("function (X[N], S) -> (Y) {\n    Y = X * S;\n}\n")
    assert cli.main(["run", str(path), "-i", "X=5", "-i", "S=scalar:f64", "-r", "1"]) == 0
    assert "S f64[scalar]" in capsys.readouterr().out


def test_run_bundled_example_by_name_uses_demo_shapes(
    fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "matmul", "-r", "1"]) == 0
    out = capsys.readouterr().out
    assert "A f32[48x32], B f32[32x40]" in out
    assert "shape (48, 40)" in out


def test_ir_default_stages_and_code(
    fake: None, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["ir", str(tile_file), "-i", "A=4x3", "-i", "B=3x2"]
    assert cli.main(base) == 0
    assert capsys.readouterr().out.strip() == "block mm [] #program ( )"
    assert cli.main([*base, "--stages"]) == 0
    out = capsys.readouterr().out
    assert out.index("===== lower =====") < out.index("// lowered") < out.index("===== fuse")
    assert cli.main([*base, "--code"]) == 0
    out = capsys.readouterr().out
    assert "===== code (interp) =====" in out and "no backend source" in out


def test_function_name_is_the_file_stem() -> None:
    assert cli.function_name(Path("x/conv2d.tile")) == "conv2d"
    assert cli.function_name(Path("my-net.v2.tile")) == "my_net_v2"
    assert cli.function_name(Path("2d.tile")) == "_2d"


def test_demo_with_fake_compiler_passes(fake: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["example", "input", "shapes"]
    for ex in EXAMPLES:
        row = next(line for line in lines if line.startswith(ex.name + " "))
        assert " OK " in row and "interp" in row
    assert f"{len(EXAMPLES)}/{len(EXAMPLES)} examples OK on interp" in out


def test_demo_reports_failures_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Wrong(FakeFunction):
        def __call__(self, *arrays: np.ndarray) -> np.ndarray:
            out = super().__call__(*arrays)
            return out + 1.0 if self.name == "cumsum" else out  # type: ignore[operator]

    def compile_(source: str, target: str = "interp", *, name: str = "main") -> FakeFunction:
        if name == "softmax":
            raise stripeml.TileSyntaxError("boom", 1, 1, source)
        return Wrong(source, target, name)

    monkeypatch.setattr(stripeml, "compile", compile_, raising=False)
    assert cli.main(["demo", "matmul", "cumsum", "softmax"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^matmul .* OK ", out, re.M)
    assert re.search(r"^cumsum .* 1\.00e\+00 +FAIL ", out, re.M)
    assert re.search(r"^softmax .* - +FAIL ", out, re.M)
    assert "FAIL cumsum: O: max abs error 1 beyond tolerance" in out
    assert "FAIL softmax: softmax.tile: 1:1: boom" in out
    assert "1/3 examples OK" in out


def test_demo_unknown_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "nosuch"]) == 2
    assert "no bundled example named nosuch" in capsys.readouterr().err


def test_demo_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--list"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == [ex.name for ex in EXAMPLES]


# --------------------------------------------------------------------------
# Errors: FILE:line:col, the source line, a caret, exit 1, no traceback


def test_syntax_error_with_fake(
    fake: None, bad_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", str(bad_file), "-i", "A=2x3", "-i", "B=3x4"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"{bad_file}:2:32: unexpected character '@'",
        "        C[m, n : M, N] = +(A[m, k] @ B[k, n]);",
        "                                   ^",
    ]


def test_error_location_from_message_prefix() -> None:
    """Errors that carry their position as a leading ``line:col:`` still get a caret."""
    source = "function (A[M]) -> (B) {\n    B = A + Q;\n}\n"
    err = stripeml.StripeError("2:13: unknown name 'Q'\n    B = A + Q;\n            ^")
    assert cli.format_error(err, "f.tile", source).splitlines() == [
        "f.tile:2:13: unknown name 'Q'",
        "        B = A + Q;",
        "                ^",
    ]


def test_error_without_location() -> None:
    err = stripeml.ShapeError("main takes 2 input(s)")
    assert cli.format_error(err, "f.tile", "x") == "f.tile: main takes 2 input(s)"


def test_shape_error_at_call_time_exits_1(
    monkeypatch: pytest.MonkeyPatch, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Failing(FakeFunction):
        def __call__(self, *arrays: np.ndarray) -> np.ndarray:
            raise stripeml.ShapeError("dimension K is bound to 3 and to 4")

    monkeypatch.setattr(
        stripeml,
        "compile",
        lambda s, target="interp", name="": Failing(s, target, name),
        raising=False,
    )
    assert cli.main(["run", str(tile_file), "-i", "A=2x3", "-i", "B=4x5"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"{tile_file}: dimension K is bound to 3 and to 4"


# --------------------------------------------------------------------------
# The demo registry itself (no compiler involved)


def test_every_example_file_is_registered_and_documented() -> None:
    files = sorted(p.name for p in demo.EXAMPLES_DIR.glob("*.tile"))
    assert files == sorted(ex.file for ex in EXAMPLES)
    assert len(files) >= 8
    for ex in EXAMPLES:
        first = ex.source().splitlines()[0]
        assert first.startswith(f"# {ex.name}: "), ex.file


def test_repo_examples_folder_points_to_the_package() -> None:
    readme = Path(__file__).resolve().parents[1] / "examples" / "README.md"
    assert "src/stripeml/examples" in readme.read_text()


def _loop_conv2d(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Tile semantics spelled out: skip tuples whose access is out of bounds."""
    n, h, w, ci = i.shape
    kh, kw, _, co = k.shape
    out = np.zeros((n, h, w, co))
    for y in range(h):
        for x in range(w):
            for ky in range(kh):
                for kx in range(kw):
                    iy, ix = y + ky - 1, x + kx - 1
                    if 0 <= iy < h and 0 <= ix < w:
                        out[:, y, x, :] += i[:, iy, ix, :].astype(np.float64) @ k[ky, kx]
    return out


def _loop_conv1d(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    n, x_len, _ = i.shape
    t_len, _, co = k.shape
    out = np.zeros((n, x_len - 2 * (t_len - 1), co))
    for x in range(out.shape[1]):
        for t in range(t_len):
            out[:, x, :] += i[:, x + 2 * t, :].astype(np.float64) @ k[t]
    return out


def test_references_agree_with_loop_definitions() -> None:
    rng = np.random.default_rng(1)
    i4, k4 = rng.standard_normal((2, 5, 6, 3)), rng.standard_normal((3, 3, 3, 4))
    np.testing.assert_allclose(demo.ref_conv2d(i4, k4), _loop_conv2d(i4, k4), rtol=1e-12)
    i3, k3 = rng.standard_normal((2, 11, 3)), rng.standard_normal((3, 3, 5))
    np.testing.assert_allclose(demo.ref_conv1d_dilated(i3, k3), _loop_conv1d(i3, k3), rtol=1e-12)
    x = rng.standard_normal((2, 4, 6, 3))
    pooled = demo.ref_maxpool(x)
    assert pooled[1, 1, 2, 0] == x[1, 2:4, 4:6, 0].max()
    s = demo.ref_softmax(rng.standard_normal((3, 7)))
    np.testing.assert_allclose(s.sum(axis=1), 1.0)
    y = demo.ref_layernorm(rng.standard_normal((3, 50)), np.ones(50), np.zeros(50))
    np.testing.assert_allclose(y.mean(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=1), 1.0, rtol=1e-3)


def test_random_inputs_are_deterministic() -> None:
    specs = [InputSpec("A", (3, 4)), InputSpec("N", (5,), "i8"), InputSpec("B", (), "bool")]
    a, b = demo.random_inputs(specs, 3), demo.random_inputs(specs, 3)
    for name in ("A", "N", "B"):
        np.testing.assert_array_equal(a[name], b[name])
    assert a["A"].dtype == np.float32 and a["N"].dtype == np.int8 and a["B"].shape == ()


# --------------------------------------------------------------------------
# With the real compiler


def test_real_syntax_error_points_at_the_character(
    bad_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", str(bad_file), "-i", "A=2x3", "-i", "B=3x4"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    head, src_line, caret = err.splitlines()[:3]
    m = re.match(rf"{re.escape(str(bad_file))}:(\d+):(\d+): ", head)
    assert m, head
    assert (int(m[1]), int(m[2])) == (2, 32)
    assert src_line.strip() == "C[m, n : M, N] = +(A[m, k] @ B[k, n]);"
    assert src_line[caret.index("^")] == "@"


def test_real_name_error_has_a_location(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "undef.tile"
    path.write_text("function (A[M]) -> (B) {\n    B = A + Q;\n}\n")
    assert cli.main(["ir", str(path), "-i", "A=4"]) == 1
    err = capsys.readouterr().err
    assert re.match(rf"{re.escape(str(path))}:2:\d+: ", err)
    assert "^" in err and "Traceback" not in err


def test_real_shape_mismatch_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "matmul", "-i", "A=3x4", "-i", "B=5x6"]) == 1
    err = capsys.readouterr().err
    assert "matmul.tile" in err and "Traceback" not in err


def test_real_run_matmul(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "matmul", "-i", "A=6x5", "-i", "B=5x4:f32", "-r", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"output\s+C\s+shape \(6, 4\)\s+dtype float32", out)


def test_real_ir_matmul(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ir", "matmul", "-i", "A=6x5", "-i", "B=5x4"]) == 0
    out = capsys.readouterr().out
    assert "#program" in out and "#contraction" in out
    assert cli.main(["ir", "matmul", "-i", "A=6x5", "-i", "B=5x4", "--stages"]) == 0
    assert capsys.readouterr().out.startswith("// ===== lower =====")


def test_real_demo_passes(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["demo"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"{len(EXAMPLES)}/{len(EXAMPLES)} examples OK" in out
