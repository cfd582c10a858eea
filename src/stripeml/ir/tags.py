"""The tag vocabulary: every tag a block may carry, who sets it and who reads it.

Tags (``#kernel``, ``#tiled`` ...) are how passes pick the blocks they work on
(a selector such as ``select = "tiled"`` in a target file, see
:mod:`stripeml.analysis.select`) and how one stage leaves a mark for a later
one.  In the IR they are plain strings, so this table is the one place that
says what each means.  The verifier rejects a block carrying a tag that is not
declared here; ``docs/stripe-ir.md`` shows the table (:func:`markdown_table`
writes it, and a test keeps the two equal).

Modules are named relative to ``stripeml`` (``passes.fuse``).  ``set_by``
lists the modules that put the tag on a block, ``read_by`` those whose
behaviour depends on it (selector defaults included); a test checks that each
named module's source spells the tag.  A tag nobody reads is a mark for
people, tests and target-file selectors.  A family (``agg_add``, ``agg_max``
...) is declared once, with its allowed values.

    python -m stripeml.ir.tags     # prints the table for docs/stripe-ir.md
"""

from __future__ import annotations

from dataclasses import dataclass

from .nodes import AGGREGATIONS


@dataclass(frozen=True, slots=True)
class Tag:
    """One tag, or a family ``name_value`` for each of ``values``."""

    name: str
    meaning: str
    set_by: tuple[str, ...]
    read_by: tuple[str, ...] = ()
    values: tuple[str, ...] = ()

    @property
    def spellings(self) -> tuple[str, ...]:
        """The tags as blocks carry them: ``name``, or ``name_value`` per value."""
        if not self.values:
            return (self.name,)
        return tuple(f"{self.name}_{v}" for v in self.values)


TAGS: tuple[Tag, ...] = (
    Tag(
        "program",
        "the root block of a program; its refinements are the parameters, results and temporaries",
        set_by=("tile.lower",),
        read_by=("ir.verifier",),
    ),
    Tag(
        "kernel",
        "a root-level unit of work (one lowered statement, or a fused group); "
        "nested blocks lose it",
        set_by=(
            "tile.lower",
            "tile.eltwise",
            "passes.halo",
            "passes._fuse_contraction",
            "passes._const_panels",
            "passes._winograd_kernels",
        ),
        read_by=("passes.fuse", "passes.thread", "passes.vectorize"),
    ),
    Tag(
        "contraction",
        "lowered from a Tile contraction: aggregates over its reduction indices",
        set_by=("tile.lower", "passes._winograd_kernels"),
        read_by=(
            "passes.fuse",
            "passes.autotile",
            "passes.halo",
            "passes.unroll",
            "passes.winograd",
        ),
    ),
    Tag(
        "agg",
        "the aggregation of a lowered contraction (`agg_add` for `+`, `agg_max` for `>` ...)",
        set_by=("tile.lower", "passes._winograd_kernels"),
        values=tuple(a for a in AGGREGATIONS if a),
    ),
    Tag(
        "eltwise",
        "pointwise: each point computes and assigns its own output elements",
        set_by=(
            "tile.lower",
            "tile.eltwise",
            "passes.halo",
            "passes.epilogue",
            "passes._const_panels",
            "passes._winograd_kernels",
        ),
        read_by=("passes.fuse", "passes.epilogue"),
    ),
    Tag(
        "fill",
        "stores an output's initial value (0 or the `default` tensor) before its "
        "contraction aggregates into it; `halo` fills its padding with it too",
        set_by=("tile.lower", "passes.halo"),
        read_by=(
            "passes.fuse",
            "passes._fuse_contraction",
            "passes.alias_default",
            "passes.epilogue",
        ),
    ),
    Tag(
        "fused",
        "the result of fusing blocks: `fuse`, and `epilogue` taking an elementwise "
        "consumer into a register-tiled kernel",
        set_by=("passes.fuse", "passes._fuse_contraction", "passes.epilogue"),
    ),
    Tag(
        "reduce",
        "a contraction fused into its elementwise consumer, nested in it: reduces into "
        "the point's own buffer",
        set_by=("passes._fuse_contraction",),
    ),
    Tag(
        "tiled",
        "an outer block over tiles (`autotile`; `unroll`'s register tiles); GPU code "
        "generation maps its tiles to work-groups",
        set_by=("passes.autotile", "passes._register_tile"),
        read_by=("passes.autotile", "passes.cache", "passes.epilogue", "codegen.gpu_plan"),
    ),
    Tag(
        "tile",
        "the block inside a `#tiled` one, over the points of one tile",
        set_by=("passes.autotile", "passes._register_tile"),
    ),
    Tag(
        "thread",
        "the first index was proven race-free to split across threads",
        set_by=("passes.thread",),
        read_by=("passes.thread", "codegen.llvm_plan"),
    ),
    Tag(
        "serial",
        "the kernel runs on one thread: no index is split (`thread`'s `serial_below`, "
        "a choice of `stripeml tune`)",
        set_by=("passes.thread",),
        read_by=("passes.thread", "codegen.llvm_plan"),
    ),
    Tag(
        "vector",
        "the last index is the vector index (`vectorize`)",
        set_by=("passes.vectorize",),
        read_by=("passes.vectorize",),
    ),
    Tag(
        "copy",
        "copies a view element by element: `cache`'s stages, `halo`'s interior, `unroll`'s "
        "packs and its layouts of constant panels",
        set_by=("passes.cache", "passes.halo", "passes._register_tile", "passes._const_panels"),
        read_by=("passes.cache",),
    ),
    Tag(
        "cache",
        "a block `cache` (or `unroll`'s packing) adds around a staged buffer: `in` copies "
        "into it, `out` copies it back through the view's aggregation, `init` fills it "
        "with the aggregation's identity",
        set_by=("passes.cache", "passes._register_tile"),
        read_by=("passes.cache",),
        values=("in", "out", "init"),
    ),
    Tag(
        "register_tile",
        "the inner block of a register tile; its accumulators stay in registers across "
        "the reduction (the CPU code generator recognises its shape)",
        set_by=("passes._register_tile",),
        read_by=("passes.unroll", "passes.epilogue"),
    ),
    Tag(
        "prefetch",
        "a register tile whose kernel streams its panels from beyond the cache: each "
        "step of its reduction also fetches a part of the next panel",
        set_by=("passes.prefetch",),
        read_by=("codegen.llvm_prefetch",),
    ),
    Tag(
        "epilogue",
        "an elementwise consumer run on each finished register tile",
        set_by=("passes.epilogue",),
    ),
    Tag(
        "nest",
        "a root kernel over row blocks whose statements are a chain of kernels, each "
        "restricted to one block, the chain's intermediates allocations of the block "
        "(attention's scores); later passes treat its statements as root kernels",
        set_by=("passes.nest",),
        read_by=("passes._common",),
    ),
    Tag(
        "winograd",
        "a transform of a Winograd convolution (weights, input blocks or output "
        "blocks): straight-line sums of its loads, compiled at LLVM's O1",
        set_by=("passes._winograd_kernels",),
        read_by=("codegen.llvm_levels",),
    ),
    Tag(
        "once",
        "reads only constant buffers, so the runtime computes it once: compiled at "
        "LLVM's O0 (the weight transform of a Winograd convolution with constant weights)",
        set_by=("passes._winograd_kernels",),
        read_by=("codegen.llvm_levels",),
    ),
    Tag(
        "writes_once",
        "each point writes elements no other point reads or writes, by construction, "
        "so every index is race-free: `thread` chooses without its analysis",
        set_by=("passes.winograd",),
        read_by=("passes.thread",),
    ),
)

DECLARED: frozenset[str] = frozenset(s for t in TAGS for s in t.spellings)


def declaration(tag: str) -> Tag | None:
    """The entry of :data:`TAGS` that declares ``tag`` (``None``: undeclared)."""
    return next((t for t in TAGS if tag in t.spellings), None)


def markdown_table() -> str:
    """:data:`TAGS` as the Markdown table in ``docs/stripe-ir.md``."""

    def names(modules: tuple[str, ...]) -> str:
        return ", ".join(f"`{m}`" for m in modules) or "-"

    lines = ["| tag | meaning | set by | read by |", "|---|---|---|---|"]
    for t in TAGS:
        tag = f"`#{t.name}`" if not t.values else f"`#{t.name}_*`: {', '.join(t.values)}"
        lines.append(f"| {tag} | {t.meaning} | {names(t.set_by)} | {names(t.read_by)} |")
    return "\n".join(lines) + "\n"


__all__ = ["DECLARED", "TAGS", "Tag", "declaration", "markdown_table"]


if __name__ == "__main__":
    print(markdown_table(), end="")
