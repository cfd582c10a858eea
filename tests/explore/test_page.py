"""The page itself and the ``stripeml explore`` command: sections, numbers that
agree with the compiler's, tooltips, nothing fetched, clear failures."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.cli import main
from stripeml.targets import load_target
from stripeml.targets.host import HostFacts

from .conftest import mlp_inputs

SECTIONS = ("passes", "memory", "kernels", "traffic")


class _Tables(HTMLParser):
    """Cells of the tables with an id, by id: ``{id: [[cell, ...], ...]}``."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._id: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id"):
            self._id = attrs["id"]
            self.tables[self._id] = []
        elif tag == "tr" and self._id:
            self.tables[self._id].append([])
        elif tag in ("td", "th") and self._id:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._id = None
        elif tag in ("td", "th") and self._id and self._cell is not None:
            self.tables[self._id][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _tables(html: str) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(html)
    return parser.tables


def _self_contained(html: str) -> None:
    assert "<script" not in html  # tooltips are SVG titles: nothing to run
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "@import" not in html and "url(http" not in html


def test_npu_page_has_every_section_and_agrees_with_the_compiler(npu_exe, npu_page: Path) -> None:
    html = npu_page.read_text()
    _self_contained(html)
    for key in SECTIONS:
        section = re.search(rf'<section id="{key}">(.*?)</section>', html, re.S)
        assert section and "<svg" in section[1], key
    for name, _ in npu_exe.stages:  # every stage, by pass name, with its diff
        assert f"<b>{name}</b>" in html or f". {name}</b>" in html
    assert "diff against autotile" in html and '<span class="add">+' in html
    # Tooltips name the SRAM tiles and their statement.
    titles = re.findall(r"<title>(.*?)</title>", html, re.S)
    assert any(t.startswith("X_sram") and "Z[b, n : B, N]" in t for t in titles)
    tables = _tables(html)
    rows = {r[0]: r for r in tables["kernel-table"][1:]}
    assert set(rows) == {"k0_Z", "k1_Y"}
    for name, w in npu_exe.work.items():
        assert int(rows[name][3].replace(",", "")) == w.flops
        assert int(rows[name][4].replace(",", "")) == w.bytes
    # Traffic: measured per level, adding up to the interpreter's whole-run report.
    from stripeml.runtime.interp import run_with_report

    x, w, b = mlp_inputs()
    _, whole = run_with_report(npu_exe.program, {"X": x, "W": w, "Bias": b})
    traffic = tables["traffic-table"]
    head, total = traffic[0], traffic[-1]
    assert total[0] == "all"
    for loc in whole.locations:
        col = head.index(f"{loc} read")
        assert int(total[col].replace(",", "")) == whole.reads.get(loc, 0)
        assert int(total[col + 1].replace(",", "")) == whole.writes.get(loc, 0)


def test_cpu_roofline_uses_the_targets_ceilings(tmp_path: Path) -> None:
    target = load_target("cpu", host=HostFacts(peak_gflops=100.0, dram_gbps=10.0))
    a = np.ones((48, 32), np.float32)
    b = np.ones((32, 16), np.float32)
    src = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
    exe = stripeml.compile(src, target=target).lower(a, b)
    out = exe.explore(tmp_path / "mm.html", a, b)
    html = out.read_text()
    _self_contained(html)
    assert "DRAM 10 GB/s" in html and "peak 100 GFLOP/s" in html
    (row,) = _tables(html)["kernel-table"][1:]
    assert int(row[3].replace(",", "")) == 2 * 48 * 32 * 16
    assert int(row[4].replace(",", "")) == 4 * (48 * 32 + 32 * 16 + 48 * 16)
    assert row[7].endswith("%") and row[8] == "memory"
    assert "compulsory DRAM bytes" in html  # the CPU counts no traffic: the model's bytes


def test_explore_takes_random_inputs_and_checks_given_ones(npu_exe, tmp_path: Path) -> None:
    assert npu_exe.explore(tmp_path / "r.html").stat().st_size > 0
    with pytest.raises(stripeml.ShapeError):
        npu_exe.explore(tmp_path / "bad.html", np.ones((3, 3), np.float32), *mlp_inputs()[1:])


def test_cli_tile_on_the_npu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mm.html"
    argv = ["explore", "matmul", "-i", "A=256x192", "-i", "B=192x128", "--target", "examples/npu"]
    assert main([*argv, "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"wrote {out}" in captured.out
    assert "[stripeml]" in captured.err and "drawing the plots" in captured.err
    html = out.read_text()
    assert all(f'<section id="{k}">' in html for k in SECTIONS)
    assert "A_sram" in html and "SRAM read" in html


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explore", "nosuch.tile", "-o", "{tmp}/x.html"], "no such file"),
        (["explore", "matmul", "-i", "A=4x", "-o", "{tmp}/x.html"], "A=4x"),
        (["explore", "matmul", "-i", "Q=4x4", "-o", "{tmp}/x.html"], "no parameter named Q"),
        (["explore", "matmul", "-o", "{tmp}/no/such/dir/x.html"], "does not exist"),
        (["explore", "matmul", "-o", "{tmp}"], "is a folder"),
        (["explore", "nosuch.onnx", "-o", "{tmp}/x.html"], "no such ONNX model"),
        (["explore", "matmul", "--target", "nosuch", "-o", "{tmp}/x.html"], "nosuch"),
        (["explore", "matmul"], "-o"),
    ],
)
def test_cli_bad_use_is_one_message_and_status_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_rejected_program_is_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.tile"
    bad.write_text("function (A[M]) -> (C) { C[i : M] = +(A[i] * Q[i]); }\n")
    assert main(["explore", str(bad), "-i", "A=4", "-o", str(tmp_path / "x.html")]) == 1
    err = capsys.readouterr().err
    assert "bad.tile:1:" in err and "Traceback" not in err
    assert not (tmp_path / "x.html").exists()


def test_without_matplotlib_the_message_says_what_to_install(
    npu_exe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises
    with pytest.raises(stripeml.StripeError, match=r"stripeml\[explore\]"):
        npu_exe.explore(tmp_path / "x.html")


def test_light_resnet50_page(resnet_page: Path) -> None:
    html = resnet_page.read_text()
    _self_contained(html)
    for key in SECTIONS:
        section = re.search(rf'<section id="{key}">(.*?)</section>', html, re.S)
        assert section and "<svg" in section[1], key
    for name in ("fuse", "thread", "place"):
        assert f". {name}</b>" in html
    kernels = _tables(html)["kernel-table"][1:]
    assert len(kernels) > 100
    seconds = [float(r[1]) for r in kernels]
    assert seconds == sorted(seconds, reverse=True) and seconds[0] > 0
    assert 'id="mem-DRAM"' in html and "constants stacked on top" in html
