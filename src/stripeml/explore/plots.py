"""The page's pictures, drawn with matplotlib and embedded as inline SVG.

matplotlib is imported here only (``pip install 'stripeml[explore]'``): axes,
log scales, ticks and legends are its business, not hand-written arithmetic.
Each figure is a :class:`matplotlib.figure.Figure` (no pyplot: no global
state, no window), saved as SVG with text kept as text.  Every element a
reader may point at gets a ``gid``; :func:`_svg` then puts an SVG ``<title>``
in that element, which browsers show as a tooltip: hovering names a buffer
and its statement, or a kernel and its figures, without any JavaScript.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from ..errors import StripeError
from ..targets.report import format_bytes
from .kernels import StepTraffic
from .memory import Location
from .passes import PassRun

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..analysis.roofline import ProfileRow

_WIDTH = 10.0  # inches; the page scales the SVG to its column
_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3")


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise StripeError(
            "the explorer draws with matplotlib, which is not installed: "
            "pip install 'stripeml[explore]' (or matplotlib>=3.8)"
        ) from None
    return matplotlib


def _figure(height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(_WIDTH, height), layout="constrained")


def _svg(fig: Figure, key: str, titles: Mapping[str, str]) -> str:
    """``fig`` as an ``<svg>`` element; the element with gid ``g`` gets ``titles[g]``.

    ``key`` salts matplotlib's generated ids (clip paths, markers), so that
    several figures inline in one page never share an id by accident."""
    mpl = _matplotlib()
    out = io.StringIO()
    with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": key}):
        fig.savefig(out, format="svg", metadata={"Date": None})
    text = out.getvalue()
    text = text[text.index("<svg") :]

    def titled(m: re.Match[str]) -> str:
        title = titles.get(m[1])
        return m[0] if title is None else f"{m[0]}\n  <title>{escape(title)}</title>"

    return re.sub(r'<g id="([^"]+)"[^>]*>', titled, text)


def pass_times(runs: Sequence[PassRun]) -> str:
    """Horizontal bars: each pass run's time, in pipeline order; runs that changed
    the program in colour, the others grey."""
    fig = _figure(0.6 + 0.28 * max(len(runs), 1))
    ax = fig.add_subplot()
    titles = {}
    for k, run in enumerate(runs):
        bar = ax.barh(k, run.seconds * 1e3, color=_COLORS[0] if run.changed else "#BBBBBB")
        gid = f"pass{k}"
        bar.patches[0].set_gid(gid)
        what = "changed the program" if run.changed else "no change"
        titles[gid] = f"{run.name}: {run.seconds * 1e3:.2f} ms ({what})"
    ax.set_yticks(range(len(runs)), [r.name for r in runs])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title("time of each pass (grey: changed nothing)")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, "passes", titles)


def memory(loc: Location, steps: int, labels: Sequence[str]) -> str:
    """Buffers of one location as rectangles: program step against byte offset,
    with the peak and (when it is in view) the capacity as lines.

    Constant temporaries (stacked last, above everything else) are kept for
    every run; when they would take most of the picture they are left above
    it and named in the legend, so the arena that is reused stays readable."""
    mpl = _matplotlib()
    fig = _figure(3.6)
    ax = fig.add_subplot()
    span = max(steps, 1)
    min_width = span / 500  # a buffer of one nested statement stays visible
    titles = {}
    varying = [b for b in loc.buffers if not b.constant]
    constant = sum(b.size for b in loc.buffers if b.constant)
    arena = max([b.offset + b.size for b in varying] + [1])
    cut = constant > arena  # constants above the picture
    for k, b in enumerate(loc.buffers):
        color = "#999999" if b.constant else _COLORS[k % len(_COLORS)]
        rect = mpl.patches.Rectangle(
            (b.start, b.offset),
            max(b.end - b.start, min_width),
            b.size,
            facecolor=color,
            edgecolor="black",
            linewidth=0.4,
            alpha=0.75,
            hatch=None if b.placed else "//",
        )
        gid = f"{_ident(loc.name)}buf{k}"
        rect.set_gid(gid)
        ax.add_patch(rect)
        titles[gid] = _buffer_title(b)
    top = arena if cut else max([b.offset + b.size for b in loc.buffers] + [loc.peak, 1])
    peak = f"peak {format_bytes(loc.peak)}"
    if cut:
        peak += f" (above the picture: {format_bytes(constant)} of constants stacked on top)"
        ax.plot([], [], color="#C44E52", linewidth=1.5, label=peak)
    else:
        ax.axhline(loc.peak, color="#C44E52", linewidth=1.5, label=peak)
    if loc.capacity is not None:
        label = f"capacity {format_bytes(loc.capacity)}"
        if loc.capacity <= 4 * top:
            ax.axhline(loc.capacity, color="black", linestyle="--", linewidth=1.2, label=label)
            top = max(top, loc.capacity)
        else:  # far above: a line off the picture, named in the legend
            ax.plot([], [], color="black", linestyle="--", label=f"{label} (above the picture)")
    ax.set_xlim(0, span)
    ax.set_ylim(0, top * 1.08)
    # Ticks at multiples of a power of two: offsets read as 64 KiB, 128 KiB ...
    ax.yaxis.set_major_locator(
        mpl.ticker.MultipleLocator(2 ** max(0, math.floor(math.log2(top / 4))))
    )
    ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _: format_bytes(int(v))))
    if len(labels) <= 12:
        ax.set_xticks([k + 0.5 for k in range(len(labels))], labels, fontsize=8)
    else:
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("program step (kernel)")
    ax.set_ylabel("offset")
    notes = []
    if not all(b.placed for b in loc.buffers):
        notes.append("hatched: no offset, drawn stacked")
    if constant:
        notes.append("grey: constant, kept for every run")
    title = f"{loc.name}: {len(loc.buffers)} buffers" + (f" ({'; '.join(notes)})" if notes else "")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    return _svg(fig, f"mem-{loc.name}", titles)


def _buffer_title(b: Any) -> str:
    where = f"offset {b.offset}" if b.placed else "no offset (drawn stacked)"
    lines = [
        f"{b.name}  {b.shape}  {format_bytes(b.size)} @ {b.location}, {where}",
        f"live: {b.live}" + ("; its initial zeros are read" if b.from_start else ""),
    ]
    if b.kernel:
        lines.append(f"kernel: {b.kernel}")
    if b.statement:
        lines.append(f"statement: {b.statement}")
    return "\n".join(lines)


def roofline(rows: Sequence[ProfileRow], gflops: float | None, gbps: float | None) -> str:
    """Log-log roofline: arithmetic intensity against achieved GFLOP/s, one point per
    kernel (coloured by its share of the bound), under the target's roofs.  Kernels
    with no FLOPs (copies, fills) have no place on it: a strip below shows their
    achieved GB/s against the DRAM bandwidth."""
    mpl = _matplotlib()
    shown = [r for r in rows if r.flops > 0 and r.bytes > 0 and r.seconds > 0]
    copies = [r for r in rows if r.flops == 0 and r.bytes > 0 and r.seconds > 0]
    fig = _figure(6.2 if copies else 4.8)
    if copies:
        ax, strip = fig.subplots(2, 1, height_ratios=[4, 1.2])
    else:
        ax, strip = fig.add_subplot(), None
    xs = [r.flops / r.bytes for r in shown]
    ys = [r.gflops for r in shown]
    lo_x = min(xs + [1.0]) / 4
    hi_x = max(xs + [1.0]) * 4
    if gflops is not None and gbps is not None:
        lo_x, hi_x = min(lo_x, gflops / gbps / 8), max(hi_x, gflops / gbps * 8)
    grid = [lo_x * (hi_x / lo_x) ** (k / 200) for k in range(201)]
    if gbps is not None:
        roof = [gbps * x if gflops is None else min(gflops, gbps * x) for x in grid]
        ax.plot(grid, roof, color="black", linewidth=2, label=f"DRAM {gbps:.4g} GB/s")
    if gflops is not None:
        ax.axhline(
            gflops, color="black", linestyle=":", linewidth=1, label=f"peak {gflops:.4g} GFLOP/s"
        )
    titles: dict[str, str] = {}
    cmap = mpl.colormaps["RdYlGn"]
    total = sum(r.seconds for r in rows) or 1.0

    def dot(axes: Any, r: ProfileRow, x: float, y: float, gid: str) -> None:
        frac = r.peak_fraction
        color = cmap(min(frac, 1.0)) if frac is not None else _COLORS[0]
        size = 20 + 400 * r.seconds / total
        dots = axes.scatter(
            [x], [y], s=size, color=color, edgecolor="black", linewidth=0.5, zorder=3
        )
        dots.set_gid(gid)
        titles[gid] = kernel_title(r)

    for k, (r, x, y) in enumerate(zip(shown, xs, ys)):
        dot(ax, r, x, y, f"kern{k}")
    _label_slowest(ax, [(r, x, y) for r, x, y in zip(shown, xs, ys)])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo_x, hi_x)
    if ys:
        roofs = [gflops] if gflops else []
        if gbps is not None:  # the roof above the rightmost point stays in view
            roofs.append(gbps * max(xs) if gflops is None else min(gflops, gbps * max(xs)))
        ax.set_ylim(min(ys) / 4, max(ys + roofs) * 3)
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved GFLOP/s")
    title = "roofline: one point per kernel (size: share of the time; colour: share of the bound)"
    idle = len(rows) - len(shown) - len(copies)
    if idle:
        title += (
            f"\n{idle} kernel(s) not drawn: no time in these runs (constants are computed "
            "once, before them) or nothing moved"
        )
    ax.set_title(title, fontsize=10)
    ax.grid(which="both", alpha=0.25)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=8)
    if strip is not None:
        rates = [r.gbps for r in copies]
        for k, r in enumerate(copies):
            dot(strip, r, r.gbps, (k * 0.618) % 1.0, f"copy{k}")
        if gbps is not None:
            strip.axvline(gbps, color="black", linewidth=2, label=f"DRAM {gbps:.4g} GB/s")
            rates.append(gbps)
        strip.set_xscale("log")
        strip.set_xlim(min(rates) / 3, max(rates) * 3)
        strip.set_ylim(-0.2, 1.2)
        strip.set_yticks([])
        strip.set_xlabel("achieved GB/s")
        strip.set_title(
            f"{len(copies)} kernel(s) with no FLOPs (copies, fills): bandwidth", fontsize=9
        )
        strip.grid(axis="x", which="both", alpha=0.25)
    if any(r.peak_fraction is not None for r in rows):
        norm = mpl.colors.Normalize(0, 1)
        axes = [ax] if strip is None else [ax, strip]
        fig.colorbar(
            mpl.cm.ScalarMappable(norm, cmap), ax=axes, label="share of the roofline bound"
        )
    return _svg(fig, "roofline", titles)


def _label_slowest(ax: Any, points: list[tuple[ProfileRow, float, float]], count: int = 6) -> None:
    """Name the ``count`` slowest kernels next to their points, skipping a label
    that would sit on one already written."""
    placed: list[tuple[float, float]] = []
    for r, x, y in sorted(points, key=lambda t: -t[0].seconds)[:count]:
        lx, ly = math.log10(x), math.log10(max(y, 1e-12))
        if any(abs(lx - px) < 0.15 and abs(ly - py) < 0.08 for px, py in placed):
            continue
        placed.append((lx, ly))
        ax.annotate(r.kernel, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=7)


def kernel_title(r: ProfileRow) -> str:
    text = (
        f"{r.kernel}: {r.seconds * 1e3:.3f} ms, {r.flops:,} FLOPs, {format_bytes(r.bytes)}, "
        f"{r.gflops:.3g} GFLOP/s, {r.gbps:.3g} GB/s"
    )
    if r.peak_fraction is not None:
        text += f", {100 * r.peak_fraction:.1f}% of the roofline bound ({r.bound}-bound)"
    return text + (f"\n{r.statement}" if r.statement else "")


def traffic(steps: Sequence[StepTraffic], locations: Sequence[str], limit: int = 40) -> str:
    """Grouped horizontal bars (log scale): per kernel, bytes moved (read plus
    written) at each location; the ``limit`` kernels that moved most."""
    mpl = _matplotlib()
    busiest = sorted(steps, key=lambda s: -sum(s.reads.values()) - sum(s.writes.values()))
    shown = busiest[:limit]
    fig = _figure(1.2 + 0.32 * len(shown) * max(1, len(locations)) ** 0.5)
    ax = fig.add_subplot()
    height = 0.8 / max(len(locations), 1)
    titles = {}
    for j, loc in enumerate(locations):
        for k, s in enumerate(shown):
            r, w = s.reads.get(loc, 0), s.writes.get(loc, 0)
            if r + w == 0:
                continue
            bar = ax.barh(k + j * height, r + w, height=height, color=_COLORS[j % len(_COLORS)])
            gid = f"traf{j}x{k}"
            bar.patches[0].set_gid(gid)
            titles[gid] = f"{s.kernel} @ {loc}: read {r:,} B, written {w:,} B" + (
                f"\n{s.statement}" if s.statement else ""
            )
    handles = [
        mpl.patches.Patch(color=_COLORS[j % len(_COLORS)], label=loc)
        for j, loc in enumerate(locations)
    ]
    ax.set_yticks(
        [k + 0.4 - height / 2 for k in range(len(shown))], [s.kernel for s in shown], fontsize=8
    )
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(mpl.ticker.EngFormatter(unit="B"))
    ax.set_xlabel("bytes read + written (log scale)")
    more = (
        f" ({len(shown)} of {len(steps)} kernels: those that moved most)"
        if len(steps) > limit
        else ""
    )
    ax.set_title("bytes moved per memory level, per kernel" + more, fontsize=10)
    ax.grid(axis="x", which="both", alpha=0.25)
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    return _svg(fig, "traffic", titles)


def _ident(name: str) -> str:
    return re.sub(r"\W", "_", name)
