"""The mutation fuzzer for the Tile and Stripe IR parsers.

The corpus is valid text: every program of ``tests/programs.py`` (with its
inputs), the bundled examples, generated programs (with their inputs), and
the IR before and after every golden pass case in ``tests/passes/golden/``.
A mutant applies 1-4 mutations to one corpus entry: character edits (insert,
delete, replace with odd characters: NUL, tabs, ``\\r``, U+2028, non-ASCII,
digits), token edits (delete, duplicate, swap, replace or insert a token from
the corpus vocabulary or from a list of hostile ones: huge integers, ``1e999``,
``nan``, deep parentheses, keywords), a number replaced by a hostile one (past
Python's 4300-digit limit, out of every integer range), a name replaced by a
keyword or a 5000-character one, splices of two entries, and repeated lines.

Each mutant is checked in a worker (``check``): a Tile mutant is compiled for
the interpreter and, when that succeeds, called with its entry's inputs; an
IR mutant is parsed, printed and parsed again (the two programs and texts
must agree), verified, and when it verifies and is small, run by the
interpreter on zero inputs.  Every exception must be a ``StripeError`` other
than ``InternalError``; the pool counts deaths and hangs (5 s).
"""

from __future__ import annotations

import functools
import math
import random
import re
import traceback
import warnings
from pathlib import Path

import numpy as np

from .generate import generate
from .known import EXCLUDED_NOW, known_error
from .pool import note

TESTS = Path(__file__).resolve().parents[1]
TOKEN = re.compile(
    r"[A-Za-z_$#@][\w.$]*|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+|->|<=|>=|==|!=|&&|\|\||//|\s+|\S"
)
HOSTILE = [
    "99999999999999999999999", "2147483648", "-9223372036854775809", "0", "-1", "1e999",
    "1e-999", "nan", "inf", "-0", "0.0", "1.", ".5", "0x10", "(" * 80, ")" * 80, "-" * 70,
    "!" * 70, "default", "function", "reshape", "gather", "index", "as_int", "as_float",
    "as_bool", "exp", "block", "#program", "$", "$x", "@DRAM", "é", "\u2028", "\x00", "\t",
    "\r", "\r\n", ";", "{", "}", "[", "]", ":", "->", "?", "=", "==", "<", "//", "#", "'",
    '"', "\\", "in", "out", "inout", "none", "f32", "i64", "bool", "f16", "u64", "load",
    "store", "const", "special", "copy", ":add", ":assign", "true", "false",
]  # fmt: skip
NUMBERS = [
    "9" * 5000, "99999999999999999999999", "2147483648", "9223372036854775808", "0", "-0",
    "-1", "1e999", "1e-999", "1.", ".5", "0.0", "-2147483649", "1." + "0" * 400 + "1", "65",
]  # fmt: skip
NAMES = ["x" * 5000, "default", "function", "block", "in", "out", "none", "é", "_", "A1", "$"]
ODD_CHARS = "\x00\t\r\n\u2028\u00e9\u4e2d\x7f ()[]{};:,=+-*/%<>?!&|#$@.0123456789eE_aAzZ\"'\\"


@functools.cache
def tile_corpus() -> list[tuple[str, dict[str, np.ndarray]]]:
    """(source, inputs) pairs; examples without inputs get an empty dict."""
    import sys

    sys.path.insert(0, str(TESTS))
    from programs import CASES

    entries = [(c.source, c.make_inputs()) for c in CASES]
    examples = TESTS.parent / "src" / "stripeml" / "examples"
    entries += [(p.read_text(), {}) for p in sorted(examples.glob("*.tile"))]
    for seed in range(40):
        program, inputs = generate(10_000_000 + seed, EXCLUDED_NOW)
        entries.append((program.source(), inputs))
    return entries


@functools.cache
def ir_corpus() -> list[str]:
    texts = []
    for path in sorted((TESTS / "passes" / "golden").glob("*/*.txt")):
        _, rest = path.read_text().split("=== before\n", 1)
        before, after = rest.split("=== after\n", 1)
        texts.append(before)
        if after.strip() != "unchanged":
            texts.append(after)
    return texts


def corpus(kind: str) -> list[str]:
    return [s for s, _ in tile_corpus()] if kind == "tile" else ir_corpus()


@functools.cache
def vocabulary(kind: str) -> list[str]:
    seen: dict[str, None] = {}
    for text in corpus(kind)[:200]:
        for tok in TOKEN.findall(text):
            if not tok.isspace():
                seen.setdefault(tok, None)
    return sorted(seen) + HOSTILE


def mutate(text: str, rng: random.Random, kind: str) -> str:
    """``text`` after 1-4 random mutations."""
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        op = rng.choice(
            ("char", "char", "token", "token", "token", "number", "name", "splice", "line", "nest")
        )
        text = getattr(_Mutations, op)(text, rng, kind)
    return text


def _replace_one(text: str, rng: random.Random, pattern: str, choices) -> str:
    """One match of ``pattern`` in ``text`` (drawn by ``rng``) replaced by one of ``choices``."""
    spans = [m.span() for m in re.finditer(pattern, text)]
    if not spans:
        return text
    a, b = rng.choice(spans)
    return text[:a] + rng.choice(choices) + text[b:]


class _Mutations:
    @staticmethod
    def char(text: str, rng: random.Random, kind: str) -> str:
        pos = rng.randint(0, len(text))
        what = rng.choice(("insert", "delete", "replace", "flip"))
        if what == "insert":
            return text[:pos] + rng.choice(ODD_CHARS) + text[pos:]
        if what == "delete":
            return text[:pos] + text[pos + rng.randint(1, 8) :]
        if what == "replace" or not text:
            return text[:pos] + rng.choice(ODD_CHARS) + text[pos + 1 :]
        pos = min(pos, len(text) - 1)
        flipped = chr(ord(text[pos]) ^ (1 << rng.randint(0, 6)))
        return text[:pos] + flipped + text[pos + 1 :]

    @staticmethod
    def token(text: str, rng: random.Random, kind: str) -> str:
        toks = TOKEN.findall(text)
        if not toks:
            return rng.choice(vocabulary(kind))
        i = rng.randrange(len(toks))
        what = rng.choice(("replace", "replace", "delete", "duplicate", "swap", "insert"))
        if what == "replace":
            toks[i] = rng.choice(vocabulary(kind))
        elif what == "delete":
            del toks[i]
        elif what == "duplicate":
            toks.insert(i, toks[i])
        elif what == "swap":
            j = rng.randrange(len(toks))
            toks[i], toks[j] = toks[j], toks[i]
        else:
            toks.insert(i, rng.choice(vocabulary(kind)))
        return "".join(toks)

    @staticmethod
    def number(text: str, rng: random.Random, kind: str) -> str:
        """A number replaced by a hostile one (huge, too many digits, out of range)."""
        return _replace_one(text, rng, r"\d+\.?\d*(?:[eE][+-]?\d+)?", NUMBERS)

    @staticmethod
    def name(text: str, rng: random.Random, kind: str) -> str:
        """A name replaced by a hostile one."""
        return _replace_one(text, rng, r"[A-Za-z_]\w*", NAMES)

    @staticmethod
    def splice(text: str, rng: random.Random, kind: str) -> str:
        other = rng.choice(corpus(kind))
        return text[: rng.randint(0, len(text))] + other[rng.randint(0, len(other)) :]

    @staticmethod
    def line(text: str, rng: random.Random, kind: str) -> str:
        lines = text.split("\n")
        i = rng.randrange(len(lines))
        return "\n".join(lines[:i] + [lines[i]] * rng.choice((0, 2, 3, 50)) + lines[i + 1 :])

    @staticmethod
    def nest(text: str, rng: random.Random, kind: str) -> str:
        a = rng.randint(0, len(text))
        b = rng.randint(a, min(len(text), a + 30))
        depth = rng.choice((2, 10, 63, 64, 65, 200))
        return text[:a] + "(" * depth + text[a:b] + ")" * depth + text[b:]


def mutant(kind: str, index: int, seed: int) -> str:
    entries = corpus(kind)
    return mutate(entries[index % len(entries)], random.Random(seed), kind)


_warm: set[str] = set()


def check(payload: dict) -> dict:
    """Worker side: check one mutant (given as ``text``, or as corpus index + seed)."""
    kind = payload["kind"]
    if not _warm:
        note("setup", 300.0)  # the corpus and stripeml load once per worker, untimed
        import stripeml  # noqa: F401

        corpus(kind)
        vocabulary(kind)
        _warm.add(kind)
    note("mutant")
    text = payload.get("text")
    if text is None:
        text = mutant(kind, payload["index"], payload["seed"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stage = check_tile(text, payload) if kind == "tile" else check_ir(text)
        return {"status": "ok", "stage": stage}
    except _Roundtrip as e:
        return {"status": "crash", "error": "roundtrip", "detail": str(e), "text": text}
    except Exception as e:
        from stripeml.errors import InternalError, StripeError, VerifyError

        # A VerifyError from Tile source is invalid IR the frontend made: a bug
        # that reaches the user without a source location.
        located = kind == "ir" or not isinstance(e, VerifyError)
        if isinstance(e, StripeError) and not isinstance(e, InternalError) and located:
            return {"status": "ok", "stage": f"rejected {type(e).__name__}"}
        known = known_error(frozenset(payload.get("exclude", ())), str(e))
        if known:
            return {"status": "skipped", "stage": f"known {known}"}
        detail = "".join(traceback.format_exception(e))[-3000:]
        return {"status": "crash", "error": type(e).__name__, "detail": detail, "text": text}


class _Roundtrip(Exception):
    """The IR printer and parser disagree."""


def check_tile(text: str, payload: dict) -> str:
    import stripeml

    f = stripeml.compile(text, target="interp")
    entries = tile_corpus()
    inputs = entries[payload.get("index", 0) % len(entries)][1] if "index" in payload else {}
    args = list(inputs.values())[: len(f.params)]
    while len(args) < len(f.params):
        args.append(np.ones(3, np.float32))
    # Run only what is small (as for IR below): a mutated size may ask for
    # gigabytes (O[0 : 2147483648], 8 GiB of output), which takes its time but
    # is no bug; lowering checks the shapes and the memory such a run would need.
    program = f.lower(*args).program
    if sum(math.prod(r.shape.sizes) for r in program.root.refs) > 10_000_000:
        return "lowered"
    f(*args)
    return "ran"


def check_ir(text: str) -> str:
    import stripeml
    from stripeml.ir.dtypes import to_numpy
    from stripeml.runtime.interp import run

    program = stripeml.ir.parse(text)
    printed = stripeml.ir.format(program)
    again = stripeml.ir.parse(printed)
    if again != program or stripeml.ir.format(again) != printed:
        raise _Roundtrip("format(parse(text)) does not parse back to the same program")
    stripeml.ir.verify(program)
    # Run only what is small: a mutated size may ask for terabytes, which is no bug
    # (root buffers, and nested allocations, which the interpreter makes per point).
    from stripeml.ir.nodes import walk_blocks

    refs = [
        r for b in walk_blocks(program.root) for r in b.refs if b is program.root or r.dir == "none"
    ]
    if sum(max(math.prod(r.shape.sizes), r.shape.extent) for r in refs) > 100_000:
        return "verified"
    inputs = {r.into: np.zeros(r.shape.sizes, to_numpy(r.shape.dtype)) for r in program.inputs}
    run(program, inputs)
    return "ran"
