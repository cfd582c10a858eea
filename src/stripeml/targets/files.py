"""Finding target files, and resolving what ``compile(..., target=...)`` names.

``load_target("cpu")`` reads the bundled ``targets/cpu.toml``;
``load_target("path/to/chip.toml")`` reads a file (:mod:`.loader` validates it).
:func:`resolve` is what ``stripeml.compile`` calls: ``"interp"``, a name, a
path or a :class:`Target`, with files loaded once per (file, threads) and again
after they change.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path, PurePosixPath

from ..errors import TargetError
from .host import HostFacts
from .loader import TARGETS_DIR, check_threads, target_from_toml
from .target import INTERP, Target


def bundled_targets() -> dict[str, Path]:
    """The target files shipped with stripeml: ``{"cpu": path, "examples/npu": path, ...}``."""
    found = {p.stem: p for p in sorted(TARGETS_DIR.glob("*.toml"))}
    for p in sorted((TARGETS_DIR / "examples").glob("*.toml")):
        found[f"examples/{p.stem}"] = p
    return found


def resolve_target(target: str | os.PathLike[str]) -> Path:
    """The file a target name or path refers to.

    A ``PathLike`` or a string ending in ``.toml`` is a path; a relative path
    that does not exist is also looked up among the bundled files (so
    ``targets/examples/npu.toml`` works from anywhere).  Any other string is the
    name of a bundled target: ``cpu``, ``examples/npu`` or just ``npu``.
    """
    text = os.fspath(target)
    if isinstance(target, os.PathLike) or text.endswith(".toml"):
        path = Path(text)
        if path.is_file():
            return path
        rel = PurePosixPath(text.replace("\\", "/"))
        if not rel.is_absolute():
            parts = rel.parts[1:] if rel.parts[:1] == ("targets",) else rel.parts
            in_package = TARGETS_DIR.joinpath(*parts)
            if parts and in_package.is_file():
                return in_package
        raise TargetError(f"{text}: no such target file")
    bundled = bundled_targets()
    for name in (text, f"examples/{text}"):
        if name in bundled:
            return bundled[name]
    known = ", ".join(["interp", *bundled])
    raise TargetError(f"unknown target '{text}' (known: {known}, or a path to a .toml file)")


def load_target(
    target: str | os.PathLike[str],
    *,
    host: HostFacts | None = None,
    threads: int | None = None,
) -> Target:
    """Read, validate and resolve a target file (a bundled name or a path);
    ``threads`` replaces the file's ``threads`` fact (``None``: the file's)."""
    path = resolve_target(target)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetError(f"{path}: cannot read the target file: {exc}") from None
    return target_from_toml(
        text, source=str(path), host=host, default_name=path.stem, threads=threads
    )


# Targets loaded from files, by (resolved path, threads): (modification time,
# target).  A file is read (and the host probed) once per thread count, and again
# after it changes.
_LOADED: dict[tuple[str, int | None], tuple[int, Target]] = {}
_LOCK = threading.Lock()


def resolve(target: str | os.PathLike[str] | Target, *, threads: int | None = None) -> Target:
    """The :class:`Target` that ``compile(..., target=...)`` means: a ``Target`` as
    it is, :data:`~.target.INTERP` for ``"interp"``, else the file of a bundled
    name or a path (:func:`resolve_target`), loaded once per modification.

    ``threads`` (``None``: the file's fact) becomes the target's ``threads`` fact
    before its pipeline is built; each (file, threads) is loaded once.  A
    ``Target`` is already built: ``threads`` must then be its own.  The
    interpreter runs on one thread whatever ``threads`` says.
    """
    threads = check_threads(threads)
    if isinstance(target, Target):
        if threads is not None and threads != target.threads:
            raise TargetError(
                f"threads={threads}: target '{target.name}' is a Target built with "
                f"threads={target.threads}; load it with load_target(..., threads={threads})"
            )
        return target
    if not isinstance(target, (str, os.PathLike)):
        raise TargetError(
            f"target must be a string (a name or a path to a .toml file) or a Target, "
            f"got {type(target).__name__}"
        )
    if target == "interp":
        return INTERP
    path = resolve_target(target).resolve()
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as exc:
        raise TargetError(f"{path}: cannot read the target file: {exc}") from None
    key = (str(path), threads)
    with _LOCK:
        cached = _LOADED.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    loaded = load_target(path, threads=threads)
    with _LOCK:
        _LOADED[key] = (stamp, loaded)
    return loaded
