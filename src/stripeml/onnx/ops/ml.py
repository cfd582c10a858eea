"""Operators of the ``ai.onnx.ml`` domain: Binarizer, ArrayFeatureExtractor,
LabelEncoder (numeric keys and values) and TreeEnsemble.

They are registered in the registry's ``ai.onnx.ml`` table (``op(...,
domain=ML)``), so ``lookup("Binarizer", "ai.onnx.ml")`` finds them and no name
of theirs shadows an ``ai.onnx`` operator.  Strings are not tensors here:
string keys, values or data are errors naming the node.

* **LabelEncoder** maps each element through the table its attributes give,
  known when compiling: keys equal as numbers collapse into one (the last
  value wins, as in the reference's ``dict``), keys not representable in the
  input's type are dropped (no element can equal them), and a NaN key matches
  NaN elements (the specification's rule; the reference never matches NaN).
  Up to :data:`CHAIN_KEYS` keys are a chain of selects; more are one max
  contraction finding each element's key (``X == K[j] ? (j + 1)``) and a
  ``gather`` of the values, the default in front.
* **TreeEnsemble** walks every tree of every sample at once, in Tile.  The
  interior nodes and the leaves form one table (a leaf is an entry that
  leads to itself), and the walk takes as many steps as the deepest tree has
  levels: each step gathers, by the current entry of each (sample, tree),
  its feature, threshold and comparison, gathers the sample's feature value,
  compares, and gathers the next entry.  A ``BRANCH_MEMBER`` node becomes a
  chain of equality tests, one per member.  The leaves reached are looked up
  in a table of their weights per target and aggregated over the trees
  (sum, average, min or max) in float64, then rounded to the input's type.
  Comparisons are exact: a feature value is compared in the type of
  ``nodes_splits`` (as the reference compares a Python float with it) and
  with a set member exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import cast, checked_shape, indices, scalar
from .elementwise import typed
from .shape import empty, reshape

ML = "ai.onnx.ml"
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)

#: LabelEncoder tables up to this many keys are a chain of selects.
CHAIN_KEYS = 16


def _const(arr: Any) -> Value:
    arr = np.asarray(arr)
    return Value("", arr.shape, arr.dtype, arr)


def _sizes(shape: Sequence[int]) -> str:
    return ", ".join(str(int(s)) for s in shape)


def _numeric(n: Node, v: Value, what: str) -> None:
    if v.dtype.kind in "OSU":
        raise n.error(f"{what} holds strings: stripeml tensors are numeric")
    if v.dtype.kind not in "fiu":
        raise n.error(f"{what} has element type {v.dtype}, not a numeric one")


# -- Binarizer -----------------------------------------------------------------


@op("Binarizer", domain=ML)
def binarizer(b: Builder, n: Node) -> list[Value | None]:
    """Binarizer: 1 where ``X > threshold``, else 0, in X's type (a float threshold; NaN gives 0).

    Integers are compared with the threshold in float64, as the reference does."""
    x = n.input(0)
    _numeric(n, x, "the input")
    threshold = float(n.attr("threshold", 0.0))
    thr = scalar(b, threshold, x.dtype if x.dtype.kind == "f" else F64)
    return [b.eltwise(cast(f"({b.ref(x)} > {thr})", x.dtype), x.shape, x.dtype)]


# -- ArrayFeatureExtractor -------------------------------------------------------


@op("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(b: Builder, n: Node) -> list[Value | None]:
    """ArrayFeatureExtractor: the last axis' elements at the (flattened) indices; 1-D data gives one row.

    Negative indices count from the end; run-time indices outside the axis
    are an error when the model runs, constant ones when compiling."""
    x, i = n.input(0), n.input(1)
    _numeric(n, x, "the data")
    if i.dtype.kind not in "iu":
        raise n.error(f"the indices must be integers, got {i.dtype}")
    if x.rank < 1:
        raise n.error("the data must have rank 1 or more")
    dim = x.shape[-1]
    count = i.size
    shape = (1, count) if x.rank == 1 else (*x.shape[:-1], count)
    if i.is_const:
        v = np.asarray(i.const).reshape(-1).astype(np.int64)
        bad = (v < -dim) | (v >= dim)
        if bad.any():
            raise n.error(f"index {int(v[bad][0])} is out of range for the last axis of size {dim}")
    e = empty(shape, x.dtype)
    if e is not None:
        return [e]
    flat = reshape(b, i, (count,))
    got = b.statement(
        f"{{out}} = gather({b.ref(x)}, {b.ref(flat)}, {x.rank - 1})",
        (*x.shape[:-1], count),
        x.dtype,
    )
    return [reshape(b, got, shape)]


# -- LabelEncoder ----------------------------------------------------------------


def _attr_array(n: Node, name: str, dtype: Any = None) -> np.ndarray | None:
    v = n.attr(name)
    if v is None:
        return None
    if isinstance(v, np.ndarray) and v.dtype.kind in "OSU":
        raise n.error(f"{name} holds strings: stripeml tensors are numeric")
    return np.asarray(v, dtype=dtype).reshape(-1)


def _one_of(n: Node, kind: str) -> tuple[str, np.ndarray]:
    """The ``keys_*`` or ``values_*`` attribute that is set, and its values."""
    given = [
        name
        for name in (f"{kind}_floats", f"{kind}_int64s", f"{kind}_tensor", f"{kind}_strings")
        if n.attr(name) is not None
    ]
    if len(given) != 1:
        raise n.error(f"exactly one {kind}_* attribute must be set, got {given or 'none'}")
    name = given[0]
    if name.endswith("_strings"):
        raise n.error(
            f"{name}: string keys and values are not supported (stripeml tensors are numeric)"
        )
    dtype = {"floats": np.float32, "int64s": np.int64}.get(name.rsplit("_", 1)[1])
    arr = _attr_array(n, name, dtype)
    assert arr is not None
    if arr.dtype.kind not in "fiu":
        raise n.error(f"{name} has element type {arr.dtype}, not a numeric one")
    return name, arr


@op("LabelEncoder", domain=ML, oldest=2)
def label_encoder(b: Builder, n: Node) -> list[Value | None]:
    """LabelEncoder: numeric keys to numeric values (floats, int64s or tensors), a default for the rest; no strings.

    A NaN key matches NaN elements (the specification; the reference matches
    none); equal keys collapse, the last value winning."""
    x = n.input(0)
    _numeric(n, x, "the input")
    _, keys = _one_of(n, "keys")
    vname, values = _one_of(n, "values")
    if len(keys) != len(values):
        raise n.error(f"{len(keys)} keys for {len(values)} values")
    dtype = values.dtype
    if vname == "values_floats":
        default: Any = n.attr("default_float", -0.0)
    elif vname == "values_int64s":
        default = n.attr("default_int64", -1)
    else:
        dt = _attr_array(n, "default_tensor")
        if dt is None:  # the specification's defaults
            default = -0.0 if dtype.kind == "f" else -1
        else:
            if dt.size != 1:
                raise n.error(f"default_tensor must hold one value, got {dt.size}")
            if dt.dtype != dtype:
                raise n.error(f"default_tensor has element type {dt.dtype}, values_tensor {dtype}")
            default = dt[0]
    table, nan_value = _table(keys, values, x.dtype)
    default_arr = np.array(default, dtype=dtype)
    e = empty(x.shape, dtype)
    if e is not None:
        return [e]
    X = b.ref(x)
    if len(table[0]) <= CHAIN_KEYS:
        expr = typed(b, default_arr.item(), dtype)
        for k, v in zip(*table):
            expr = f"({X} == {typed(b, k.item(), x.dtype)} ? {typed(b, v.item(), dtype)} : {expr})"
        if nan_value is not None:
            expr = f"({X} != {X} ? {typed(b, nan_value.item(), dtype)} : {expr})"
        return [b.eltwise(expr, x.shape, dtype)]
    ks, vs = table
    ext = np.concatenate([default_arr.reshape(1), vs, np.array([nan_value or 0], dtype)])
    pos_of = _const(np.arange(1, len(ks) + 1, dtype=np.int64))
    idx = indices(x.rank)
    found = b.contraction(
        f"{{out}}[{', '.join(idx)} : {_sizes(x.shape)}] = "
        f">({X}[{', '.join(idx)}] == {b.ref(_const(ks))}[j] ? ({b.ref(pos_of)}[j]))"
        if idx
        else f"{{out}}[] = >({X}[] == {b.ref(_const(ks))}[j] ? ({b.ref(pos_of)}[j]))",
        x.shape,
        I64,
    )
    if nan_value is not None:
        found = b.eltwise(f"{X} != {X} ? {len(ks) + 1} : {found.name}", x.shape, I64)
    return [b.statement(f"{{out}} = gather({b.ref(_const(ext))}, {found.name}, 0)", x.shape, dtype)]


def _table(
    keys: np.ndarray, values: np.ndarray, xdtype: np.dtype
) -> tuple[tuple[np.ndarray, np.ndarray], Any]:
    """The keys (in the input's type) and values to test, after Python ``dict``'s
    rules (keys equal as numbers are one; the last value wins); keys no element of
    type ``xdtype`` can equal are dropped.  Second: the value of the last NaN key
    (``None`` if there is none)."""
    entries: dict[Any, Any] = {}
    nan_value = None
    for k, v in zip(keys.tolist(), values):
        if isinstance(k, float) and k != k:
            nan_value = v
            continue
        entries[k] = v  # a key equal to an earlier one keeps the earlier's place
    ks, vs = [], []
    for k, v in entries.items():
        with np.errstate(all="ignore"):
            try:
                kx = np.array(k).astype(xdtype)
            except OverflowError:
                continue
        if kx.item() == k:  # else no element of the input's type equals it
            ks.append(kx)
            vs.append(v)
    if xdtype.kind != "f":
        nan_value = None
    return (np.array(ks, xdtype), np.array(vs, values.dtype)), nan_value


# -- TreeEnsemble ----------------------------------------------------------------

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
#: An equality test of one set member (exact, in float64): a MEMBER node's chain.
_MEMBER_EQ = 7
_AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}


class _Forest:
    """The trees of a TreeEnsemble node as flat tables: entries ``0 .. nodes-1``
    are interior nodes (set-membership nodes expanded into equality chains),
    ``nodes + l`` is leaf ``l``, which leads to itself."""

    def __init__(self, n: Node, features: int) -> None:
        def ints(name: str, required: bool = True) -> list[int]:
            v = n.attr(name)
            if v is None:
                if required:
                    raise n.error(f"attribute {name} is required")
                return []
            return [int(t) for t in np.asarray(v).reshape(-1)]

        def floats(name: str, required: bool = True) -> np.ndarray:
            v = n.attr(name)
            if v is None:
                if required:
                    raise n.error(f"attribute {name} is required")
                return np.zeros(0)
            arr = np.asarray(v).reshape(-1)
            if arr.dtype.kind != "f":
                raise n.error(f"{name} must be a float tensor, got {arr.dtype}")
            return arr

        splits = floats("nodes_splits")
        self.split_dtype = splits.dtype
        modes = ints("nodes_modes")
        feats = ints("nodes_featureids")
        tids, fids = ints("nodes_truenodeids"), ints("nodes_falsenodeids")
        tleaf, fleaf = ints("nodes_trueleafs"), ints("nodes_falseleafs")
        mtt = ints("nodes_missing_value_tracks_true", False) or [0] * len(modes)
        count = len(modes)
        for name, arr in (("nodes_splits", splits), ("nodes_featureids", feats),
                          ("nodes_truenodeids", tids), ("nodes_falsenodeids", fids),
                          ("nodes_trueleafs", tleaf), ("nodes_falseleafs", fleaf),
                          ("nodes_missing_value_tracks_true", mtt)):  # fmt: skip
            if len(arr) != count:
                raise n.error(f"{name} has {len(arr)} entries, nodes_modes {count}")
        weights = floats("leaf_weights")
        targets = ints("leaf_targetids")
        if len(weights) != len(targets):
            raise n.error(f"leaf_weights has {len(weights)} entries, leaf_targetids {len(targets)}")
        leaves = len(weights)
        roots = ints("tree_roots")
        for k, m in enumerate(modes):
            if not 0 <= m <= MEMBER:
                raise n.error(f"node {k}: mode {m} is not one of 0 to 6")
            if not 0 <= feats[k] < features:
                raise n.error(
                    f"node {k}: feature {feats[k]} is out of range for {features} features"
                )
            for side, ids, leaf in (("true", tids, tleaf), ("false", fids, fleaf)):
                limit = leaves if leaf[k] else count
                if not 0 <= ids[k] < limit:
                    kind = "leaf" if leaf[k] else "node"
                    raise n.error(f"node {k}: its {side} branch, {kind} {ids[k]}, does not exist")
        for r in roots:
            if not 0 <= r < count:
                raise n.error(f"tree root {r} is not a node (there are {count})")
        members = self._members(n, modes, floats("membership_values", False))

        # the table: per entry (mode, split, feature, missing-tracks-true, true, false)
        self.mode: list[int] = []
        self.split: list[float] = []
        self.feature: list[int] = []
        self.mtt: list[int] = []
        self.true: list[int] = []
        self.false: list[int] = []
        expanded: dict[int, int] = {}  # node -> its first entry
        entries = 0
        for k in range(count):
            expanded[k] = entries
            entries += max(len(members.get(k, ())), 1) if modes[k] == MEMBER else 1
        self.nodes = entries

        def target(ids: list[int], leaf: list[int], k: int) -> int:
            return entries + ids[k] if leaf[k] else expanded[ids[k]]

        for k in range(count):
            t, f = target(tids, tleaf, k), target(fids, fleaf, k)
            if modes[k] != MEMBER:
                self._entry(modes[k], float(splits[k]), feats[k], mtt[k], t, f)
                continue
            chain = members.get(k, [])
            if not chain:  # an empty set: never a member (NaN may still go true)
                self._entry(_MEMBER_EQ, float("nan"), feats[k], mtt[k], t, f)
            for j, value in enumerate(chain):
                nxt = f if j == len(chain) - 1 else len(self.mode) + 1
                self._entry(_MEMBER_EQ, value, feats[k], mtt[k], t, nxt)
        for lid in range(leaves):
            self._entry(LEQ, 0.0, 0, 0, entries + lid, entries + lid)
        self.weights = weights.astype(np.float64)
        self.targets = targets
        self.starts = []
        for r in roots:
            degenerate = tleaf[r] and fleaf[r] and tids[r] == fids[r]
            self.starts.append(entries + tids[r] if degenerate else expanded[r])
        self.depth = self._depth(n)

    def _entry(self, mode: int, split: float, feature: int, mtt: int, t: int, f: int) -> None:
        self.mode.append(mode)
        self.split.append(split)
        self.feature.append(feature)
        self.mtt.append(1 if mtt else 0)
        self.true.append(t)
        self.false.append(f)

    @staticmethod
    def _members(n: Node, modes: list[int], values: np.ndarray) -> dict[int, list[float]]:
        """The members of each BRANCH_MEMBER node: ``membership_values`` split at
        its NaNs, the sets in the order of the nodes."""
        member_nodes = [k for k, m in enumerate(modes) if m == MEMBER]
        nans = int(np.isnan(values).sum())
        if nans != len(member_nodes):
            raise n.error(
                f"membership_values holds {nans} sets (each ended by a NaN) for "
                f"{len(member_nodes)} BRANCH_MEMBER nodes"
            )
        sets: dict[int, list[float]] = {}
        it = iter(member_nodes)
        current: list[float] = []
        for v in values.astype(np.float64).tolist():
            if v != v:
                sets[next(it)] = list(dict.fromkeys(current))
                current = []
            else:
                current.append(v)
        return sets

    def _depth(self, n: Node) -> int:
        """The most interior entries a walk from a root passes (an error for a cycle)."""
        memo: dict[int, int] = {}
        for start in self.starts:
            stack: list[tuple[int, bool]] = [(start, False)]
            on_path: set[int] = set()
            while stack:
                e, done = stack.pop()
                if e >= self.nodes or e in memo and not done:
                    continue
                if done:
                    on_path.discard(e)
                    kids = [c for c in (self.true[e], self.false[e]) if c < self.nodes]
                    memo[e] = 1 + max((memo[c] for c in kids), default=0)
                    continue
                on_path.add(e)
                stack.append((e, True))
                for c in (self.true[e], self.false[e]):
                    if c in on_path:
                        raise n.error(
                            "the trees are not trees: a branch leads back to a node above it"
                        )
                    if c < self.nodes and c not in memo:
                        stack.append((c, False))
        return max((memo.get(s, 0) for s in self.starts), default=0)


@op("TreeEnsemble", domain=ML, oldest=5)
def tree_ensemble(b: Builder, n: Node) -> list[Value | None]:
    """TreeEnsemble: every mode (set membership too), missing-value tracking, SUM/AVERAGE/MIN/MAX; post_transform NONE.

    Walked in Tile, one step per tree level: gathers of node data by each
    (sample, tree)'s current entry."""
    x = n.input(0)
    if x.dtype.kind != "f":
        raise n.error(f"the input must be a float tensor, got {x.dtype}")
    if x.rank != 2:
        raise n.error(f"the input must be [N, F], got shape {list(x.shape)}")
    post = int(n.attr("post_transform", 0))
    if post != 0:
        raise n.error(
            f"post_transform {post} is not supported (only NONE, 0): the ONNX reference "
            "ignores it, and onnxruntime reads SOFTMAX (1) and LOGISTIC (2) the other way round"
        )
    agg = int(n.attr("aggregate_function", 1))
    if agg not in _AGGREGATES:
        raise n.error(f"aggregate_function {agg} is not one of 0 to 3")
    if n.attr("n_targets") is None:
        raise n.error("attribute n_targets is required")
    n_targets = int(n.attr("n_targets"))
    samples, features = x.shape
    shape = checked_shape(n, (samples, n_targets), "the output's shape")
    forest = _Forest(n, features)
    for t in forest.targets:
        if not 0 <= t < n_targets:
            raise n.error(f"leaf target {t} is out of range for n_targets {n_targets}")
    e = empty(shape, x.dtype)
    if e is not None:
        return [e]
    trees = len(forest.starts)
    # each entry's weight for each target, as the aggregation reads it
    finfo = np.finfo(x.dtype)
    fill = {0: 0.0, 1: 0.0, 2: float(finfo.max), 3: float(finfo.min)}[agg]
    table = np.full((forest.nodes + len(forest.weights), n_targets), fill, np.float64)
    scale = 1.0 / trees if agg == 0 and trees else None
    for leaf, (w, t) in enumerate(zip(forest.weights, forest.targets)):
        table[forest.nodes + leaf, t] = w / trees if scale is not None else w
    if trees == 0:
        out = np.full(shape, fill, x.dtype)
        return [Value("", shape, x.dtype, out)]
    if forest.depth == 0:  # every tree is a leaf: the result does not depend on X
        row = _aggregate_rows(table[forest.starts], agg, fill)
        out = np.broadcast_to(row.astype(x.dtype), shape).copy()
        return [Value("", shape, x.dtype, out)]
    state = _walk(b, x, forest)
    rows = b.statement(
        f"{{out}} = gather({b.ref(_const(table))}, {state.name}, 0)",
        (samples, trees, n_targets),
        F64,
    )
    sym = {0: "+", 1: "+", 2: "<", 3: ">"}[agg]
    total = b.contraction(
        f"{{out}}[s, t : {samples}, {n_targets}] = {sym}({rows.name}[s, k, t])", shape, F64
    )
    expr = total.name
    if agg in (2, 3):  # the reference starts from the type's largest/smallest value
        expr = f"{'min' if agg == 2 else 'max'}({expr}, {scalar(b, fill, F64)})"
    return [b.eltwise(cast(expr, x.dtype), shape, x.dtype)]


def _aggregate_rows(rows: np.ndarray, agg: int, fill: float) -> np.ndarray:
    if agg in (0, 1):
        return rows.sum(axis=0)
    if agg == 2:
        return np.minimum(rows.min(axis=0), fill)
    return np.maximum(rows.max(axis=0), fill)


def _walk(b: Builder, x: Value, forest: _Forest) -> Value:
    """The leaf entry each (sample, tree) reaches: ``[samples, trees]`` int64."""
    samples, features = x.shape
    trees = len(forest.starts)
    size = (samples, trees)
    split = _const(np.array(forest.split, np.float64))
    # per entry, one int64: feature * 16 + mode, plus 8 when a NaN feature value
    # takes the true branch (one gather for the three)
    code = _const(
        np.array(
            [f * 16 + m + 8 * t for f, m, t in zip(forest.feature, forest.mode, forest.mtt)],
            np.int64,
        )
    )
    branches = _const(np.stack([forest.true, forest.false], axis=1).reshape(-1).astype(np.int64))
    flat = reshape(b, x, (samples * features,))
    row_base = _const((np.arange(samples, dtype=np.int64) * features).reshape(samples, 1))
    narrower = forest.split_dtype.itemsize < x.dtype.itemsize
    state = b.eltwise(
        f"{b.ref(_const(np.array(forest.starts, np.int64).reshape(1, trees)))} + "
        f"0 * {b.ref(row_base)}",
        size,
        I64,
    )
    for _ in range(forest.depth):
        S = state.name
        c = b.statement(f"{{out}} = gather({b.ref(code)}, {S}, 0)", size, I64)
        at = b.eltwise(f"{c.name} / 16 + {b.ref(row_base)}", size, I64)
        xv = b.statement(f"{{out}} = gather({b.ref(flat)}, {at.name}, 0)", size, x.dtype)
        s = b.statement(f"{{out}} = gather({b.ref(split)}, {S}, 0)", size, F64)
        X, V, C = xv.name, s.name, c.name
        exact = cast(X, F64)
        # as the reference compares a Python float with a split of the splits' type
        rounded = cast(cast(X, forest.split_dtype), F64) if narrower else exact
        m = f"({C} % 8)"
        nan_goes_true = f"({C} % 16 >= 8)"
        test = (
            f"{m} == {LEQ} ? {rounded} <= {V} : ({m} == {LT} ? {rounded} < {V} : "
            f"({m} == {GTE} ? {rounded} >= {V} : ({m} == {GT} ? {rounded} > {V} : "
            f"({m} == {EQ} ? {rounded} == {V} : ({m} == {NEQ} ? {rounded} != {V} : "
            f"{exact} == {V})))))"
        )
        go_true = b.eltwise(f"({test}) || ({nan_goes_true} && {X} != {X})", size, np.bool_)
        pick = b.eltwise(f"2 * {S} + ({go_true.name} ? 0 : 1)", size, I64)
        state = b.statement(f"{{out}} = gather({b.ref(branches)}, {pick.name}, 0)", size, I64)
    return state
