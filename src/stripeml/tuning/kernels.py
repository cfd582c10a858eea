"""The units of tuning: each root kernel at the tuning point, measured in its program.

A program is run through its target's pipeline up to the tuning point (the
first pass with tunable options, :func:`stripeml.passes._kernel_choices.tuning_point`);
each distinct root kernel there (by structural key: a model's repeated layers
are one job, weighted by how often they occur) becomes a :class:`KernelJob`.
A candidate is measured **as it will run**: the whole program at the tuning
point, with the candidate's options for that kernel (every occurrence of its
key) and the target's for the others, is run through the rest of the pipeline
(so ``epilogue`` merges the following bias and activation into it, exactly as
in a compile), compiled, run on the call's inputs and compared with the
interpreter's outputs of the whole program (the oracle, computed once per
tune) before it is timed (:func:`build_candidate`).  A measurer runs only
the passes a candidate's choice can change (:class:`Stages`): the program is
the one the whole pipeline gives, at a quarter or less of the cost.

What is timed is the kernel's *window* inside the whole program
(:func:`window_seconds`): the steps the compiled program runs for the kernel
(its parts: ``k3_O``, ``k3_O_rest``, ``k3_O_panels``) and, for a contraction,
for the elementwise kernel that immediately follows it when that one reads
what it writes (``epilogue`` may merge it in), from the runtime's per-step timer,
with the buffers where the program leaves them (caches as in a real run).
Earlier versions timed the kernel alone, before ``epilogue``: a thread choice
measured there was wrong once the epilogue ran inside it (docs/tuning.md).

Jobs are plain data (Stripe text and arrays), so an executor can send them to
other processes or machines, which rebuild the target from its name.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..errors import StripeError
from ..ir.dtypes import is_float, to_numpy
from ..ir.nodes import Block, Program, Refinement
from ..ir.parser import parse as parse_ir
from ..ir.printer import block_header, format_block, format_ref, format_stmt
from ..ir.printer import format as format_ir
from ..ir.verifier import verify
from ..passes._kernel_choices import Choice, KernelChoices, kernel_key, tuning_point
from ..passes.manager import run_pipeline
from ..passes.registry import tunable_options, tuning_start, with_choice
from ..runtime.backend import Compiled, backend_for
from ..runtime.interp import run as interpret
from ..targets import Target

__all__ = [
    "Built", "KernelJob", "Stages", "build_candidate", "check_outputs", "kernel_jobs",
    "owner_seconds", "step_owner", "window_seconds",
]  # fmt: skip


@dataclass
class KernelJob:
    """One kernel to tune: ``program`` (Stripe text) is the whole program at the
    tuning point, ``inputs`` its parameters' values and ``expected`` the
    interpreter's outputs; ``name`` is the kernel's name there (its first
    occurrence), ``window`` the names whose steps are timed, ``names`` every
    root kernel's name at the tuning point (a step's owner, see
    :func:`step_owner`)."""

    key: str
    label: str
    count: int
    program: str
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    point: int
    name: str = ""
    window: tuple[str, ...] = ()
    names: frozenset[str] = frozenset()
    _parsed: Program | None = field(default=None, repr=False, compare=False)

    @property
    def parsed(self) -> Program:
        if self._parsed is None:
            self._parsed = parse_ir(self.program)
        return self._parsed

    def __getstate__(self) -> dict[str, Any]:  # the text travels, not the parsed tree
        return {**self.__dict__, "_parsed": None}


@dataclass
class Built:
    """A candidate compiled and checked: ``text`` is its optimised program (two
    choices that give the same text are one candidate), ``error`` why it was
    discarded (None: it matched the interpreter)."""

    text: str
    compiled: Compiled | None
    error: str | None = None


def _label(kernel: Block) -> str:
    marks = " ".join(f"#{t}" for t in sorted(kernel.tags - {"kernel"}))
    shape = ", ".join(f"{i.name}:{i.range}" for i in kernel.idxs)
    comment = kernel.comment.strip()
    if len(comment) > 60:
        comment = comment[:57] + "..."
    return f"{kernel.name} [{shape}] {marks}" + (f"  // {comment}" if comment else "")


def _random(ref: Refinement, rng: np.random.Generator) -> np.ndarray:
    dtype = to_numpy(ref.shape.dtype)
    sizes = tuple(ref.shape.sizes)
    if ref.shape.dtype == "bool":
        return rng.random(sizes) < 0.5
    if is_float(ref.shape.dtype):
        return rng.standard_normal(sizes).astype(dtype)
    return rng.integers(0, 4, sizes).astype(dtype)  # small: valid as indices, no overflow


def _window(stmts: list[Block], n: int) -> tuple[str, ...]:
    """Kernel ``n`` and, when ``n`` is a contraction, the next root kernel if that
    one is elementwise and reads what ``n`` writes (what ``epilogue`` may merge
    into it).  Nothing else: a halo's zero fill is read by the convolution
    after it, and timing that convolution in the fill's window made the fill's
    candidates look 5-10% faster or slower by the convolution's noise."""
    kernel = stmts[n]
    names = [kernel.name]
    if n + 1 < len(stmts) and "contraction" in kernel.tags:
        after = stmts[n + 1]
        if "eltwise" in after.tags and "fill" not in after.tags:
            written = {r.from_ for r in kernel.refs if r.dir in ("out", "inout")}
            if any(r.from_ in written and r.dir in ("in", "inout") for r in after.refs):
                names.append(after.name)
    return tuple(names)


def kernel_jobs(
    program: Program,
    target: Target,
    constants: Mapping[str, np.ndarray],
    seed: int = 0,
    inputs: Mapping[str, np.ndarray] | None = None,
) -> tuple[list[KernelJob], list[str]]:
    """The jobs of ``program`` (as lowered) for ``target``, and lines saying
    what cannot be tuned.  ``inputs``: the call's parameters by name (random
    values for the ones missing); ``constants`` are added to them."""
    point = tuning_point(target.passes)
    if point is None:
        return [], []
    at_point = run_pipeline(program, target.passes[:point]).program
    root = at_point.root
    rng = np.random.default_rng(seed)
    values: dict[str, np.ndarray] = {}
    for r in root.refs:
        if r.dir not in ("in", "inout"):
            continue
        given = (inputs or {}).get(r.into)
        if given is None:
            given = constants.get(r.into)
        values[r.into] = np.asarray(given) if given is not None else _random(r, rng)
    try:
        expected = interpret(at_point, dict(values))
    except (StripeError, ValueError, IndexError, FloatingPointError) as exc:
        return [], [f"not tuned: the interpreter rejects the inputs ({type(exc).__name__}: {exc})"]
    kernels = [s for s in root.stmts if isinstance(s, Block)]
    names = frozenset(k.name for k in kernels)
    text = format_ir(at_point)
    chains = _chains(at_point, target, point, names)
    jobs: dict[str, KernelJob] = {}
    for n, s in enumerate(kernels):
        key = kernel_key(root, s)
        if key in jobs:
            jobs[key].count += 1
            continue
        window = tuple(dict.fromkeys((*_window(kernels, n), *chains.get(s.name, ()))))
        jobs[key] = KernelJob(
            key, _label(s), 1, text, values, expected, point, s.name, window, names, at_point,
        )  # fmt: skip
    return list(jobs.values()), []


def _chains(
    at_point: Program, target: Target, point: int, names: frozenset[str]
) -> dict[str, tuple[str, ...]]:
    """Per kernel that heads a ``#nest`` (``nest`` names a chain after its first
    kernel) in the analytic compile, or in a compile with any value of a
    tunable option of a pass whose choices are a chain's (``nest``'s
    ``fraction``, for every chain at once): the other kernels of its chains.
    They belong to its window: a choice that leaves the chain unnested
    (``enabled``) runs them as kernels of their own, one that nests a chain the
    analytic compile leaves alone (a smaller ``fraction``) runs them inside the
    head's nest, and their time must count against the other way's, not vanish
    from the window or appear in it."""
    passes = list(target.passes[point:])
    variants = [passes]
    for n, p in enumerate(passes):
        if not getattr(p, "chain_choices", False):
            continue
        start = tuning_start(p)
        for option, values in tunable_options(p).items():
            for value in values:  # (off nests no chain: nothing to add)
                if value != getattr(start, option) and not isinstance(value, bool):
                    # through this pass only: the passes after it keep its nests
                    variants.append([*passes[:n], with_choice(p, {option: value})])
    found: dict[str, set[str]] = {}
    for pipeline in variants:
        done = run_pipeline(at_point, pipeline).program
        for s in done.root.stmts:
            if isinstance(s, Block) and "nest" in s.tags:
                head = step_owner(s.name, names)
                members = {step_owner(b.name, names) for b in s.sub_blocks}
                found.setdefault(head, set()).update(m for m in members & names if m != head)
    return {head: tuple(sorted(members)) for head, members in found.items()}


def step_owner(step: str, names: frozenset[str]) -> str:
    """The root kernel at the tuning point that compiled step ``step`` comes
    from (``k3_O_rest`` -> ``k3_O``; a name that is none's: itself)."""
    name = step
    while name:
        if name in names:
            return name
        name = name.rpartition("_")[0]
    return step


def owner_seconds(compiled: Compiled, job: KernelJob, owners: dict[str, str]) -> dict[str, float]:
    """One run of the whole program ``compiled``: the seconds its steps took,
    added up per root kernel at the tuning point (``owners`` memoises
    :func:`step_owner`); ``{"": seconds}`` for a backend without a per-step timer."""
    if not hasattr(compiled, "step_seconds"):
        start = time.perf_counter()
        compiled.run(dict(job.inputs))
        return {"": time.perf_counter() - start}
    compiled.step_seconds = {}
    try:
        compiled.run(dict(job.inputs))
        steps = dict(compiled.step_seconds)
    finally:
        compiled.step_seconds = None
    out: dict[str, float] = {}
    for step, seconds in steps.items():
        owner = owners.get(step)
        if owner is None:
            owner = owners[step] = step_owner(step, job.names)
        out[owner] = out.get(owner, 0.0) + seconds
    return out


def window_seconds(compiled: Compiled, job: KernelJob, owners: dict[str, str]) -> float:
    """One run of the whole program ``compiled``: the seconds its steps of
    ``job``'s window took (the whole run's, for a backend without a per-step
    timer)."""
    per = owner_seconds(compiled, job, owners)
    if "" in per:
        return per[""]
    return sum(per.get(name, 0.0) for name in job.window)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape:
        return False
    if want.dtype.kind == "f":
        scale = float(np.nanmax(np.abs(want), initial=0.0)) if want.size else 0.0
        return bool(np.allclose(got, want, rtol=1e-3, atol=1e-4 * max(scale, 1.0), equal_nan=True))
    return bool(np.array_equal(got, want))


def _same(a: Program, b: Program) -> bool:
    """Whether ``a`` and ``b`` are the same program: equal trees whose differing
    root statements and refinements also print alike (equality alone takes
    ``0.0`` for ``-0.0`` and ``1`` for ``1.0``).  Nodes a pass left alone are
    the same objects, so only the kernels a choice changed are compared."""
    if a is b:
        return True
    ra, rb = a.root, b.root
    if len(ra.stmts) != len(rb.stmts) or len(ra.refs) != len(rb.refs) or a != b:
        return False
    if block_header(ra) != block_header(rb):
        return False
    for x, y in zip(ra.refs, rb.refs):
        if x is not y and format_ref(x) != format_ref(y):
            return False
    for s, t in zip(ra.stmts, rb.stmts):
        if s is t:
            continue
        if isinstance(s, Block) and isinstance(t, Block):
            if format_block(s) != format_block(t):
                return False
        elif format_stmt(s) != format_stmt(t):
            return False
    return True


class _Remembered:
    """A pass whose runs are remembered by their input's root refinements and
    statements (by identity: nodes are immutable; the memo keeps them alive):
    ``KernelChoices.run`` runs the kernels around a tuned one as segments of
    their own, the same statements for every choice of that kernel, so each
    segment is optimised once.  Everything else is the pass's own (its name,
    options, ``tuning_start``: a choice's segment runs the real pass)."""

    def __init__(self, p: Any, memo: dict[tuple, tuple[Block, Program | None]]) -> None:
        self._pass = p
        self._memo = memo

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pass, name)

    def tuning_start(self) -> Any:
        return tuning_start(self._pass)

    def run(self, program: Program) -> Program:
        root = program.root
        key = (tuple(map(id, root.refs)), tuple(map(id, root.stmts)))
        hit = self._memo.get(key)
        if hit is not None and _same_root_fields(hit[0], root):
            return program if hit[1] is None else hit[1]
        out = self._pass.run(program)
        # None: the pass left its input as it was (the caller tells by identity)
        self._memo[key] = (root, None if out is program else out)
        return out


def _same_root_fields(a: Block, b: Block) -> bool:
    """Whether two roots with the same refinements and statements (by identity)
    agree in everything else."""
    return all(
        getattr(a, f.name) == getattr(b, f.name)
        for f in fields(Block)
        if f.name not in ("refs", "stmts")
    )


class Stages:
    """The pipeline from the tuning point on, run for many choices of one
    program's kernels without repeating what a choice cannot change.

    The analytic run's input of every pass is kept.  A choice whose first
    pass with options is pass ``i`` starts from the analytic input of pass
    ``i``: the passes before it get no options for any kernel, so they run as
    in the analytic pipeline (``KernelChoices.run`` is ``Pass.run`` then) and
    give the same program.  Before each later pass the program is compared
    (:func:`_same`) with the ones other runs had there with the same options
    left (the analytic run's, with none left): the passes are functions of
    their input and options, so an equal program ends as that run did, and the
    rest is not run (most options change nothing for most kernels).  What is
    run is what :func:`~stripeml.passes.manager.run_pipeline` runs, verified
    the same way (one incremental verifier memo for every run: its entries
    keep their nodes alive), so the result is the program a whole-pipeline
    run with that choice gives (``tests/tune/test_stages.py``)."""

    def __init__(self, job: KernelJob, target: Target) -> None:
        self.passes = list(target.passes[job.point :])
        self.program = job.program
        self.seen: dict = {}
        program = job.parsed
        verify(program, self.seen)
        inputs = [program]
        for p in self.passes:
            new = p.run(program)
            if new is not program:
                verify(new, self.seen)
                program = new
            inputs.append(program)
        #: the analytic run's input of each pass (the last: its result)
        self.inputs = inputs
        self.text = format_ir(program)
        # (pass index, options left) -> [(program there, final program, its text)]
        self._ends: dict[tuple[int, str], list[tuple[Program, Program, str]]] = {
            (n, ""): [(q, program, self.text)] for n, q in enumerate(inputs)
        }
        self._names: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        # per pass: its runs, by input (:class:`_Remembered`)
        self._segments: list[dict[tuple, tuple[Block, Program | None]]] = [{} for _ in self.passes]
        self._remembered = [_Remembered(p, m) for p, m in zip(self.passes, self._segments)]
        self.runs = self.passes_run = self.ended_early = 0

    def _tuned(self, key: str, choice: Choice) -> KernelChoices:
        names = self._names.get(key)
        if names is None:
            first = KernelChoices.at_tuning_point(self.inputs[0], {key: choice})
            names = self._names[key] = (frozenset(first.by_name), first.names)
        return KernelChoices(dict.fromkeys(names[0], choice), names[1])

    def _left(self, key: str, choice: Choice, n: int) -> str:
        """The options left from pass ``n`` on for the kernels of ``key`` ("": none,
        the analytic run's passes from there)."""
        later = {p.name for p in self.passes[n:]}
        left = {p: o for p, o in choice.items() if p in later and o}
        return f"{key} {json.dumps(left, sort_keys=True, default=repr)}" if left else ""

    def run(self, key: str, choice: Choice) -> tuple[Program, str]:
        """The optimised program (and its text) with ``choice`` for the kernels
        of structural key ``key``, the target's options for the others."""
        self.runs += 1
        tuned = self._tuned(key, choice) if choice else None
        if tuned is None or not tuned.by_name:
            return self.inputs[-1], self.text
        start = next((n for n, p in enumerate(self.passes) if choice.get(p.name)), len(self.passes))
        program = self.inputs[start]
        visited: list[tuple[tuple[int, str], Program]] = []
        for n in range(start, len(self.passes) + 1):
            at = (n, self._left(key, choice, n))
            for there, end, text in self._ends.get(at, ()):
                if _same(program, there):
                    self.ended_early += n < len(self.passes)
                    self._remember(visited, end, text)
                    return end, text
            visited.append((at, program))
            if n == len(self.passes):
                break
            self.passes_run += 1
            new = tuned.run(self._remembered[n], program)
            if new is not program:
                verify(new, self.seen)
                program = new
        text = format_ir(program)
        self._remember(visited, program, text)
        return program, text

    def _remember(self, visited: list[tuple[tuple[int, str], Program]], end: Program,
                  text: str) -> None:  # fmt: skip
        for at, program in visited:
            self._ends.setdefault(at, []).append((program, end, text))

    def forget(self) -> None:
        """Drop what the runs of choices remembered (the analytic run stays)."""
        self._ends = {k: v[:1] for k, v in self._ends.items() if k[1] == ""}
        self.seen = {}
        for memo in self._segments:
            memo.clear()


def build_candidate(
    job: KernelJob,
    target: Target,
    choice: Choice,
    by_text: dict[str, Built] | None = None,
    stages: Stages | None = None,
) -> Built:
    """The whole program with ``choice`` for ``job``'s kernel, optimised from the
    tuning point on and compiled, then run on the job's inputs and compared
    with the interpreter's outputs.  ``by_text`` (optimised text -> Built)
    shares a program several choices or jobs give (the analytic one);
    ``stages`` (:class:`Stages` of ``job.program``) runs only the passes the
    choice can change."""
    try:
        if stages is not None:
            optimised, text = stages.run(job.key, choice)
        else:
            optimised = run_pipeline(
                job.parsed, target.passes[job.point :],
                choices={job.key: choice} if choice else None,
            ).program  # fmt: skip
            text = format_ir(optimised)
    except StripeError as exc:
        return Built("", None, f"the passes refused it: {exc}")
    if by_text is not None and text in by_text:
        return by_text[text]
    built = _compile_and_check(job, target, optimised, text)
    if by_text is not None:
        by_text[text] = built
    return built


def _compile_and_check(job: KernelJob, target: Target, optimised: Program, text: str) -> Built:
    compiled = backend_for(target).compile(optimised)
    error = check_outputs(compiled.run(dict(job.inputs)), job.expected)
    return Built(text, None if error else compiled, error)


def check_outputs(got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> str | None:
    """Why ``got`` is not ``expected`` (None: every output matches)."""
    for name, want in expected.items():
        if name not in got or not _close(np.asarray(got[name]), want):
            return f"output {name} differs from the interpreter's"
    return None
