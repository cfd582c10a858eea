"""Shrinking a failing program while it keeps failing the same way, and saving it.

:func:`minimise` is greedy: it tries simpler candidates in turn and keeps the
first that still fails with the same ``(target, status, kind)``; it restarts
from the simpler program until no candidate helps or the budget is spent.
Candidates, roughly from the biggest cut down: keep one output; cut the
program after an earlier statement (making it the output); drop dead
statements and unused inputs; replace an expression by one of its operands;
drop a constraint or a ``default``; drop a term, a constant or a coefficient
of an index polynomial; shrink a dimension by one (slicing the inputs);
replace an input by zeros, ones or rounded values.  Validity is not checked
here: an invalid candidate fails differently (or its reference raises) and is
rejected by the predicate.

:func:`save` writes the result into ``tests/fuzz/regressions/`` as JSON, which
``test_regressions.py`` replays on every target.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from .contraction import Access, Spec
from .program import (
    Binary,
    Call,
    Contract,
    Eltwise,
    Expr,
    Gather,
    Lit,
    Name,
    Program,
    Reshape,
    Ternary,
    Unary,
    to_json,
)

REGRESSIONS = Path(__file__).parent / "regressions"
Case = tuple[Program, dict[str, np.ndarray]]


def minimise(case: Case, still_fails: Callable[[Case], bool], budget: int = 400) -> Case:
    """The smallest variant of ``case`` found for which ``still_fails`` holds."""
    tried = 0
    improved = True
    while improved and tried < budget:
        improved = False
        for cand in candidates(*case):
            tried += 1
            if still_fails(cand):
                case, improved = cand, True
                break
            if tried >= budget:
                break
    return case


def _uses(stmt) -> set[str]:
    if isinstance(stmt, Contract):
        names = {a.tensor for a in stmt.spec.operands}
        return names | ({stmt.spec.default} if stmt.spec.default else set())
    if isinstance(stmt, Reshape):
        return {stmt.src}
    if isinstance(stmt, Gather):
        return {stmt.src, stmt.idx}
    return _names(stmt.expr)


def _names(e: Expr) -> set[str]:
    if isinstance(e, Name):
        return {e.name}
    if isinstance(e, Lit):
        return set()
    if isinstance(e, Unary):
        return _names(e.arg)
    if isinstance(e, Binary):
        return _names(e.lhs) | _names(e.rhs)
    if isinstance(e, Ternary):
        return _names(e.cond) | _names(e.then) | _names(e.other)
    return set().union(*(_names(a) for a in e.args))


def prune(program: Program, inputs: dict[str, np.ndarray]) -> Case:
    """Drop statements no output needs and parameters nothing reads."""
    live = set(program.outputs)
    kept = []
    for stmt in reversed(program.stmts):
        if stmt.out in live:
            kept.append(stmt)
            live |= _uses(stmt)
    kept.reverse()
    read = set().union(*(_uses(s) for s in kept)) if kept else set()
    params = tuple(p for p in program.params if p.name in read)
    # A dimension must stay bound if any statement or kept parameter names it.
    needed = {d for p in params for d in p.dims}
    text = "".join(s.tile() for s in kept)
    unbound = [d for d in program.dims if d not in needed and re.search(rf"\b{d}\b", text)]
    if unbound:
        params = tuple(p for p in program.params if p.name in read or set(p.dims) & set(unbound))
    small = replace(program, params=params, stmts=tuple(kept))
    return small, {p.name: inputs[p.name] for p in params}


def candidates(program: Program, inputs: dict[str, np.ndarray]) -> Iterator[Case]:
    if len(program.outputs) > 1:
        for o in program.outputs:
            yield prune(replace(program, outputs=(o,)), inputs)
    for n, stmt in enumerate(program.stmts[:-1]):
        yield prune(replace(program, stmts=program.stmts[: n + 1], outputs=(stmt.out,)), inputs)
    pruned = prune(program, inputs)
    if pruned[0] != program:
        yield pruned
    for n, stmt in enumerate(program.stmts):
        for simpler in _simpler_statements(stmt):
            stmts = program.stmts[:n] + (simpler,) + program.stmts[n + 1 :]
            yield prune(replace(program, stmts=stmts), inputs)
    for d, size in program.dims.items():
        if size > 1:
            yield _shrink_dim(program, inputs, d)
    for name, arr in inputs.items():
        for simpler_arr in _simpler_arrays(arr):
            if not np.array_equal(simpler_arr, arr):
                yield program, {**inputs, name: simpler_arr}


def _simpler_statements(stmt) -> Iterator:
    if isinstance(stmt, Eltwise):
        for sub in _children(stmt.expr):
            yield Eltwise(stmt.out, sub)
        for e in _simpler_exprs(stmt.expr):
            yield Eltwise(stmt.out, e)
    elif isinstance(stmt, Contract):
        for spec in _simpler_specs(stmt.spec):
            yield Contract(spec)


def _children(e: Expr) -> list[Expr]:
    if isinstance(e, Unary):
        return [e.arg]
    if isinstance(e, Binary):
        return [e.lhs, e.rhs]
    if isinstance(e, Ternary):
        return [e.cond, e.then, e.other]
    if isinstance(e, Call) and e.func != "index":
        return [a for a in e.args if not isinstance(a, Lit)]
    return []


def _simpler_exprs(e: Expr) -> Iterator[Expr]:
    """``e`` with one inner node replaced by one of its operands."""
    kids = _children(e)
    for i, kid in enumerate(kids):
        for sub in [*_children(kid), *_simpler_exprs(kid)]:
            yield _with_child(e, i, sub)


def _with_child(e: Expr, i: int, sub: Expr) -> Expr:
    if isinstance(e, Unary):
        return Unary(e.op, sub)
    if isinstance(e, Binary):
        return Binary(e.op, sub, e.rhs) if i == 0 else Binary(e.op, e.lhs, sub)
    if isinstance(e, Ternary):
        parts = [e.cond, e.then, e.other]
        parts[i] = sub
        return Ternary(*parts)
    assert isinstance(e, Call)
    args = list(e.args)
    positions = [j for j, a in enumerate(args) if not isinstance(a, Lit)]
    args[positions[i]] = sub
    return Call(e.func, tuple(args))


def _terms(poly: str) -> list[str]:
    """Signed top-level terms of a polynomial: ``"2 * i - N + 1"`` -> ``["2 * i", "-N", "1"]``."""
    terms, depth, cur, sign, i = [], 0, "", "", 0
    while i < len(poly):
        ch = poly[i]
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and poly.startswith((" + ", " - "), i):
            terms.append(sign + cur.strip())
            sign, cur, i = ("-" if poly[i + 1] == "-" else ""), "", i + 3
            continue
        cur += ch
        i += 1
    terms.append(sign + cur.strip())
    return terms


def _join_terms(terms: list[str]) -> str:
    out = ""
    for t in terms:
        if not out:
            out = t
        elif t.startswith("-"):
            out += f" - {t[1:]}"
        else:
            out += f" + {t}"
    return out or "0"


def _simpler_polys(poly: str) -> Iterator[str]:
    terms = _terms(poly)
    for i in range(len(terms)):
        if len(terms) > 1:
            yield _join_terms(terms[:i] + terms[i + 1 :])
        m = re.fullmatch(r"(-?)\d+ \* (\w+)", terms[i])
        if m:
            yield _join_terms(terms[:i] + [m[1] + m[2]] + terms[i + 1 :])


def _simpler_specs(spec: Spec) -> Iterator[Spec]:
    for i in range(len(spec.constraints)):
        yield replace(spec, constraints=spec.constraints[:i] + spec.constraints[i + 1 :])
    if spec.default:
        yield replace(spec, default=None)
    if spec.combo in ("*", "+", "=="):
        for keep in spec.operands:
            yield replace(
                spec,
                combo="none",
                operands=(keep,),
                params=tuple(p for p in spec.params if p[0] == keep.tensor),
            )
    if spec.agg != "+":
        yield replace(spec, agg="+")
    accesses = [spec.out, *spec.operands]
    for a, acc in enumerate(accesses):
        for d, poly in enumerate(acc.polys):
            for simpler in _simpler_polys(poly):
                new = Access(acc.tensor, acc.polys[:d] + (simpler,) + acc.polys[d + 1 :])
                if a == 0:
                    yield replace(spec, out=new)
                else:
                    ops = list(spec.operands)
                    ops[a - 1] = new
                    yield replace(spec, operands=tuple(ops))
    for i, (poly, bound) in enumerate(spec.constraints):
        for simpler in _simpler_polys(poly):
            cons = list(spec.constraints)
            cons[i] = (simpler, bound)
            yield replace(spec, constraints=tuple(cons))


def _shrink_dim(program: Program, inputs: dict[str, np.ndarray], d: str) -> Case:
    new = program.dims[d] - 1
    sliced = {}
    for p in program.params:
        arr = inputs[p.name]
        index = tuple(slice(0, new) if dim == d else slice(None) for dim in p.dims)
        sliced[p.name] = np.ascontiguousarray(arr[index]) if p.dims else arr
    return replace(program, dims={**program.dims, d: new}), sliced


def _simpler_arrays(arr: np.ndarray) -> Iterator[np.ndarray]:
    yield np.zeros_like(arr)
    yield np.ones_like(arr)
    if arr.dtype.kind == "f":
        yield np.round(arr * 2) / 2


def save(case: Case, failure: dict, xfail: str | None, directory: Path = REGRESSIONS) -> Path:
    """Write a regression case; the file name is a hash of its program and inputs."""
    program, inputs = case
    body = to_json(program, inputs)
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]
    record = {
        "title": failure.get("title", f"{failure['status']} on {failure['target']}"),
        "found": {
            k: failure[k] for k in ("seed", "target", "status", "kind", "mode") if k in failure
        },
        "detail": failure.get("detail", "")[:2000],
        "xfail": {"reason": xfail, "targets": failure.get("xfail_targets", [failure["target"]])}
        if xfail
        else None,
        "mode": failure.get("mode") or "positional",
        "source": program.source(),
        "case": body,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{failure['status']}_{failure.get('kind', 'values')}_{digest}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
