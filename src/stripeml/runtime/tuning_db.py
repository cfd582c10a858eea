"""The tuning database: the options ``stripeml tune`` measured best, per kernel.

One SQLite file, ``tuning.sqlite`` in the cache root (:mod:`.cache_root`),
one row per (target, compiler, kernel):

* ``target``: sha256 of the resolved target's :meth:`~stripeml.targets.Target.fingerprint`
  (its facts, the thread count among them, and its pipeline as the file sets it);
* ``compiler``: sha256 of the stripeml version and the sources that turn a
  program into code (:func:`.kernel_cache.compiler_fingerprint`,
  :func:`.kernel_cache.codegen_fingerprint`): an edited pass never reads a
  choice measured with the old one;
* ``kernel``: the kernel's structural key at the tuning point
  (:func:`stripeml.passes._kernel_choices.kernel_key`);
* ``choice``: JSON, pass -> option -> value (``{}``: the analytic choice was
  best, stored so that the next tune measures nothing);
* ``base_s``, ``best_s``: the kernel's median time with the analytic and the
  chosen options, measured in the same interleaved rounds; ``label``: what the
  kernel is, for ``--show``; ``tag``: an HMAC-SHA256 of the row under the cache
  root's secret key.  A row whose tag does not match (written by someone
  without the key) is ignored, like a forged kernel cache entry.

Concurrent writers are safe: the file is in WAL mode, every write is one
``BEGIN IMMEDIATE`` transaction, and a writer waits up to 30 s for another's
lock.  A row already there is replaced only by one with a larger gain
(``base_s / best_s``), so merging the results of several tuners (a Ray
cluster's nodes) keeps the best.  :meth:`TuningDB.export` writes the rows
of the database (or of one target) as JSON, without tags, for another
machine's :meth:`TuningDB.import_`, which signs them with its own key.

Compiles read it through :func:`choices_for` (memoised on the file's size and
time stamps): a fresh process applies stored choices without measuring.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StripeError
from ..targets.target import Target
from .cache_root import CacheRoot

if TYPE_CHECKING:
    # imported where a database is opened: a compile finding none (most) does
    # not load sqlite3 (3 ms and more of a fresh process's warm start)
    import sqlite3

__all__ = ["Row", "TuningDB", "choices_digest", "choices_for", "compiler_key", "target_key"]

DB_FILE = "tuning.sqlite"
EXPORT_FORMAT = "stripeml-tuning-1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS choices (
    target TEXT NOT NULL,
    compiler TEXT NOT NULL,
    kernel TEXT NOT NULL,
    choice TEXT NOT NULL,
    base_s REAL NOT NULL,
    best_s REAL NOT NULL,
    candidates INTEGER NOT NULL,
    label TEXT NOT NULL,
    target_name TEXT NOT NULL,
    created REAL NOT NULL,
    tag TEXT NOT NULL,
    PRIMARY KEY (target, compiler, kernel)
)
"""

Choice = dict[str, dict[str, object]]


@dataclass(frozen=True)
class Row:
    """One stored choice (see the module docstring for the fields)."""

    target: str
    compiler: str
    kernel: str
    choice: Choice
    base_s: float
    best_s: float
    candidates: int
    label: str
    target_name: str
    created: float = 0.0

    @property
    def gain(self) -> float:
        """How many times faster than the analytic choice (1.0: no better)."""
        return self.base_s / self.best_s if self.best_s > 0 else 1.0

    def signed_text(self) -> bytes:
        choice = json.dumps(self.choice, sort_keys=True)
        return "\0".join(
            (self.target, self.compiler, self.kernel, choice, repr(self.base_s), repr(self.best_s))
        ).encode()


def target_key(target: Target) -> str:
    """The database's key of a resolved target."""
    return hashlib.sha256(target.fingerprint().encode()).hexdigest()


def compiler_key() -> str:
    """The database's key of this compiler (version and code-making sources)."""
    from .. import __version__
    from .kernel_cache import codegen_fingerprint, compiler_fingerprint

    text = f"{__version__}\0{compiler_fingerprint()}\0{codegen_fingerprint()}"
    return hashlib.sha256(text.encode()).hexdigest()


def _valid_choice(value: object) -> Choice | None:
    """``value`` (parsed JSON) as a choice, or None when it is not one."""
    if not isinstance(value, dict):
        return None
    out: Choice = {}
    for pass_name, options in value.items():
        if not isinstance(pass_name, str) or not isinstance(options, dict):
            return None
        for key, v in options.items():
            if not isinstance(key, str) or not isinstance(v, (bool, int, float, str)):
                return None
        out[pass_name] = dict(options)
    return out


class TuningDB:
    """The database of one cache root (default: :func:`.cache_root.default_cache_dir`)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.root = CacheRoot(directory)
        self.path = self.root.path / DB_FILE

    # -- connections --------------------------------------------------------
    def _connect(self, create: bool) -> sqlite3.Connection | None:
        if not create and not self.path.exists():
            return None
        import sqlite3

        if create and self.root.key(create=True) is None:
            raise StripeError(f"the cache folder {self.root.path} cannot hold a tuning database")
        try:
            con = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            con.execute("PRAGMA busy_timeout = 30000")
            if create:
                con.execute("PRAGMA journal_mode = WAL")
                con.execute(_SCHEMA)
                os.chmod(self.path, 0o600)
            return con
        except sqlite3.Error as exc:
            raise StripeError(f"the tuning database {self.path}: {exc}") from None

    def _tag(self, row: Row) -> str:
        key = self.root.key(create=True)
        assert key is not None  # _connect(create=True) made it
        return hmac.new(key, row.signed_text(), hashlib.sha256).hexdigest()

    def _authentic(self, row: Row, tag: str) -> bool:
        key = self.root.key()
        if key is None:
            return False
        want = hmac.new(key, row.signed_text(), hashlib.sha256).hexdigest()
        return hmac.compare_digest(want, tag)

    # -- reading -------------------------------------------------------------
    def rows(self, target: str | None = None, compiler: str | None = None) -> list[Row]:
        """The authentic rows, of one target and compiler when given, best gain first."""
        if not self.root.usable():
            return []
        con = self._connect(create=False)
        if con is None:
            return []
        import sqlite3

        query = "SELECT * FROM choices"
        where, args = [], []
        if target is not None:
            where.append("target = ?")
            args.append(target)
        if compiler is not None:
            where.append("compiler = ?")
            args.append(compiler)
        if where:
            query += " WHERE " + " AND ".join(where)
        try:
            with con:
                raw = con.execute(query, args).fetchall()
        except sqlite3.Error as exc:
            if "no such table" in str(exc):
                return []
            raise StripeError(f"the tuning database {self.path}: {exc}") from None
        finally:
            con.close()
        out = []
        for t, c, k, choice_text, base, best, cands, label, tname, created, tag in raw:
            try:
                choice = _valid_choice(json.loads(choice_text))
            except ValueError:
                choice = None
            if choice is None:
                continue
            row = Row(t, c, k, choice, base, best, cands, label, tname, created)
            if self._authentic(row, tag):
                out.append(row)
        return sorted(out, key=lambda r: -r.gain)

    def lookup(self, target: str, compiler: str, kernel: str) -> Row | None:
        for row in self.rows(target, compiler):
            if row.kernel == kernel:
                return row
        return None

    # -- writing -------------------------------------------------------------
    def put(self, rows: Iterable[Row]) -> int:
        """Store ``rows`` in one transaction; a row already there stays unless the
        new one's gain is larger.  Returns how many rows were written."""
        rows = list(rows)
        if not rows:
            return 0
        con = self._connect(create=True)
        assert con is not None
        import sqlite3

        written = 0
        try:
            con.execute("BEGIN IMMEDIATE")
            for row in rows:
                old = con.execute(
                    "SELECT base_s, best_s FROM choices WHERE target=? AND compiler=? AND kernel=?",
                    (row.target, row.compiler, row.kernel),
                ).fetchone()
                if old is not None and old[1] > 0 and old[0] / old[1] >= row.gain:
                    continue
                con.execute(
                    "INSERT OR REPLACE INTO choices VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        row.target, row.compiler, row.kernel,
                        json.dumps(row.choice, sort_keys=True), row.base_s, row.best_s,
                        row.candidates, row.label, row.target_name,
                        row.created or time.time(), self._tag(row),
                    ),
                )  # fmt: skip
                written += 1
            con.execute("COMMIT")
        except sqlite3.Error as exc:
            con.execute("ROLLBACK") if con.in_transaction else None
            raise StripeError(f"the tuning database {self.path}: {exc}") from None
        finally:
            con.close()
        return written

    def clear(self) -> None:
        """Remove every row."""
        con = self._connect(create=False)
        if con is not None:
            import sqlite3

            try:
                con.execute("DELETE FROM choices")
            except sqlite3.Error:
                pass
            finally:
                con.close()

    # -- sharing ---------------------------------------------------------------
    def export(self, path: str | os.PathLike[str], target: str | None = None) -> int:
        """Write the rows (of one target key when given) to ``path`` as JSON."""
        rows = self.rows(target)
        doc = {"format": EXPORT_FORMAT, "rows": [asdict(r) for r in rows]}
        Path(path).write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
        return len(rows)

    def import_(self, path: str | os.PathLike[str]) -> int:
        """Merge the rows of an exported file (signed with this root's key);
        :class:`StripeError` saying what is wrong with a file that is not one."""
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StripeError(f"{path}: not a tuning database export ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
            raise StripeError(f"{path}: not a tuning database export (format {EXPORT_FORMAT})")
        rows = []
        for n, item in enumerate(doc.get("rows") or []):
            try:
                choice = _valid_choice(item["choice"])
                if choice is None:
                    raise ValueError("choice")
                row = Row(
                    str(item["target"]), str(item["compiler"]), str(item["kernel"]), choice,
                    float(item["base_s"]), float(item["best_s"]), int(item["candidates"]),
                    str(item["label"]), str(item["target_name"]), float(item["created"]),
                )  # fmt: skip
            except (KeyError, TypeError, ValueError) as exc:
                raise StripeError(f"{path}: row {n} is malformed ({exc})") from None
            # 0 is a time: a kernel ``epilogue`` merged into the one before it
            # runs no step of its own (its window is empty), and a tune stores it
            if not (0 <= row.best_s < math.inf and 0 <= row.base_s < math.inf):
                raise StripeError(f"{path}: row {n} has a time that is negative or not finite")
            rows.append(row)
        return self.put(rows)


# -- what compiles read ---------------------------------------------------------
_MEMO: dict[tuple[str, str, str], tuple[tuple[object, ...], dict[str, Choice]]] = {}
_MEMO_LOCK = threading.Lock()


def _stamp(path: Path) -> tuple[object, ...]:
    out: list[object] = []
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
            out += [st.st_mtime_ns, st.st_size]
        except OSError:
            out += [None, None]
    return tuple(out)


def choices_for(
    target: Target, directory: str | os.PathLike[str] | None = None
) -> dict[str, Choice]:
    """Kernel key -> stored choice, for ``target`` with this compiler (``{}``
    when nothing was tuned for it, without creating anything; rows holding
    the analytic choice are left out, so they change no compile).  Choices that
    name a pass the target's pipeline lacks, or an option it does not declare
    tunable, are left out."""
    db = TuningDB(directory)
    stamp = _stamp(db.path)
    if stamp[0] is None:
        return {}
    memo_key = (str(db.path), target_key(target), target.name)
    with _MEMO_LOCK:
        hit = _MEMO.get(memo_key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    tunable = {
        spec.name: set(getattr(spec.pass_, "tunable", None) or ()) for spec in target.pipeline
    }
    found: dict[str, Choice] = {}
    for row in db.rows(memo_key[1], compiler_key()):
        if not row.choice:
            continue  # the analytic choice (kept, or stored disabled): nothing to apply
        if all(p in tunable and set(opts) <= tunable[p] for p, opts in row.choice.items()):
            found[row.kernel] = row.choice
    with _MEMO_LOCK:
        _MEMO[memo_key] = (stamp, found)
    return found


def choices_digest(choices: Mapping[str, Choice]) -> str:
    """A short digest of ``choices`` (part of the program cache's key)."""
    if not choices:
        return ""
    text = json.dumps(choices, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
