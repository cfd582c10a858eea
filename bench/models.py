"""A benchmark set of real architectures: PyTorch modules exported to ONNX, and the light zoo.

Every entry is batch 1 with random weights, built from a config (nothing is
downloaded): depthwise CNNs (MobileNetV2, EfficientNet-B0), ResNet-18, a
ConvNeXt-T, ViT-Ti/16, BERT (256 wide x 4 layers, and BERT-base) and GPT-2
small at sequence 128 and 512, a 2-layer ``nn.TransformerEncoder``, and the
light models shipped in the ``onnx`` package's backend test data.  The
convolutional networks are written here with ``torch.nn`` (torchvision is
not a dependency); the transformers come from ``transformers`` configs.

    from models import REGISTRY, build
    model, feeds = build("resnet18")        # (onnx.ModelProto, {input: ndarray})

A PyTorch entry is exported once with ``torch.onnx.export`` (the TorchScript
exporter, ``dynamo=False``: the dynamo one needs onnxscript) and cached under
``build/models/`` (``NAME.onnx``, its inputs in ``NAME.npz``, and
``NAME.key``, the entry's parameters and the library versions it was made
with: a changed key exports again), so a rerun needs neither torch nor
transformers.  ``python bench/models.py [NAME ...]`` exports and lists them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "build" / "models"
OPSET = 17
SEED = 0

LIGHT_NAMES = ("resnet50", "squeezenet", "bvlc_alexnet", "densenet121", "inception_v1",
               "inception_v2", "shufflenet", "vgg19", "zfnet512")  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One model of the set: ``build()`` returns ``(onnx.ModelProto, feeds)``."""

    name: str
    family: str  # "cnn", "transformer" or "zoo"
    about: str
    params: dict[str, Any] = field(default_factory=dict)
    make: Callable[..., Any] | None = None  # (**params) -> (module, {input: tensor}); None: zoo
    dynamic: dict[int, str] = field(default_factory=dict)  # input axis -> symbolic name
    # a quantised copy of the entry ``base``: "static" (QDQ, calibrated on random
    # inputs) or "dynamic" (MatMulInteger), by onnxruntime's own quantisation tool
    quantize: str = ""
    base: str = ""
    # how far stripeml's outputs may be from onnxruntime's, relative to the largest
    tolerance: float = 1e-3

    def build(self, cache: Path | None = None) -> tuple[Any, dict[str, np.ndarray]]:
        """The model and its inputs; a PyTorch entry's export is cached in ``cache``
        (default ``build/models/``)."""
        if self.quantize:
            return _quantized(self, CACHE if cache is None else cache)
        if self.make is None:
            return load_light(self.name.removeprefix("zoo_"))
        return _exported(self, CACHE if cache is None else cache)


# ---- the light zoo --------------------------------------------------------------------------


def load_light(name: str) -> tuple[Any, dict[str, np.ndarray]]:
    """A light model of the onnx package with random weights and its logits exposed."""
    import onnx

    from stripeml.onnx.testing import randomize_weights, strip_softmax

    path = os.path.join(
        os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx"
    )
    model = strip_softmax(randomize_weights(onnx.load(path), seed=1))
    return model, feeds_for(model)


def feeds_for(model: Any) -> dict[str, np.ndarray]:
    """Seeded standard-normal float32 inputs for every graph input (dynamic sizes: 1)."""
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(2)
    out = {}
    for x in model.graph.input:
        if x.name not in inits:
            shape = tuple(d.dim_value or 1 for d in x.type.tensor_type.shape.dim)
            out[x.name] = rng.standard_normal(shape).astype(np.float32)
    return out


# ---- export and cache -----------------------------------------------------------------------


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "transformers"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = ""
    return out


def _key(entry: Entry) -> str:
    return json.dumps(
        {
            "params": entry.params,
            "dynamic": {str(k): v for k, v in entry.dynamic.items()},
            "opset": OPSET,
            "seed": SEED,
            **_versions(),
        },
        sort_keys=True,
    )


def _exported(entry: Entry, cache: Path) -> tuple[Any, dict[str, np.ndarray]]:
    import onnx

    onnx_path = cache / f"{entry.name}.onnx"
    npz_path = cache / f"{entry.name}.npz"
    key_path = cache / f"{entry.name}.key"
    key = _key(entry)
    cached = onnx_path.exists() and npz_path.exists() and key_path.exists()
    if cached and key_path.read_text(encoding="utf-8") != key:
        if importlib.util.find_spec("torch") is None:  # nothing to export with: keep it
            print(f"{entry.name}: {onnx_path} was made for another key", file=sys.stderr)
        else:
            cached = False
    if not cached:
        export(entry, onnx_path, npz_path)
        key_path.write_text(key, encoding="utf-8")
    with np.load(npz_path) as data:
        feeds = {k: data[k] for k in data.files}
    return onnx.load(str(onnx_path)), feeds


def _quantized(entry: Entry, cache: Path) -> tuple[Any, dict[str, np.ndarray]]:
    """``entry.base`` quantised by onnxruntime's tool (cached beside the exports,
    keyed by the base's key and onnxruntime's version)."""
    from importlib.metadata import version

    import onnx

    base_model, feeds = REGISTRY[entry.base].build(cache)
    path = cache / f"{entry.name}.onnx"
    key_path = cache / f"{entry.name}.key"
    key = json.dumps({"base": _key(REGISTRY[entry.base]), "mode": entry.quantize,
                      "onnxruntime": version("onnxruntime")}, sort_keys=True)  # fmt: skip
    if not (path.exists() and key_path.exists() and key_path.read_text(encoding="utf-8") == key):
        from onnxruntime import quantization as q

        src = cache / f"{entry.name}.float.onnx"
        onnx.save(base_model, str(src))
        tmp = path.with_suffix(".tmp")
        if entry.quantize == "static":
            rng = np.random.default_rng(SEED)
            batches = iter(
                [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}
                 for _ in range(4)]
            )  # fmt: skip

            class Reader(q.CalibrationDataReader):
                def get_next(self) -> dict[str, np.ndarray] | None:
                    return next(batches, None)

            q.quantize_static(str(src), str(tmp), Reader(), quant_format=q.QuantFormat.QDQ,
                              activation_type=q.QuantType.QUInt8,
                              weight_type=q.QuantType.QInt8)  # fmt: skip
        else:
            q.quantize_dynamic(str(src), str(tmp), weight_type=q.QuantType.QInt8)
        os.replace(tmp, path)
        src.unlink()
        key_path.write_text(key, encoding="utf-8")
    return onnx.load(str(path)), feeds


def export(entry: Entry, onnx_path: Path, npz_path: Path) -> None:
    """Build ``entry``'s module with seeded random weights and export it to ``onnx_path``."""
    import torch

    assert entry.make is not None
    torch.manual_seed(SEED)
    module, inputs = entry.make(**entry.params)
    module.eval()
    _randomize_norms(module)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = onnx_path.with_suffix(".tmp")
    # with autograd on: nn.TransformerEncoder's fused inference path has no ONNX export;
    # the exporter's warnings (its deprecation, tracing notes) are not the benchmark's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(inputs.values()),
            str(tmp),
            input_names=list(inputs),
            output_names=["output"],
            dynamic_axes={n: dict(entry.dynamic) for n in inputs} if entry.dynamic else None,
            opset_version=OPSET,
            dynamo=False,
        )
    np.savez(npz_path, **{k: v.numpy() for k, v in inputs.items()})
    os.replace(tmp, onnx_path)


def _randomize_norms(module: Any) -> None:
    """Batch norms get random statistics and affine parameters (the defaults are identities)."""
    import torch

    g = torch.Generator().manual_seed(SEED + 1)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)


def _image(size: int = 224) -> dict[str, Any]:
    import torch

    return {"input": torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(2))}


def _tokens(seq: int, vocab: int) -> dict[str, Any]:
    import torch

    ids = torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(2))
    return {"input_ids": ids, "attention_mask": torch.ones(1, seq, dtype=torch.int64)}


def _last_hidden(model: Any, names: list[str]) -> Any:
    """``model`` (a transformers model) as a module of the positional inputs ``names``
    whose one output is the last hidden state."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args)), return_dict=False)[0]

    return LastHidden()


# ---- convolutional networks in torch.nn -----------------------------------------------------


def _cna(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1, act: Any = "relu") -> Any:
    """Conv (no bias) + BatchNorm + activation (``None``: none)."""
    import torch.nn as nn

    layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append({"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU}[act]())
    return nn.Sequential(*layers)


def _he_init(module: Any) -> None:
    """He-normal convolution and linear weights, so activations keep their scale with depth."""
    import torch.nn as nn

    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                nn.init.normal_(m.bias, std=0.1)


def mobilenet_v2(size: int = 224) -> tuple[Any, dict[str, Any]]:
    import torch.nn as nn

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            layers = [_cna(cin, hidden, 1, act="relu6")] if expand != 1 else []
            layers += [
                _cna(hidden, hidden, 3, stride, groups=hidden, act="relu6"),
                _cna(hidden, cout, 1, act=None),
            ]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            return x + self.body(x) if self.residual else self.body(x)

    layers: list[nn.Module] = [_cna(3, 32, 3, 2, act="relu6")]
    cin = 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:  # fmt: skip
        for i in range(n):
            layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += [_cna(cin, 1280, 1, act="relu6"), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    model = nn.Sequential(*layers, nn.Linear(1280, 1000))
    _he_init(model)
    return model, _image(size)


def efficientnet_b0(size: int = 224) -> tuple[Any, dict[str, Any]]:
    import torch.nn as nn

    class MBConv(nn.Module):
        def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden, squeeze = cin * expand, max(1, cin // 4)
            self.expand = _cna(cin, hidden, 1, act="silu") if expand != 1 else nn.Identity()
            self.dw = _cna(hidden, hidden, k, stride, groups=hidden, act="silu")
            self.se = nn.Sequential(
                nn.AdaptiveAvgPool2d(1),
                nn.Conv2d(hidden, squeeze, 1),
                nn.SiLU(),
                nn.Conv2d(squeeze, hidden, 1),
                nn.Sigmoid(),
            )
            self.project = _cna(hidden, cout, 1, act=None)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.dw(self.expand(x))
            y = self.project(y * self.se(y))
            return x + y if self.residual else y

    layers: list[nn.Module] = [_cna(3, 32, 3, 2, act="silu")]
    cin = 32
    for t, k, s, c, n in [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                          (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]:  # fmt: skip
        for i in range(n):
            layers.append(MBConv(cin, c, k, s if i == 0 else 1, t))
            cin = c
    layers += [_cna(cin, 1280, 1, act="silu"), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    model = nn.Sequential(*layers, nn.Linear(1280, 1000))
    _he_init(model)
    return model, _image(size)


def resnet50(size: int = 224) -> tuple[Any, dict[str, Any]]:
    """ResNet-50's shape: bottleneck blocks (1x1, 3x3, 1x1), [3, 4, 6, 3] of them."""
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, mid: int, stride: int) -> None:
            super().__init__()
            cout = 4 * mid
            self.body = nn.Sequential(
                _cna(cin, mid, 1), _cna(mid, mid, 3, stride), _cna(mid, cout, 1, act=None)
            )
            self.down = _cna(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None
            self.relu = nn.ReLU()

        def forward(self, x: Any) -> Any:
            return self.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers: list[nn.Module] = [_cna(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for mid, n, s in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(n):
            layers.append(Bottleneck(cin, mid, s if i == 0 else 1))
            cin = 4 * mid
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000))
    _he_init(model)
    return model, _image(size)


def resnet18(size: int = 224) -> tuple[Any, dict[str, Any]]:
    import torch.nn as nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(_cna(cin, cout, 3, stride), _cna(cout, cout, 3, act=None))
            self.down = _cna(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None
            self.relu = nn.ReLU()

        def forward(self, x: Any) -> Any:
            return self.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers: list[nn.Module] = [_cna(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for c, s in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [Basic(cin, c, s), Basic(c, c, 1)]
        cin = c
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))
    _he_init(model)
    return model, _image(size)


def convnext(
    size: int = 224,
    depths: tuple[int, ...] = (3, 3, 9, 3),
    dims: tuple[int, ...] = (96, 192, 384, 768),
) -> tuple[Any, dict[str, Any]]:
    import torch
    import torch.nn as nn

    class LayerNorm2d(nn.LayerNorm):  # over channels of an NCHW tensor
        def forward(self, x: Any) -> Any:
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            self.gamma = nn.Parameter(torch.rand(dim) * 0.5 + 0.5)

        def forward(self, x: Any) -> Any:
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            return x + (self.mlp(y) * self.gamma).permute(0, 3, 1, 2)

    layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
    for i, (depth, dim) in enumerate(zip(depths, dims)):
        if i:
            layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
        layers += [Block(dim) for _ in range(depth)]
    model = nn.Sequential(
        *layers,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.LayerNorm(dims[-1], eps=1e-6),
        nn.Linear(dims[-1], 1000),
    )
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.trunc_normal_(m.weight, std=0.02 if m is model[-1] else 0.1)
            nn.init.normal_(m.bias, std=0.02)
    return model, _image(size)


def unet(size: int = 128, width: int = 32) -> tuple[Any, dict[str, Any]]:
    """A small U-Net for segmentation: three stride-2 stages down, three bilinear
    upsamplings (ONNX ``Resize``) back to the input's size with skip connections,
    21 classes per pixel."""
    import torch
    import torch.nn as nn

    class Up(nn.Module):
        def __init__(self, cin: int, skip: int, cout: int) -> None:
            super().__init__()
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.conv = nn.Sequential(_cna(cin + skip, cout), _cna(cout, cout))

        def forward(self, x: Any, skip: Any) -> Any:
            return self.conv(torch.cat([self.up(x), skip], 1))

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = width
            self.stem = nn.Sequential(_cna(3, w), _cna(w, w))
            self.down = nn.ModuleList(
                [nn.Sequential(_cna(w * 2**i, w * 2 ** (i + 1), s=2), _cna(w * 2 ** (i + 1), w * 2 ** (i + 1)))
                 for i in range(3)]
            )  # fmt: skip
            self.ups = nn.ModuleList(
                [Up(w * 2 ** (i + 1), w * 2**i, w * 2**i) for i in reversed(range(3))]
            )
            self.head = nn.Conv2d(w, 21, 1)

        def forward(self, x: Any) -> Any:
            skips = [self.stem(x)]
            for d in self.down:
                skips.append(d(skips[-1]))
            y = skips.pop()
            for up in self.ups:
                y = up(y, skips.pop())
            return self.head(y)

    model = UNet()
    _he_init(model)
    return model, _image(size)


def lstm(
    seq: int = 32, features: int = 64, hidden: int = 128, layers: int = 2
) -> tuple[Any, dict[str, Any]]:
    """A stacked ``nn.LSTM`` over a sequence (batch 1), its outputs at every step."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.LSTM(features, hidden, layers)

        def forward(self, x: Any) -> Any:
            return self.rnn(x)[0]

    x = torch.randn(seq, 1, features, generator=torch.Generator().manual_seed(2))
    return Net(), {"input": x}


def gru(seq: int = 32, features: int = 64, hidden: int = 128) -> tuple[Any, dict[str, Any]]:
    """A bidirectional ``nn.GRU`` over a sequence (batch 1)."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.GRU(features, hidden, bidirectional=True)

        def forward(self, x: Any) -> Any:
            return self.rnn(x)[0]

    x = torch.randn(seq, 1, features, generator=torch.Generator().manual_seed(2))
    return Net(), {"input": x}


# ---- transformers -----------------------------------------------------------------------


def vit(size: int = 224, **config: Any) -> tuple[Any, dict[str, Any]]:
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=size, attn_implementation="eager", **config)
    model = ViTModel(cfg, add_pooling_layer=False)
    return _last_hidden(model, ["pixel_values"]), {"pixel_values": _image(size)["input"]}


def bert(seq: int = 128, **config: Any) -> tuple[Any, dict[str, Any]]:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(attn_implementation="eager", **config)
    model = BertModel(cfg, add_pooling_layer=False)
    tokens = _tokens(seq, cfg.vocab_size)
    return _last_hidden(model, list(tokens)), tokens


def gpt2(seq: int = 128, **config: Any) -> tuple[Any, dict[str, Any]]:
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(attn_implementation="eager", use_cache=False, **config)
    model = GPT2Model(cfg)
    tokens = _tokens(seq, cfg.vocab_size)  # a mask: without one, a check for packed sequences
    return _last_hidden(model, list(tokens)), tokens  # uses torch.diff (no ONNX export)


def mobilevit_seg(size: int = 256) -> tuple[Any, dict[str, Any]]:
    """MobileViT-XXS-sized blocks (convolutions, unfolded patches through
    transformer layers, folded back) with a DeepLabV3 head, whose image pooling
    branch is upsampled (``Resize``); He-initialised (the library's own init
    leaves activations near 1e-30 by the head)."""
    from transformers import MobileViTConfig, MobileViTForSemanticSegmentation

    cfg = MobileViTConfig(image_size=size, hidden_sizes=[64, 80, 96],
                          neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320], num_labels=21,
                          aspp_out_channels=128, attn_implementation="eager")  # fmt: skip
    model = MobileViTForSemanticSegmentation(cfg)
    _he_init(model)
    _randomize_norms(model)
    return _last_hidden(model, ["pixel_values"]), {"pixel_values": _image(size)["input"]}


def transformer_encoder(
    seq: int = 128, d: int = 256, heads: int = 4, layers: int = 2
) -> tuple[Any, dict[str, Any]]:
    import torch
    import torch.nn as nn

    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    x = torch.randn(1, seq, d, generator=torch.Generator().manual_seed(2))
    return model, {"input": x}


# ---- the registry -----------------------------------------------------------------------------

_BERT_MINI = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
              "intermediate_size": 1024}  # fmt: skip
_VIT_TINY = {"hidden_size": 192, "num_hidden_layers": 12, "num_attention_heads": 3,
             "intermediate_size": 768, "patch_size": 16}  # fmt: skip

REGISTRY: dict[str, Entry] = {
    e.name: e
    for e in [
        Entry("mobilenet_v2", "cnn", "MobileNetV2 1.0, 224x224", {}, mobilenet_v2),
        Entry(
            "efficientnet_b0",
            "cnn",
            "EfficientNet-B0 (MBConv + SE, SiLU), 224x224",
            {},
            efficientnet_b0,
        ),  # fmt: skip
        Entry("resnet18", "cnn", "ResNet-18, 224x224", {}, resnet18),
        Entry("resnet50", "cnn", "ResNet-50 (bottlenecks [3, 4, 6, 3]), 224x224", {}, resnet50),
        Entry("convnext_t", "cnn", "ConvNeXt-T (3,3,9,3) x (96..768), 224x224", {}, convnext),
        Entry(
            "vit_tiny", "transformer", "ViT-Ti/16 (192 wide, 12 layers), 224x224", _VIT_TINY, vit
        ),  # fmt: skip
        Entry(
            "bert_mini_128",
            "transformer",
            "BERT 256 wide x 4 layers, sequence 128",
            {**_BERT_MINI, "seq": 128},
            bert,
        ),  # fmt: skip
        Entry(
            "bert_mini_512",
            "transformer",
            "BERT 256 wide x 4 layers, sequence 512",
            {**_BERT_MINI, "seq": 512},
            bert,
        ),  # fmt: skip
        Entry(
            "bert_base_128", "transformer", "BERT-base (768 x 12), sequence 128", {"seq": 128}, bert
        ),  # fmt: skip
        Entry(
            "bert_base_512", "transformer", "BERT-base (768 x 12), sequence 512", {"seq": 512}, bert
        ),  # fmt: skip
        Entry(
            "bert_base_seq",
            "transformer",
            "BERT-base (768 x 12), any sequence length (exported at 128)",
            {"seq": 128},
            bert,
            {1: "sequence"},
        ),  # fmt: skip
        Entry(
            "gpt2_128", "transformer", "GPT-2 small (768 x 12), sequence 128", {"seq": 128}, gpt2
        ),  # fmt: skip
        Entry(
            "gpt2_512", "transformer", "GPT-2 small (768 x 12), sequence 512", {"seq": 512}, gpt2
        ),  # fmt: skip
        Entry(
            "transformer_encoder",
            "transformer",
            "nn.TransformerEncoder d=256, 4 heads, 2 layers, sequence 128",
            {},
            transformer_encoder,
        ),  # fmt: skip
        Entry(
            "unet", "segmentation", "U-Net, 3 levels (32..256), bilinear Resize, 128x128", {}, unet
        ),  # fmt: skip
        Entry(
            "mobilevit_seg",
            "segmentation",
            "MobileViT-XXS blocks + DeepLabV3 head (Resize), 256x256",
            {},
            mobilevit_seg,
        ),  # fmt: skip
        Entry("lstm", "recurrent", "nn.LSTM 64 -> 128, 2 layers, sequence 32", {}, lstm),
        Entry("gru", "recurrent", "nn.GRU 64 -> 128, bidirectional, sequence 32", {}, gru),
        Entry(
            "resnet18_int8",
            "quantized",
            "ResNet-18, statically quantised (QDQ, uint8 activations, int8 weights)",
            quantize="static",
            base="resnet18",
            tolerance=3e-2,
        ),  # fmt: skip
        Entry(
            "bert_mini_int8",
            "quantized",
            "BERT 256 x 4 layers, sequence 128, dynamically quantised (int8 MatMulInteger)",
            quantize="dynamic",
            base="bert_mini_128",
            tolerance=3e-2,
        ),  # fmt: skip
        Entry(
            "resnet50_int8",
            "quantized",
            "ResNet-50, statically quantised (QDQ, uint8 activations, int8 weights)",
            quantize="static",
            base="resnet50",
            tolerance=3e-2,
        ),  # fmt: skip
        *[Entry(f"zoo_{n}", "zoo", f"light_{n}.onnx of the onnx package") for n in LIGHT_NAMES],
    ]
}


def build(name: str, cache: Path | None = None) -> tuple[Any, dict[str, np.ndarray]]:
    """``(onnx.ModelProto, feeds)`` of the entry ``name`` (exports cached in ``cache``)."""
    return REGISTRY[name].build(cache)


def unsupported_ops(model: Any) -> list[str]:
    """The operator types of ``model`` that stripeml's importer has no definition for."""
    from stripeml.onnx.registry import OPS

    return sorted({n.op_type for n in model.graph.node} - set(OPS))


def main(argv: list[str]) -> int:
    for name in argv or list(REGISTRY):
        model, feeds = build(name)
        missing = unsupported_ops(model)
        shapes = {k: list(v.shape) for k, v in feeds.items()}
        note = f"  unsupported: {', '.join(missing)}" if missing else ""
        print(f"{name:22} {len(model.graph.node):5} nodes  {shapes}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
