"""stripeml: a tensor compiler for machine learning built on Stripe.

Public API (pinned, see DESIGN §2)::

    f = stripeml.compile(source)   # target="cpu" by default; "interp", a name or a .toml path
    y = f(a, b)            # or f(A=a, B=b)
    exe = f.lower(a, b)    # .ir, .stages, .code
    report = stripeml.tune(f, a, b, budget_s=60)   # measured tuning (docs/tuning.md)
"""

from __future__ import annotations

from . import ir, targets
from .errors import ShapeError, StripeError, TargetError, TileSyntaxError

__version__ = "0.1.0"

__all__ = [
    "ShapeError",
    "StripeError",
    "TargetError",
    "TileSyntaxError",
    "__version__",
    "compile",
    "grad",
    "ir",
    "targets",
    "tune",
]


def __getattr__(name: str):
    # The compile entry point pulls in the frontend and runtimes; import lazily
    # so `import stripeml.ir` stays light.
    if name == "compile":
        from .api import compile

        return compile
    if name == "tune":
        from .tuning import tune

        return tune
    if name == "grad":
        from .autodiff import grad

        return grad
    if name in ("onnx", "edsl"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(name)
