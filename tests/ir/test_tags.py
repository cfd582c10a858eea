"""The tag vocabulary (``ir/tags.py``): honest, complete, documented, enforced by the verifier."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

import stripeml
from stripeml.analysis.select import parse_selector
from stripeml.errors import VerifyError
from stripeml.ir import Block, Program, verify
from stripeml.ir.tags import DECLARED, TAGS, Tag, declaration, markdown_table
from stripeml.ir.verifier import TAG_RULES
from stripeml.passes import PASSES
from stripeml.targets import bundled_targets, load_target

from .samples import matmul, tiled_cached

PACKAGE = Path(stripeml.__file__).resolve().parent
DOC = PACKAGE.parents[1] / "docs" / "stripe-ir.md"


def source(module: str) -> str:
    spec = importlib.util.find_spec(f"stripeml.{module}")
    assert spec is not None and spec.origin, f"no module stripeml.{module}"
    return Path(spec.origin).read_text(encoding="utf-8")


# -- what the source sets ----------------------------------------------------------------


def _strings(node: ast.AST) -> set[str]:
    """String constants in ``node`` that it adds, not those it takes away (``tags - {...}``);
    an f-string gives its literal prefix followed by ``*`` (``f"cache_{kind}"``: ``cache_*``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        return _strings(node.left)
    if isinstance(node, ast.JoinedStr):
        head = node.values[0] if node.values else None
        prefix = head.value if isinstance(head, ast.Constant) else ""
        return {f"{prefix}*"}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    found: set[str] = set()
    for child in ast.iter_child_nodes(node):
        found |= _strings(child)
    return found


def tags_set_in(text: str) -> set[str]:
    """The tags a module's code puts on blocks: in ``tags=...`` arguments, in
    assignments to ``tags`` and in ``X.tags | {...}``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.keyword) and node.arg == "tags":
            found |= _strings(node.value)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "tags" for t in node.targets
        ):
            found |= _strings(node.value)
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.BitOr)
            and isinstance(node.left, ast.Attribute)
            and node.left.attr == "tags"
        ):
            found |= _strings(node.right)
    return found


def sets(tag: Tag, found: set[str]) -> bool:
    """Whether the tag strings ``found`` in a module include ``tag`` (a family: any member,
    or an f-string that builds its members)."""
    return bool(found & set(tag.spellings)) or (bool(tag.values) and f"{tag.name}_*" in found)


def test_tags_set_in_reads_the_code():
    text = (
        "a = Block(tags=frozenset({'kernel', f'agg_{x}'}))\n"
        "b = replace(k, tags=(k.tags - {'kernel'}) | {'tile'})\n"
        "tags = q.tags | {'fused'}\n"
        "c = s.tags | {'vector'}\n"
        "if 'thread' in s.tags: pass\n"
    )
    assert tags_set_in(text) == {"kernel", "agg_*", "tile", "fused", "vector"}


def test_every_tag_is_set_by_the_modules_named():
    for tag in TAGS:
        assert tag.set_by, f"#{tag.name}: nobody sets it"
        for module in tag.set_by:
            assert sets(tag, tags_set_in(source(module))), f"{module} does not set #{tag.name}"


def test_every_tag_reader_spells_it():
    for tag in TAGS:
        for module in tag.read_by:
            text = source(module)
            spelled = [s for s in tag.spellings if f'"{s}"' in text or f"'{s}'" in text]
            assert spelled, f"{module} does not spell #{tag.name}"


def test_every_tag_set_anywhere_is_declared():
    """Every tag any module of stripeml puts on a block is in the vocabulary (statically,
    so also the tags of code paths the tests do not reach)."""
    families = {f"{t.name}_*" for t in TAGS if t.values}
    undeclared = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        bad = {t for t in tags_set_in(path.read_text(encoding="utf-8")) if t not in DECLARED}
        bad -= families
        if bad:
            undeclared[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert not undeclared


def test_the_vocabulary_is_well_formed():
    names = [t.name for t in TAGS]
    assert len(names) == len(set(names))
    spellings = [s for t in TAGS for s in t.spellings]
    assert len(spellings) == len(set(spellings)) == len(DECLARED)
    assert all(t.meaning and all(m for m in t.set_by + t.read_by) for t in TAGS)
    assert (
        declaration("agg_max") is declaration("agg_add") is next(t for t in TAGS if t.name == "agg")
    )
    assert {"agg_add", "agg_mul", "agg_max", "agg_min", "agg_assign"} <= DECLARED
    assert {"cache_in", "cache_out", "cache_init"} <= DECLARED
    assert declaration("agg") is None and declaration("agg_") is None
    assert declaration("nonsense") is None


def test_selectors_name_declared_tags():
    """The default selector of every pass and every selector in a bundled target file."""
    selectors = []
    for name, cls in PASSES.items():
        for f in dataclasses.fields(cls):
            if f.name == "select":
                selectors.append((name, f.default))
    for target_name, path in bundled_targets().items():
        for p in load_target(path).passes:
            if hasattr(p, "select"):
                selectors.append((f"{target_name}: {p.name}", p.select))
    assert selectors
    for where, text in selectors:
        tags = {tag for term in parse_selector(text).terms for _, tag in term} - {"*"}
        assert tags <= DECLARED, (where, text)


# -- the verifier ------------------------------------------------------------------------


def with_tags(block: Block, tags: set[str]) -> Block:
    return replace(block, tags=frozenset(tags))


def test_verifier_rejects_an_undeclared_tag_naming_block_and_tag():
    p = matmul(2, 3, 4)
    kernel = p.root.stmts[0]
    bad = Program(replace(p.root, stmts=(with_tags(kernel, kernel.tags | {"nonsense"}),)))
    with pytest.raises(VerifyError) as info:
        verify(bad)
    message = str(info.value)
    assert message.startswith("block 'root/matmul' (// C[m, n : M, N]"), message
    assert "undeclared tag #nonsense" in message


def test_verifier_rejects_an_undeclared_family_member_and_root_tag():
    p = matmul(2, 3, 4)
    kernel = p.root.stmts[0]
    verify(Program(replace(p.root, stmts=(with_tags(kernel, {"kernel", "agg_max"}),))))
    with pytest.raises(VerifyError, match="block 'root/matmul'.*#agg_sum"):
        verify(Program(replace(p.root, stmts=(with_tags(kernel, {"kernel", "agg_sum"}),))))
    with pytest.raises(VerifyError, match=r"^block 'root': undeclared tag #main"):
        verify(Program(with_tags(p.root, {"program", "main"})))


def test_verifier_names_a_nested_block_with_an_undeclared_tag():
    p = tiled_cached(4, 8)
    outer = p.root.stmts[0]
    inner = outer.sub_blocks[-1]
    stmts = tuple(with_tags(s, {"tile", "k_blok"}) if s is inner else s for s in outer.stmts)
    bad = Program(replace(p.root, stmts=(replace(outer, stmts=stmts),)))
    with pytest.raises(VerifyError) as info:
        verify(bad)
    assert str(info.value).startswith("block 'root/scale_tiled/scale': undeclared tag #k_blok")


def test_tag_rules_are_documented():
    assert TAG_RULES and all(r.__doc__ for r in TAG_RULES)


# -- the documentation ---------------------------------------------------------------------


def test_docs_table_is_current():
    text = DOC.read_text(encoding="utf-8")
    begin, end = "<!-- tags:begin -->\n", "<!-- tags:end -->"
    assert begin in text and end in text
    table = text.split(begin, 1)[1].split(end, 1)[0]
    assert table == markdown_table(), "regenerate: python -m stripeml.ir.tags"
    for tag in TAGS:
        assert f"`#{tag.name}" in table
