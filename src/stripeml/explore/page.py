"""The explorer's HTML page: one self-contained file (inline CSS and SVG, no
script, nothing fetched), written from a :class:`Report`.

Collapsible parts are ``<details>`` elements; tooltips are the SVG ``<title>``
elements :mod:`.plots` adds.  Everything taken from the program (names,
statements, IR text) is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from ..analysis.roofline import ProfileRow
from ..targets import Target
from ..targets.report import format_bytes
from .kernels import StepTraffic
from .memory import Location
from .passes import Kernel, PassRun, Stage

#: Stages whose diff is at most this many lines are shown open.
OPEN_DIFF_LINES = 80


@dataclass
class Report:
    """Everything the page shows (the plots already drawn, as SVG text)."""

    title: str
    target: Target
    stages: list[Stage]
    runs: list[PassRun]
    pass_svg: str
    locations: list[Location]
    memory_svgs: list[str]
    rows: list[ProfileRow]
    times_from: str  # where the kernel times come from, in words
    gflops: float | None
    gbps: float | None
    roofline_svg: str
    steps: list[StepTraffic]
    traffic_from: str  # what the traffic numbers are, in words
    traffic_svg: str
    notes: list[str] = field(default_factory=list)


_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #222; }
header { background: #20303f; color: #fff; padding: 12px 24px; }
header h1 { margin: 0 0 4px 0; font-size: 20px; }
header a { color: #cfe3ff; margin-right: 18px; }
main { padding: 0 24px 40px 24px; max-width: 1200px; }
section { margin-top: 28px; }
h2 { border-bottom: 2px solid #20303f; padding-bottom: 4px; }
.plot svg { width: 100%; height: auto; max-width: 1000px; }
.plot g[id]:hover path { stroke: #000; stroke-width: 1.5; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
th { background: #eef2f6; } td.l, th.l { text-align: left; }
td.l { max-width: 260px; overflow-wrap: anywhere; }
td.stmt { text-align: left; font-family: monospace; font-size: 12px; max-width: 420px;
          overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: 6px; overflow-x: auto;
      font-size: 12px; line-height: 1.3; max-height: 600px; }
.add { background: #e6ffec; display: block; } .del { background: #ffebe9; display: block; }
.hunk { color: #6f42c1; display: block; }
details { margin: 4px 0; } summary { cursor: pointer; }
details > details, details > pre { margin-left: 18px; }
details.stage { border: 1px solid #d8dee4; border-radius: 4px; padding: 4px 8px; }
.tag { background: #e8eefc; border-radius: 3px; padding: 0 4px; margin-left: 3px; font-size: 12px; }
.note { color: #555; } .bad { color: #b00020; font-weight: 600; }
.frac { font-weight: 600; }
"""


def render(report: Report) -> str:
    """The page's HTML text."""
    t = report.target
    nav = "".join(
        f'<a href="#{s}">{s.capitalize()}</a>' for s in ("passes", "memory", "kernels", "traffic")
    )
    head = (
        f"<h1>stripeml explore: {escape(report.title)}</h1>"
        f"<div>target <b>{escape(t.name)}</b> (backend {escape(t.backend)})"
        f"{' &mdash; ' + escape(t.description) if t.description else ''}</div>"
        f"<nav>{nav}</nav>"
    )
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in report.notes)
    body = [
        _passes(report),
        _memory(report),
        _kernels(report),
        _traffic(report),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>stripeml explore: {escape(report.title)}</title>"
        '<link rel="icon" href="data:,">'
        f"<style>{_CSS}</style></head><body><header>{head}</header><main>{notes}"
        + "".join(body)
        + "</main></body></html>\n"
    )


def _section(key: str, title: str, content: str) -> str:
    return f'<section id="{key}"><h2>{title}</h2>{content}</section>'


def _passes(r: Report) -> str:
    total = sum(run.seconds for run in r.runs)
    parts = [
        f"<p>{len(r.runs)} passes ran in {total * 1e3:.1f} ms; {len(r.stages) - 1} changed the "
        "program. Each stage below is the program after a pass that changed it: its diff "
        "against the stage before, and the kernels the pass touched (with their tags and the "
        "source statement each came from).</p>",
        f'<div class="plot">{r.pass_svg}</div>' if r.runs else "<p>(the target runs no passes)</p>",
    ]
    for k, st in enumerate(r.stages):
        time = f"{st.seconds * 1e3:.2f} ms" if st.seconds is not None else "the frontend's output"
        summary = (
            f"<b>{k}. {escape(st.name)}</b> &mdash; {time}; {st.lines} lines"
            + (f", +{st.added} &minus;{st.removed}" if k else "")
            + f"; {len(st.changed)} of {st.kernels} kernels {'new or changed' if k else ''}"
        )
        inner = []
        if k:
            opened = " open" if len(st.diff) <= OPEN_DIFF_LINES else ""
            cut = f"\n... {st.diff_cut} more lines not shown" if st.diff_cut else ""
            inner.append(
                f"<details{opened}><summary>diff against {escape(r.stages[k - 1].name)} "
                f"({len(st.diff) + st.diff_cut} lines)</summary><pre>{_diff(st.diff)}{cut}</pre></details>"
            )
        inner.append(
            f"<details><summary>kernels {'after this pass' if k else 'as lowered'} "
            f"({len(st.changed)})</summary>{''.join(_kernel(kk) for kk in st.changed)}</details>"
        )
        inner.append(
            f"<details><summary>the whole program ({st.lines} lines)</summary>"
            f"<pre>{escape(st.text)}</pre></details>"
        )
        parts.append(
            f'<details class="stage" id="stage-{k}"{" open" if k == len(r.stages) - 1 else ""}>'
            f"<summary>{summary}</summary>{''.join(inner)}</details>"
        )
    return _section("passes", "Passes", "".join(parts))


def _diff(lines: Sequence[str]) -> str:
    out = []
    for line in lines:
        cls = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1])
        text = escape(line)
        out.append(f'<span class="{cls}">{text}</span>' if cls else text + "\n")
    return "".join(out)


def _kernel(k: Kernel) -> str:
    tag_html = "".join(f'<span class="tag">#{escape(t)}</span>' for t in k.tags)
    stmt = f" <code>{escape(k.statement)}</code>" if k.statement else ""
    return (
        f"<details><summary><b>{escape(k.name)}</b>{tag_html}{stmt}</summary>"
        f"<pre>{escape(k.text)}</pre></details>"
    )


def _memory(r: Report) -> str:
    if not r.locations:
        return _section("memory", "Memory", "<p>The program allocates no temporaries.</p>")
    parts = [
        "<p>Each rectangle is a buffer: horizontally the program steps over which it is live "
        "(a kernel's own buffers inside its step), vertically its bytes in the location's "
        "arena, as the <code>place</code> pass put them. Point at a rectangle for its name "
        "and statement. Parameters (inputs, outputs) are not in any arena.</p>"
    ]
    for loc, svg in zip(r.locations, r.memory_svgs):
        if loc.capacity:
            share = 100 * loc.peak / loc.capacity
            cls = "bad" if loc.peak > loc.capacity else "frac"
            line = (
                f'peak <span class="{cls}">{format_bytes(loc.peak)}</span> of '
                f"{format_bytes(loc.capacity)} ({share:.1f}%)"
            )
            if loc.peak > loc.capacity:
                line += ' <span class="bad">exceeds the memory</span>'
        else:
            line = f"peak {format_bytes(loc.peak)} (the target gives this location no size)"
        unplaced = sum(1 for b in loc.buffers if not b.placed)
        if unplaced:
            line += f"; {unplaced} buffers without an offset are drawn stacked, hatched"
        rows = "".join(
            f'<tr><td class="l">{escape(b.name)}</td><td class="l">{escape(b.shape)}</td>'
            f"<td>{b.size:,}</td><td>{b.offset if b.placed else '-'}</td>"
            f'<td class="l">{escape(b.live)}</td><td class="stmt">{escape(b.statement)}</td></tr>'
            for b in loc.buffers
        )
        table = (
            f"<details><summary>{len(loc.buffers)} buffers in {escape(loc.name)}</summary><table>"
            '<tr><th class="l">buffer</th><th class="l">shape</th><th>bytes</th><th>offset</th>'
            f'<th class="l">live</th><th class="l">statement</th></tr>{rows}</table></details>'
        )
        parts.append(
            f'<h3 id="mem-{escape(loc.name)}">{escape(loc.name)}</h3><p>{line}</p>'
            f'<div class="plot">{svg}</div>{table}'
        )
    return _section("memory", "Memory", "".join(parts))


def _kernels(r: Report) -> str:
    if r.gflops is not None and r.gbps is not None:
        roofs = f"roofs: {r.gflops:g} GFLOP/s peak, {r.gbps:g} GB/s DRAM"
    else:
        known = [f"{r.gflops:g} GFLOP/s" if r.gflops else "", f"{r.gbps:g} GB/s" if r.gbps else ""]
        roofs = (
            "The target gives "
            + (" and ".join(k for k in known if k) or "no ceilings")
            + " (set peak_gflops and the DRAM level's bandwidth_gbs in its file for a full "
            "roofline); shares of the bound are unknown"
        )
    total = sum(row.seconds for row in r.rows) or 1.0
    rows = "".join(
        f'<tr><td class="l">{escape(row.kernel)}</td><td>{row.seconds * 1e3:.3f}</td>'
        f"<td>{100 * row.seconds / total:.1f}%</td><td>{row.flops:,}</td><td>{row.bytes:,}</td>"
        f"<td>{row.gflops:.3g}</td><td>{row.gbps:.3g}</td>"
        f"<td>{'-' if row.peak_fraction is None else f'{100 * row.peak_fraction:.1f}%'}</td>"
        f'<td class="l">{row.bound or "-"}</td><td class="stmt">{escape(row.statement)}</td></tr>'
        for row in r.rows
    )
    table = (
        '<table id="kernel-table"><tr><th class="l">kernel</th><th>time (ms)</th><th>share</th>'
        "<th>FLOPs</th><th>bytes</th><th>GFLOP/s</th><th>GB/s</th><th>of bound</th>"
        f'<th class="l">bound</th><th class="l">statement</th></tr>{rows}</table>'
    )
    content = (
        f"<p>{len(r.rows)} kernels, slowest first. Times: {escape(r.times_from)}. FLOPs and "
        "bytes: the roofline accounting of the final IR (bytes: the compulsory DRAM traffic). "
        f"{escape(roofs)}. Points low against their roof are far from what the target "
        "allows.</p>"
        f'<div class="plot">{r.roofline_svg}</div>{table}'
    )
    return _section("kernels", "Kernels", content)


def _traffic(r: Report) -> str:
    locations = list(dict.fromkeys(loc for s in r.steps for loc in (*s.reads, *s.writes)))
    rows = "".join(
        f'<tr><td class="l">{escape(s.kernel)}</td>'
        + "".join(
            f"<td>{s.reads.get(loc, 0):,}</td><td>{s.writes.get(loc, 0):,}</td>"
            for loc in locations
        )
        + "</tr>"
        for s in r.steps
    )
    heads = "".join(
        f"<th>{escape(loc)} read</th><th>{escape(loc)} written</th>" for loc in locations
    )
    sums = "".join(
        f"<td><b>{sum(s.reads.get(loc, 0) for s in r.steps):,}</b></td>"
        f"<td><b>{sum(s.writes.get(loc, 0) for s in r.steps):,}</b></td>"
        for loc in locations
    )
    table = (
        f'<table id="traffic-table"><tr><th class="l">kernel</th>{heads}</tr>{rows}'
        f'<tr><td class="l"><b>all</b></td>{sums}</tr></table>'
    )
    content = (
        f'<p>{escape(r.traffic_from)}</p><div class="plot">{r.traffic_svg}</div>'
        f"<details><summary>bytes per kernel and location</summary>{table}</details>"
    )
    return _section("traffic", "Traffic", content)
