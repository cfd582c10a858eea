"""The ai.onnx.ml operators (ops/ml.py) against onnx's reference evaluator, on
random inputs, and the registry's domains."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.errors import ExecutionError  # noqa: E402
from stripeml.onnx import OnnxError  # noqa: E402
from stripeml.onnx.ops import lookup, supported_ops  # noqa: E402
from stripeml.onnx.registry import op  # noqa: E402

ML = "ai.onnx.ml"
RNG = np.random.default_rng(5)
ELEM = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE,
        np.dtype(np.float16): T.FLOAT16, np.dtype(np.int64): T.INT64,
        np.dtype(np.int32): T.INT32, np.dtype(np.int16): T.INT16}  # fmt: skip


def _model(node, inputs, ml_opset=5, ai_opset=21, inits=()):
    ins = [h.make_tensor_value_info(n, ELEM[np.dtype(a.dtype)], list(a.shape)) for n, a in inputs]
    g = h.make_graph([node], "g", ins, [h.make_tensor_value_info("y", 0, None)], list(inits))
    imports = [h.make_opsetid(ML, ml_opset)]
    if ai_opset:
        imports.append(h.make_opsetid("", ai_opset))
    return h.make_model(g, opset_imports=imports)


def _check(model, feeds, target="interp", **tol):
    got = stripeml.onnx.compile(model, target=target)(**feeds)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    if tol:
        np.testing.assert_allclose(got, want, **tol)
    else:
        np.testing.assert_array_equal(got, want)
    return got


# -- the registry's domains ------------------------------------------------------


def test_ml_operators_are_found_by_domain_only():
    assert lookup("Binarizer", ML).domain == ML
    assert lookup("Binarizer") is None and lookup("Binarizer", "ai.onnx") is None
    assert lookup("Relu", ML) is None and lookup("Relu", "ai.onnx").name == "Relu"
    assert lookup("Relu", "com.example") is None
    names = [(d.domain, d.name) for d in supported_ops()]
    assert (ML, "TreeEnsemble") in names and names == sorted(names)


def test_a_name_may_be_registered_in_each_domain_once(monkeypatch):
    from stripeml.onnx import registry

    monkeypatch.setitem(registry.DOMAINS, ML, dict(registry.ML_OPS))

    def fn(b, n):
        """Relu: a test double."""
        return []

    op("Relu", domain=ML)(fn)  # no collision with ai.onnx's Relu
    assert lookup("Relu", ML).fn is fn and lookup("Relu").fn is not fn
    with pytest.raises(ValueError, match="Relu of domain 'ai.onnx.ml' registered twice"):
        op("Relu", domain="ai.onnx.ml")(fn)
    with pytest.raises(ValueError, match="unknown operator domain"):
        op("Relu", domain="com.example")(fn)


def test_an_ml_only_model_needs_no_ai_onnx_import_but_its_own():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    node = h.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=0.1)
    _check(_model(node, [("x", x)], ml_opset=1, ai_opset=None), {"x": x})
    model = _model(node, [("x", x)], ml_opset=1)
    del model.opset_import[0]  # the ai.onnx.ml one
    with pytest.raises(OnnxError, match="domain 'ai.onnx.ml' has no opset_import"):
        stripeml.onnx.compile(model, target="interp")


@pytest.mark.parametrize(
    "node, ml_opset, message",
    [
        (h.make_node("TreeEnsemble", ["x"], ["y"], domain=ML, tree_roots=[0]), 3,
         "operator TreeEnsemble does not exist in ai.onnx.ml opset 3"),
        (h.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_floats=[1.0],
                     values_floats=[2.0]), 1,
         "ai.onnx.ml opset 1 selects LabelEncoder-1, which the importer does not implement"),
        (h.make_node("Binarizer", ["x"], ["y"], domain=ML, bogus=1), 1,
         "Unrecognized attribute: bogus"),
    ],
)  # fmt: skip
def test_ml_nodes_are_checked_against_their_domain_s_opset(node, ml_opset, message):
    model = _model(node, [("x", np.zeros((2, 2), np.float32))], ml_opset=ml_opset)
    with pytest.raises(OnnxError, match=message):
        stripeml.onnx.compile(model, target="interp")


# -- Binarizer -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("threshold", [0.0, 0.3, -2.5])
def test_binarizer(dtype, threshold):
    x = (RNG.standard_normal((3, 5)) * 3).astype(dtype)
    if x.dtype.kind == "f":
        x[0, 0] = np.nan
    node = h.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=threshold)
    _check(_model(node, [("x", x)]), {"x": x})


def test_binarizer_on_the_cpu():
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    node = h.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=0.25)
    _check(_model(node, [("x", x)]), {"x": x}, target="cpu")


# -- ArrayFeatureExtractor -------------------------------------------------------


@pytest.mark.parametrize(
    "shape, indices",
    [
        ((5,), [3, 0, -1]),
        ((3, 6), [[5, 1]]),
        ((2, 3, 4), [1, -4, 2, 2]),
        ((3, 4), [[1, 2, 0], [3, 3, -2]]),
        ((2, 5), []),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_array_feature_extractor(shape, indices, dtype):
    x = (RNG.standard_normal(shape) * 10).astype(dtype)
    i = np.array(indices, np.int64)
    node = h.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    _check(_model(node, [("x", x), ("i", i)]), {"x": x, "i": i})
    # constant indices too
    const = _model(node, [("x", x)], inits=[nh.from_array(i, "i")])
    got = stripeml.onnx.compile(const, target="interp")(x=x)
    np.testing.assert_array_equal(got, ReferenceEvaluator(const).run(None, {"x": x})[0])


def test_array_feature_extractor_index_out_of_range():
    x = np.zeros((2, 4), np.float32)
    node = h.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML, name="afe")
    i = np.array([1, 4], np.int64)
    f = stripeml.onnx.compile(_model(node, [("x", x), ("i", i)]), target="interp")
    with pytest.raises(ExecutionError, match="index 4"):
        f(x=x, i=i)
    const = _model(node, [("x", x)], inits=[nh.from_array(i, "i")])
    with pytest.raises(
        OnnxError,
        match=r"node 'afe' \(ArrayFeatureExtractor\): index 4 is out of range .* size 4",
    ):
        stripeml.onnx.compile(const, target="interp")(x=x)


# -- LabelEncoder ----------------------------------------------------------------


def _encoder(x, ml_opset=4, **attrs):
    node = h.make_node("LabelEncoder", ["x"], ["y"], domain=ML, name="le", **attrs)
    return _model(node, [("x", x)], ml_opset=ml_opset)


def test_label_encoder_int_keys_to_floats_with_duplicates():
    x = RNG.integers(-3, 8, size=(4, 6)).astype(np.int64)
    model = _encoder(x, ml_opset=2, keys_int64s=[1, 5, -2, 5, 7], values_floats=[0.5, 1.5, -3.25, 2.5, 1e-3],
                     default_float=9.0)  # fmt: skip
    _check(model, {"x": x})


def test_label_encoder_float_keys_to_ints():
    x = RNG.choice(np.array([0.1, 0.0, -0.0, 2.5, 3.0, np.inf, 7.0], np.float32), size=(20,))
    model = _encoder(x, keys_floats=[0.1, 0.0, 2.5, np.inf, -0.0], values_int64s=[1, 2, 3, 4, 5])
    _check(model, {"x": x})  # -0.0 and 0.0 are one key: its value is the last one


@pytest.mark.parametrize("count", [3, 40])  # a chain of selects, a contraction and a gather
@pytest.mark.parametrize(
    "ktype, vtype", [(np.int64, np.float64), (np.int32, np.int16), (np.float64, np.int32)]
)
def test_label_encoder_tensor_mappings(count, ktype, vtype):
    keys = RNG.choice(np.arange(-60, 60), size=count, replace=False).astype(ktype)
    values = (RNG.standard_normal(count) * 100).astype(vtype)
    x = RNG.choice(np.concatenate([keys, np.arange(100, 110).astype(ktype)]), size=(3, 17))
    attrs = {"keys_tensor": nh.from_array(keys, "k"), "values_tensor": nh.from_array(values, "v"),
             "default_tensor": nh.from_array(np.array([7], vtype), "d")}  # fmt: skip
    _check(_encoder(x, **attrs), {"x": x})


@pytest.mark.parametrize("count", [2, 30])
def test_label_encoder_nan_keys_match_nan_as_the_specification_says(count):
    """The reference never matches NaN (its dict hashes each NaN apart); ONNX says
    "Float keys with value 'NaN' match any input 'NaN' value"."""
    keys = np.arange(count, dtype=np.float32)
    keys[1] = np.nan
    x = np.array([0.0, np.nan, -np.nan, 1.0, 5.0], np.float32)
    attrs = {"keys_tensor": nh.from_array(keys, "k"),
             "values_tensor": nh.from_array(np.arange(count, dtype=np.int64) + 10, "v")}  # fmt: skip
    got = stripeml.onnx.compile(_encoder(x, **attrs), target="interp")(x)
    want = [10, 11, 11, -1, 15 if count > 5 else -1]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("vtype, default", [(np.float64, -0.0), (np.int32, -1)])
def test_label_encoder_default_tensor_defaults_as_the_specification_says(vtype, default):
    """Without ``default_tensor``: -1 for integer values, -0.0 for floats (the
    reference requires the attribute)."""
    x = np.array([[1, 2], [3, 4]], np.int64)
    attrs = {"keys_tensor": nh.from_array(np.array([2, 4], np.int64), "k"),
             "values_tensor": nh.from_array(np.array([5, 6], vtype), "v")}  # fmt: skip
    got = stripeml.onnx.compile(_encoder(x, **attrs), target="interp")(x)
    assert got.dtype == vtype
    np.testing.assert_array_equal(got, np.array([[default, 5], [default, 6]], vtype))
    assert vtype != np.float64 or np.signbit(got[0, 0])


def test_label_encoder_of_a_constant_is_folded():
    keys = nh.from_array(np.array([1, 2], np.int64), "k")
    node = h.make_node("LabelEncoder", ["c"], ["y"], domain=ML, keys_tensor=keys,
                       values_tensor=nh.from_array(np.array([10, 20], np.int64), "v"))  # fmt: skip
    model = _model(node, [], ml_opset=4, inits=[nh.from_array(np.array([2, 1, 3], np.int64), "c")])
    np.testing.assert_array_equal(stripeml.onnx.compile(model, target="interp")(), [20, 10, -1])


def test_label_encoder_keys_of_another_type_match_as_numbers():
    x = np.array([1, 2, 3, 40000], np.int32)
    model = _encoder(x, keys_floats=[2.0, 2.5, 40000.0], values_floats=[1.0, 2.0, 3.0])
    got = stripeml.onnx.compile(model, target="interp")(x)
    np.testing.assert_array_equal(got, np.array([-0.0, 1.0, -0.0, 3.0], np.float32))
    assert np.signbit(got[0])


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({"keys_strings": ["a"], "values_int64s": [1]}, "string keys and values are not supported"),
        ({"keys_int64s": [1, 2], "values_int64s": [1]}, "2 keys for 1 values"),
        ({"keys_int64s": [1], "keys_floats": [1.0], "values_int64s": [1]},
         "exactly one keys_\\* attribute must be set"),
        ({"values_int64s": [1]}, "exactly one keys_\\* attribute must be set, got none"),
        ({"keys_tensor": nh.from_array(np.array([1], np.int64), "k"),
          "values_tensor": nh.from_array(np.array([1], np.int64), "v"),
          "default_tensor": nh.from_array(np.array([1], np.int32), "d")},
         "default_tensor has element type int32, values_tensor int64"),
    ],
)  # fmt: skip
def test_label_encoder_errors(attrs, message):
    x = np.zeros(3, np.int64)
    with pytest.raises(OnnxError, match=rf"node 'le' \(LabelEncoder\): .*{message}"):
        stripeml.onnx.compile(_encoder(x, **attrs), target="interp")(x)


# -- TreeEnsemble ----------------------------------------------------------------

VALUES = np.array([-1.0, -0.5, 0.25, 0.5, 1.0, 2.0])


def _forest(trees, features, depth, targets, dtype, members=True, degenerate=False):
    """Random trees as TreeEnsemble attributes: thresholds and set members from
    ``VALUES`` (the inputs are drawn from them too, so equalities happen)."""
    nodes: dict[str, list] = {k: [] for k in ("mode", "split", "feat", "t", "f", "tl", "fl", "mtt")}
    leaves: dict[str, list] = {"w": [], "t": []}
    member_values: list[float] = []

    def leaf():
        leaves["w"].append(float(RNG.normal() * 10))
        leaves["t"].append(int(RNG.integers(targets)))
        return 1, len(leaves["w"]) - 1

    def new_node():
        for v in nodes.values():
            v.append(0)
        return len(nodes["mode"]) - 1

    def grow(level):
        if level == depth or (level > 0 and RNG.random() < 0.25):
            return leaf()
        k = new_node()
        mode = int(RNG.integers(7 if members else 6))
        nodes["mode"][k] = mode
        if mode == 6:  # no 0.0 member: the reference reads 0.0 as the end of a set
            member_values.extend([*RNG.choice(VALUES, int(RNG.integers(3)), replace=False), np.nan])
        else:
            nodes["split"][k] = float(RNG.choice(VALUES))
        nodes["feat"][k] = int(RNG.integers(features))
        nodes["mtt"][k] = int(RNG.integers(2))
        nodes["tl"][k], nodes["t"][k] = grow(level + 1)
        nodes["fl"][k], nodes["f"][k] = grow(level + 1)
        return 0, k

    roots = []
    for tree in range(trees):
        if degenerate and tree == 0:  # a tree that is one leaf
            _, lid = leaf()
            k = new_node()
            nodes["tl"][k] = nodes["fl"][k] = 1
            nodes["t"][k] = nodes["f"][k] = lid
            roots.append(k)
        else:
            roots.append(grow(0)[1])
    attrs = {
        "nodes_modes": nh.from_array(np.array(nodes["mode"], np.uint8), "modes"),
        "nodes_splits": nh.from_array(np.array(nodes["split"], dtype), "splits"),
        "nodes_featureids": nodes["feat"],
        "nodes_truenodeids": nodes["t"],
        "nodes_falsenodeids": nodes["f"],
        "nodes_trueleafs": nodes["tl"],
        "nodes_falseleafs": nodes["fl"],
        "nodes_missing_value_tracks_true": nodes["mtt"],
        "leaf_weights": nh.from_array(np.array(leaves["w"], dtype), "w"),
        "leaf_targetids": leaves["t"],
        "tree_roots": roots,
        "n_targets": targets,
    }
    if member_values:
        attrs["membership_values"] = nh.from_array(np.array(member_values, dtype), "members")
    return attrs


def _ensemble(x, name="te", **attrs):
    node = h.make_node("TreeEnsemble", ["x"], ["y"], domain=ML, name=name, **attrs)
    return _model(node, [("x", x)])


def _samples(n, features, dtype):
    pool = np.append(VALUES, [np.nan, 0.0, 0.7, -3.0])
    return RNG.choice(pool, size=(n, features)).astype(dtype)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_forests_match_the_reference(aggregate, dtype):
    for trial in range(3):
        attrs = _forest(trees=1 + trial * 2, features=3, depth=2 + trial, targets=3, dtype=dtype,
                        degenerate=trial == 1)  # fmt: skip
        x = _samples(30, 3, dtype)
        model = _ensemble(x, aggregate_function=aggregate, **attrs)
        _check(model, {"x": x}, rtol=1e-6 if dtype == np.float32 else 1e-13, atol=0)


def test_a_forest_on_the_cpu_with_float16_inputs():
    attrs = _forest(trees=4, features=5, depth=4, targets=2, dtype=np.float16)
    x = _samples(50, 5, np.float16)
    _check(_ensemble(x, **attrs), {"x": x}, target="cpu", rtol=2e-3, atol=1e-2)


def test_splits_narrower_than_the_input_compare_as_the_reference():
    """A float64 input against float32 splits: the reference compares the
    feature value rounded to float32 (a Python float meets a float32 split)."""
    split = np.float32(0.1)
    attrs = {
        "nodes_modes": nh.from_array(np.array([0, 4], np.uint8), "m"),
        "nodes_splits": nh.from_array(np.array([split, split], np.float32), "s"),
        "nodes_featureids": [0, 1], "nodes_truenodeids": [0, 1], "nodes_falsenodeids": [1, 2],
        "nodes_trueleafs": [1, 1], "nodes_falseleafs": [0, 1],
        "leaf_weights": nh.from_array(np.array([1, 2, 3], np.float32), "w"),
        "leaf_targetids": [0, 0, 0], "tree_roots": [0], "n_targets": 1,
    }  # fmt: skip
    # 0.1000000016 > float32(0.1) = 0.10000000149..., but rounds to it; 0.1 != float32(0.1)
    x = np.array([[0.1, 0.0], [0.1000000016, 0.0], [0.2, 0.1], [0.2, 0.3]], np.float64)
    got = _check(_ensemble(x, **attrs), {"x": x})
    np.testing.assert_array_equal(got.ravel(), [1, 1, 2, 3])


def test_set_membership_follows_the_specification_where_the_reference_stops_at_zero():
    """Sets end at NaNs; the reference's parser also ends one at a member 0.0
    (``while (member := next(it)) and ...``), onnxruntime does not."""
    attrs = {
        "nodes_modes": nh.from_array(np.array([6], np.uint8), "m"),
        "nodes_splits": nh.from_array(np.array([0], np.float32), "s"),
        "nodes_featureids": [0], "nodes_truenodeids": [0], "nodes_falsenodeids": [1],
        "nodes_trueleafs": [1], "nodes_falseleafs": [1],
        "leaf_weights": nh.from_array(np.array([1, 2], np.float32), "w"),
        "leaf_targetids": [0, 0], "tree_roots": [0], "n_targets": 1,
        "membership_values": nh.from_array(np.array([1, 0, 3, np.nan], np.float32), "mv"),
    }  # fmt: skip
    x = np.array([[0.0], [1.0], [3.0], [2.0], [np.nan]], np.float32)
    got = stripeml.onnx.compile(_ensemble(x, **attrs), target="interp")(x)
    np.testing.assert_array_equal(got.ravel(), [1, 1, 1, 2, 2])


def test_an_ensemble_of_leaves_and_an_empty_batch():
    attrs = {
        "nodes_modes": nh.from_array(np.array([0, 0], np.uint8), "m"),
        "nodes_splits": nh.from_array(np.array([0, 0], np.float32), "s"),
        "nodes_featureids": [0, 0], "nodes_truenodeids": [0, 1], "nodes_falsenodeids": [0, 1],
        "nodes_trueleafs": [1, 1], "nodes_falseleafs": [1, 1],
        "leaf_weights": nh.from_array(np.array([1.5, -2], np.float32), "w"),
        "leaf_targetids": [1, 1], "tree_roots": [0, 1], "n_targets": 3,
    }  # fmt: skip
    x = _samples(4, 2, np.float32)
    for aggregate in range(4):
        _check(_ensemble(x, aggregate_function=aggregate, **attrs), {"x": x})
    empty = np.zeros((0, 2), np.float32)
    got = stripeml.onnx.compile(_ensemble(empty, **attrs), target="interp")(empty)
    assert got.shape == (0, 3) and got.dtype == np.float32


def _one_tree(**changes):
    attrs = {
        "nodes_modes": nh.from_array(np.array([0, 3], np.uint8), "m"),
        "nodes_splits": nh.from_array(np.array([0.5, 1], np.float32), "s"),
        "nodes_featureids": [0, 1], "nodes_truenodeids": [1, 0], "nodes_falsenodeids": [1, 1],
        "nodes_trueleafs": [0, 1], "nodes_falseleafs": [1, 1],
        "leaf_weights": nh.from_array(np.array([1, 2], np.float32), "w"),
        "leaf_targetids": [0, 1], "tree_roots": [0], "n_targets": 2,
    }  # fmt: skip
    attrs.update(changes)
    return {k: v for k, v in attrs.items() if v is not None}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"post_transform": 1}, "post_transform 1 is not supported"),
        ({"n_targets": None}, "attribute n_targets is required"),
        ({"leaf_targetids": [0, 2]}, "leaf target 2 is out of range for n_targets 2"),
        ({"nodes_featureids": [0, 2]}, "node 1: feature 2 is out of range for 2 features"),
        ({"nodes_truenodeids": [5, 0]}, "node 0: its true branch, node 5, does not exist"),
        ({"nodes_falsenodeids": [1, 0], "nodes_falseleafs": [1, 0]},
         "a branch leads back to a node above it"),
        ({"tree_roots": [2]}, "tree root 2 is not a node"),
        ({"nodes_featureids": [0]}, "nodes_featureids has 1 entries, nodes_modes 2"),
        ({"nodes_modes": nh.from_array(np.array([0, 6], np.uint8), "m")},
         "membership_values holds 0 sets .* for 1 BRANCH_MEMBER nodes"),
        ({"aggregate_function": 7}, "aggregate_function 7 is not one of 0 to 3"),
    ],
)  # fmt: skip
def test_tree_ensemble_errors(changes, message):
    x = np.zeros((2, 2), np.float32)
    model = _ensemble(x, **_one_tree(**changes))
    with pytest.raises(OnnxError, match=rf"node 'te' \(TreeEnsemble\): .*{message}"):
        stripeml.onnx.compile(model, target="interp")(x)
