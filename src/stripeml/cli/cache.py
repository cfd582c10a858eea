"""``stripeml cache``: where the disk cache is, whether it is trusted and what it
holds (``--info``, the default), or ``--clear`` to remove its entries.

``--clear`` keeps a good key (processes running now keep writing entries that
the next ones accept) and removes a refused one (a key others could read is not
made secret again by a chmod; a new one is made at the next compile).  It
refuses, removing nothing, a root or entry folder that is not the user's own
or that others may write to.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

from ..runtime.cache_root import default_cache_dir
from ..runtime.cache_store import (
    LIMIT_ENV,
    CacheInfo,
    cache_info,
    clear_cache,
    format_bytes,
)
from .common import PROG


def _amount(count: int, size: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}, {size} bytes ({format_bytes(size)})"


def _status(info: CacheInfo) -> str:
    if info.problem is not None:
        return f"REFUSED: {info.problem}; stripeml runs without the disk cache"
    if info.key_problem is not None:
        return (
            f"REFUSED: {info.key_problem}; stripeml runs without the disk cache "
            f"(`{PROG} cache --clear` removes the key, and a new one is made)"
        )
    if not info.exists:
        return "not created yet (it is made at the first compile, mode 0700)"
    mode = info.mode or 0
    if os.name == "nt":
        text = "trusted (owner and mode are not checked on Windows)"
    else:
        text = f"trusted: yours, mode {mode:04o}"
        if mode & 0o077:
            text += " (others can read the entries, not change them)"
        else:
            text += ", private"
    return text + ("; key 0600" if info.has_key else "; no key yet (made at the first write)")


def _info(root: Path | None) -> int:
    info = cache_info(root)
    print(f"cache     {info.root}")
    print(f"status    {_status(info)}")
    for folder, (count, size) in info.entries.items():
        print(f"{folder + '/':9} {_amount(count, size)}")
    total = sum(count for count, _ in info.entries.values())
    limit = (
        f"{info.limit} bytes ({format_bytes(info.limit)})" if info.limit else "0 (stores nothing)"
    )
    print(f"total     {_amount(total, info.total_bytes)}; limit {limit} (${LIMIT_ENV})")
    return 0


def _clear(root: Path | None) -> int:
    try:
        done = clear_cache(root)
    except OSError as exc:
        print(f"{PROG} cache: error: {exc}", file=sys.stderr)
        return 1
    print(f"removed {_amount(done.entries, done.bytes)} from {root or default_cache_dir()}")
    if done.bad_key:
        print("removed the refused key file: a new key is made at the next compile")
    else:
        print("kept the key")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """``stripeml cache``: show the cache's state, or clear its entries."""
    root = Path(args.dir).expanduser() if args.dir else None
    with warnings.catch_warnings(record=True) as caught:  # e.g. a bad $STRIPEML_CACHE_LIMIT
        warnings.simplefilter("always")
        status = _clear(root) if args.clear else _info(root)
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    return status


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``cache`` subcommand."""
    cache = sub.add_parser(
        "cache",
        help="show the disk cache's location, state and size, or clear it",
        description=(
            "Show where the disk cache of compiled kernels and optimised programs is, "
            "whether stripeml trusts it (owned by you, not writable by others, a private "
            "key), its entries and bytes and the size limit (--info, the default); or "
            "remove every entry (--clear; a good key is kept)."
        ),
        epilog=f"example: {PROG} cache --clear",
    )
    what = cache.add_mutually_exclusive_group()
    what.add_argument("--info", action="store_true", help="show the cache's state (default)")
    what.add_argument("--clear", action="store_true", help="remove every entry")
    cache.add_argument(
        "--dir",
        metavar="PATH",
        help=(
            "the cache root (default: $STRIPEML_CACHE_DIR, else $XDG_CACHE_HOME/stripeml, "
            "else ~/.cache/stripeml)"
        ),
    )
    cache.set_defaults(handler=cmd_cache, parser=cache)
