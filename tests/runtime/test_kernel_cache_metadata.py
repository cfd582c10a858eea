"""A cached kernel's metadata is written without ``dataclasses.asdict``'s deep
copy of every step (BERT-base's 300 steps and 600 buffers: 7 ms per compile),
as the same JSON ``asdict`` gives, and read back to the same module."""

from __future__ import annotations

import dataclasses
import json

import pytest

from stripeml.codegen.cpu_abi import Body, BufferInfo, CpuModule, KernelInfo, Step
from stripeml.runtime.kernel_cache import Entry, decode, encode


def _module() -> CpuModule:
    info = KernelInfo("k0", "k0_T1", 96, True, 1 << 20, 8)
    return CpuModule(
        "; wrappers",
        (
            BufferInfo("X", "f32", (1, 64, 768), (49152, 768, 1), "in"),
            BufferInfo("Y", "f32", (64, 768), (768, 1), "out"),
        ),
        (Step(kernel=info), Step(kernel=dataclasses.replace(info, symbol="k1", splittable=False))),
        (Body("sk_0", None, info, 1),),
    )


def _asdict_json(module: CpuModule) -> dict:
    """The metadata as ``asdict`` writes it (the reference)."""
    return {
        "llvm_ir": module.llvm_ir,
        "buffers": [dataclasses.asdict(b) for b in module.buffers],
        "steps": [{"kernel": dataclasses.asdict(s.kernel)} for s in module.steps if s.kernel],
        "bodies": [
            {"symbol": b.symbol, "opt": b.opt, "info": dataclasses.asdict(b.info)}
            for b in module.bodies
        ],
    }


def test_metadata_is_asdicts_json_without_its_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module()
    want = json.dumps(_asdict_json(module), separators=(",", ":")).encode()
    copies: list[int] = []
    real = dataclasses._asdict_inner  # type: ignore[attr-defined]

    def counting(*args):
        copies.append(1)
        return real(*args)

    monkeypatch.setattr(dataclasses, "_asdict_inner", counting)
    data = encode(Entry(b"\x01\x02", module))
    assert copies == []
    assert want in data
    monkeypatch.undo()
    back = decode(data)
    assert back.module == module and back.object_code == b"\x01\x02"
