"""The text of an llvmlite module, written faster than ``str(module)``.

llvmlite prints each instruction through ``str.format`` and two caches that
raise ``AttributeError`` the first time they are asked (for the instruction's
own text and for every value's reference), so a body's text cost about 5 us
an instruction: ResNet-50's 74 bodies (21,000 instructions) took 0.11-0.12 s
of a cold compile's code generation, about 40% of it.

:func:`module_text` writes the same text: the instructions the code generator
emits most (arithmetic, memory, comparisons, casts, vector element moves,
branches, phis, selects) with f-strings and references looked up once per
value, every other instruction (calls, returns), function prototypes and
declarations, and anything with metadata, by llvmlite itself.  The result is
the same string byte for byte (tests compare the two on whole models' bodies).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from llvmlite.ir import instructions as ins
from llvmlite.ir import values

__all__ = ["module_text"]


def module_text(module: ir.Module) -> str:
    """``str(module)``, sooner (see the module docstring)."""
    lines = [
        f'; ModuleID = "{module.name}"',
        f'target triple = "{module.triple}"',
        f'target datalayout = "{module.data_layout}"',
        "",
    ]
    lines += [t.get_declaration() for t in module.get_identified_types().values()]
    printer = _Printer()
    for v in module.globals.values():
        if type(v) is values.Function and v.blocks:
            lines.append(printer.function(v))
        else:
            lines.append(str(v))
    lines += module._get_metadata_lines()
    return "\n".join(lines)


class _Printer:
    """References and type names looked up once per object (each object held
    while printing, so that no id is reused)."""

    def __init__(self) -> None:
        self._refs: dict[int, str] = {}
        self._types: dict[int, str] = {}
        self._held: list[Any] = []

    def ref(self, v: Any) -> str:
        text = self._refs.get(id(v))
        if text is None:
            if type(v) in _NAMED:  # NamedValue._get_reference, unless quoting is needed
                name = v._name
                text = v._get_reference() if "\\" in name or '"' in name else f'%"{name}"'
            else:
                make = getattr(v, "_get_reference", None)
                text = make() if make is not None else v.get_reference()
            self._refs[id(v)] = text
            self._held.append(v)
        return text

    def ty(self, t: Any) -> str:
        text = self._types.get(id(t))
        if text is None:
            text = self._types[id(t)] = str(t)
            self._held.append(t)
        return text

    def typed(self, v: Any) -> str:
        return f"{self.ty(v.type)} {self.ref(v)}"

    def function(self, fn: values.Function) -> str:
        buf: list[str] = []
        fn.descr_prototype(buf)
        buf.append("{\n")
        for blk in fn.blocks:
            buf.append(f"{blk._format_name()}:\n")
            for i in blk.instructions:
                write = None if i.metadata else _WRITERS.get(type(i))
                if write is None:
                    buf.append(f"  {i}\n")
                    continue
                body = write(self, i)
                if isinstance(i.type, ir.VoidType):
                    buf.append(f"  {body.rstrip()}\n")
                else:
                    buf.append(f"  {self.ref(i)} = {body.rstrip()}\n")
        buf.append("}\n")
        return "".join(buf)


# Each writer gives what the class's ``descr`` appends (no metadata: an
# instruction with any is printed by llvmlite), before ``rstrip``.


def _plain(p: _Printer, i: Any) -> str:
    opname = " ".join([i.opname, *i.flags]) if i.flags else i.opname
    operands = ", ".join([p.ref(op) for op in i.operands])
    return f"{opname} {p.ty(i.type)} {operands}"


def _terminator(p: _Printer, i: Any) -> str:
    return f"{i.opname} " + ", ".join([p.typed(op) for op in i.operands])


def _compare(p: _Printer, i: Any) -> str:
    flags = "".join(" " + f for f in i.flags)
    a, b = i.operands
    return f"{i.opname}{flags} {i.op} {p.ty(a.type)} {p.ref(a)}, {p.ref(b)}"


def _cast(p: _Printer, i: Any) -> str:
    (v,) = i.operands
    return f"{i.opname} {p.typed(v)} to {p.ty(i.type)}"


def _load(p: _Printer, i: Any) -> str:
    (ptr,) = i.operands
    align = f", align {i.align:d}" if i.align is not None else ""
    return f"load {p.ty(i.type)}, {p.typed(ptr)}{align}"


def _store(p: _Printer, i: Any) -> str:
    v, ptr = i.operands
    align = f", align {i.align:d}" if i.align is not None else ""
    return f"store {p.typed(v)}, {p.typed(ptr)}{align}"


def _alloca(p: _Printer, i: Any) -> str:
    out = f"{i.opname} {p.ty(i.allocated_type)}"
    if i.operands:
        (n,) = i.operands
        out += f", {p.typed(n)}"
    if i.align is not None:
        out += f", align {i.align}"
    return out


def _gep(p: _Printer, i: Any) -> str:
    op = "getelementptr inbounds" if i.inbounds else "getelementptr"
    indices = ", ".join([p.typed(x) for x in i.indices])
    return f"{op} {p.ty(i.source_etype)}, {p.typed(i.pointer)}, {indices}"


def _phi(p: _Printer, i: Any) -> str:
    incoming = ", ".join(f"[{p.ref(v)}, {p.ref(b)}]" for v, b in i.incomings)
    return f"phi {' '.join(i.flags)} {p.ty(i.type)} {incoming}"


def _select(p: _Printer, i: Any) -> str:
    c, a, b = i.operands
    return f"select {' '.join(i.flags)} {p.typed(c)}, {p.typed(a)}, {p.typed(b)}"


def _elements(p: _Printer, i: Any) -> str:
    return f"{i.opname} " + ", ".join([p.typed(op) for op in i.operands])


# Local values (instructions, arguments, blocks): ``%"name"``.
_NAMED = frozenset(
    {
        values.Argument,
        values.Block,
        *(c for c in vars(ins).values() if isinstance(c, type) and issubclass(c, ins.Instruction)),
    }
)

_WRITERS = {
    ins.Instruction: _plain,
    ins.Branch: _terminator,
    ins.ConditionalBranch: _terminator,
    ins.ICMPInstr: _compare,
    ins.FCMPInstr: _compare,
    ins.CastInstr: _cast,
    ins.LoadInstr: _load,
    ins.StoreInstr: _store,
    ins.AllocaInstr: _alloca,
    ins.GEPInstr: _gep,
    ins.PhiInstr: _phi,
    ins.SelectInstr: _select,
    ins.InsertElement: _elements,
    ins.ExtractElement: _elements,
    ins.ShuffleVector: _elements,
}
