"""LLVM's optimisation and object emission for one module, and the helper process
that runs them beside the compiler.

llvmlite serialises every call into LLVM with one process-wide lock, so
threads cannot compile two modules at once; a second process can.  This file
is both the code both sides run (:func:`machine`, :func:`optimise`,
:func:`emit`: one definition, so an object made here is byte for byte the
object the other side makes) and, run as a script, the helper: it imports
llvmlite and nothing of stripeml (it starts in about 50 ms), reads the target
machine's settings, then compiles the modules it is sent until its input
closes.  :mod:`.llvm_pool` starts and feeds it.

Frames on the pipes are a little-endian u64 length and a pickle: the settings
``(triple, cpu, features, reloc, codemodel)`` first, then requests ``(ir text,
opt level)``, each answered with ``(True, object bytes)`` or ``(False, LLVM's
message)``.  Only the process that started the helper writes to it.
"""

from __future__ import annotations

import pickle
import struct
import sys
from typing import IO, Any

import llvmlite.binding as llvm

_LEN = struct.Struct("<Q")


def machine(triple: str, cpu: str, features: str, opt: int, reloc: str, codemodel: str) -> Any:
    """The target machine every module of optimisation level ``opt`` is emitted with."""
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(
        cpu=cpu, features=features, opt=opt, reloc=reloc, codemodel=codemodel, jit=True
    )


def parse(ir_text: str, tm: Any) -> Any:
    """Parse and verify ``ir_text`` for ``tm`` (LLVM's RuntimeError on bad IR)."""
    module = llvm.parse_assembly(ir_text)
    module.verify()
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    return module


#: LLVM's own options (``cl::opt``, process-wide) that both sides set before they
#: optimise anything (:func:`limit_effort`): how far dead-store elimination walks
#: back from each store looking for the stores it overwrites (LLVM's default
#: 90 steps).  A transformer's attention nest (one body: two register-tiled
#: products, the softmax's passes and its intermediates on the stack) spent a
#: quarter of its O3 time, 0.04 of 0.17 s, in those walks; with 10 steps 0.01,
#: and the objects of every module of seven models (BERT-base at three sequence
#: lengths, GPT-2, ResNet-50, MobileNetV2, ViT-tiny, a U-Net, an LSTM: 300
#: modules) are the same byte for byte.  A shorter walk only ever leaves a
#: dead store in place, never changes what the code computes.
EFFORT_OPTIONS = ("-dse-memoryssa-walklimit=10",)
_EFFORT_SET = False


def limit_effort() -> None:
    """Set :data:`EFFORT_OPTIONS` in this process's LLVM (once; setting one again
    is harmless).  They are LLVM's globals: another user of llvmlite in the same
    process (numba) gets the same limits."""
    global _EFFORT_SET
    if not _EFFORT_SET:
        for option in EFFORT_OPTIONS:
            llvm.set_option("stripeml", option)
        _EFFORT_SET = True


def optimise(module: Any, tm: Any, opt: int) -> None:
    """The new pass manager's ``O<opt>`` pipeline, loop and SLP vectorisation,
    interleaving and unrolling on from ``O2`` (LLVM's own default there), with
    :data:`EFFORT_OPTIONS`."""
    limit_effort()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    on = opt >= 2
    pto.loop_vectorization = on
    pto.slp_vectorization = on
    pto.loop_interleaving = on
    pto.loop_unrolling = on
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)


def emit(module: Any, tm: Any) -> bytes:
    """Native object code (ELF on Linux) for an optimised module."""
    return bytes(tm.emit_object(module))


def _read(stream: IO[bytes]) -> Any:
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (size,) = _LEN.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def _write(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def main() -> int:
    """The helper's loop (see the module docstring)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    settings = _read(inp)
    if settings is None:
        return 0
    triple, cpu, features, reloc, codemodel = settings
    machines: dict[int, Any] = {}
    while True:
        request = _read(inp)
        if request is None:
            return 0
        text, opt = request
        tm = machines.get(opt)
        if tm is None:
            tm = machines[opt] = machine(triple, cpu, features, opt, reloc, codemodel)
        try:
            module = parse(text, tm)
            optimise(module, tm, opt)
            _write(out, (True, emit(module, tm)))
        except RuntimeError as exc:
            _write(out, (False, str(exc)))


if __name__ == "__main__":
    sys.exit(main())
