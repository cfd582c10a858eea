"""Per-kernel options: a tuned choice applied to one root kernel only.

A *choice* is what ``stripeml tune`` measured best for one kernel: pass name
-> {tunable option -> value} (docs/tuning.md).  Choices are keyed by the
kernel's structural key, :func:`kernel_key` (a hash of its canonical form,
:mod:`stripeml.analysis.canonical`, so a model's repeated layers share one),
taken at the *tuning point*: the input of the first pass of the pipeline that
declares tunable options (:func:`tuning_point`).  Passes before it run as the
target file says; from there on each kernel keeps its identity through its
name (the passes that may be tuned keep a kernel's name, and name the parts
they split it into ``NAME_...``), so :class:`KernelChoices` maps names to
choices once, at the tuning point.

A pass with choices for some kernels runs on *segments*: maximal runs of
consecutive root statements that get the same options.  Each segment is run
as a program of its own (the root's buffers, its statements only) with its
options; the results are put back in order, and buffers a segment added to the
root (packed constant panels) are added once, and buffers a segment's run
dropped are dropped.  That is exact for the passes that may declare tunable
options (the registry's rule: each root kernel decided on its own), and
checked: a pass that looks past a kernel (``winograd`` asks whether anything
else reads a convolution's result) sees only its segment, so when a
segment's run stopped writing a buffer another segment reads, or dropped one
the result still uses, the pass runs over the whole program with the file's
options instead (docs/tuning.md).  A pass without choices, or a pipeline
without any, runs as usual: tuning changes nothing for kernels it has not
measured.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..analysis.canonical import canonical_kernel
from ..ir.nodes import Block, Program, Refinement, Special, Statement
from .registry import Pass, tunable_options, with_choice

#: One kernel's choice: pass name -> option -> value.
Choice = Mapping[str, Mapping[str, object]]

__all__ = ["Choice", "KernelChoices", "kernel_key", "tuning_point"]


def kernel_key(root: Block, kernel: Block) -> str:
    """The structural key of root kernel ``kernel``: sha256 of its canonical text."""
    return hashlib.sha256(canonical_kernel(root, kernel).text.encode()).hexdigest()


def tuning_point(passes: Sequence[Pass]) -> int | None:
    """Index of the first pass of ``passes`` with tunable options (None: none)."""
    for n, p in enumerate(passes):
        if tunable_options(p):
            return n
    return None


class KernelChoices:
    """The choices that apply to one program: root kernel name -> choice."""

    def __init__(self, by_name: Mapping[str, Choice], names: frozenset[str] = frozenset()) -> None:
        self.by_name = dict(by_name)
        #: the kernels' names at the tuning point (a part's name never is one)
        self.names = names | frozenset(by_name)

    @classmethod
    def at_tuning_point(cls, program: Program, choices: Mapping[str, Choice]) -> KernelChoices:
        """Each root kernel of ``program`` whose key has a choice; a name two
        kernels share (never made by the frontends) is left untuned."""
        by_name: dict[str, Choice] = {}
        seen: set[str] = set()
        for s in program.root.stmts:
            if not isinstance(s, Block):
                continue
            if s.name in seen:
                by_name.pop(s.name, None)
                continue
            seen.add(s.name)
            choice = choices.get(kernel_key(program.root, s))
            if choice:
                by_name[s.name] = choice
        return cls(by_name, frozenset(seen))

    def options_for(self, kernel: Block, pass_name: str) -> Mapping[str, object] | None:
        """The options ``pass_name`` takes for ``kernel`` (None: the file's)."""
        name = kernel.name
        while name:
            if name in self.names:
                choice = self.by_name.get(name)
                return (choice.get(pass_name) or None) if choice is not None else None
            name = name.rpartition("_")[0]  # a part ``k0_Z_rest`` of a kernel ``k0_Z``
        return None

    def run(self, p: Pass, program: Program) -> Program:
        """``p`` over ``program``, each kernel with its own options."""
        segments: list[tuple[tuple[tuple[str, object], ...] | None, list[Statement]]] = []
        for s in program.root.stmts:
            options = self.options_for(s, p.name) if isinstance(s, Block) else None
            key = tuple(sorted(options.items())) if options else None
            if segments and segments[-1][0] == key:
                segments[-1][1].append(s)
            else:
                segments.append((key, [s]))
        if all(key is None for key, _ in segments) or not tunable_options(p):
            return p.run(program)
        if getattr(p, "chain_choices", False):
            # the pass takes each chain's options from its first kernel (``nest``)
            return p.run_choices(program, lambda k: self.options_for(k, p.name))  # type: ignore[attr-defined]
        root = program.root
        refs: dict[str, Refinement] = {r.into: r for r in root.refs}
        stmts: list[Statement] = []
        changed = False
        removed: set[str] = set()  # root buffers a segment's run dropped
        # per segment: the root buffers its statements read, and those they no
        # longer write (``winograd`` merges a consumer: the result is never stored)
        reads: list[set[str]] = []
        lost: list[set[str]] = []
        for key, part in segments:
            runner = p if key is None else with_choice(p, dict(key))
            sub = Program(replace(root, refs=tuple(refs.values()), stmts=tuple(part)))
            done = runner.run(sub)
            changed |= done is not sub
            stmts.extend(done.root.stmts)
            kept = {r.into for r in done.root.refs}
            removed |= {r.into for r in sub.root.refs} - kept
            for r in done.root.refs:
                refs[r.into] = r
            reads.append(_root_uses(done.root.stmts, write=False))
            lost.append(_root_uses(part, write=True) - _root_uses(done.root.stmts, write=True))
        if not changed:
            return program
        # Exact only if no segment's run decided something another segment's
        # statements contradict: a pass that looks past a kernel (``winograd``
        # asks whether anything else reads a convolution's result) saw only its
        # segment.  Otherwise the pass runs over the whole program with the
        # file's options: slower code perhaps, never wrong code.
        used = _root_uses(stmts, write=False) | _root_uses(stmts, write=True)
        for n, gone in enumerate(lost):
            if any(gone & r for m, r in enumerate(reads) if m != n):
                return p.run(program)
        if removed & used:
            return p.run(program)
        return Program(
            replace(
                root,
                refs=tuple(r for name, r in refs.items() if name not in removed),
                stmts=tuple(stmts),
            )
        )


def _root_uses(stmts: Sequence[Statement], write: bool) -> set[str]:
    """The root buffers the root statements ``stmts`` write (``write``) or read."""
    dirs = ("out", "inout") if write else ("in", "inout")
    out: set[str] = set()
    for s in stmts:
        if isinstance(s, Block):
            out |= {r.from_ or r.into for r in s.refs if r.dir in dirs}
        elif isinstance(s, Special):
            out |= set(s.outputs if write else s.inputs)
    return out
