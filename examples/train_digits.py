"""Train a small CNN written in the stripeml EDSL on scikit-learn's digits.

    .venv/bin/python examples/train_digits.py            # 20 epochs, ~97% held out
    .venv/bin/python examples/train_digits.py --quick    # 3 epochs (make demo)
    .venv/bin/python examples/train_digits.py --torch    # also time one step in PyTorch

The data is ``sklearn.datasets.load_digits`` (bundled with scikit-learn, no
download): 1797 8x8 grey images of the digits 0-9, of which 20% are held out.
The model: a 3x3 convolution (1 -> 16 channels, zero padded), relu, a 2x2
max pool, and a dense layer (4x4x16 -> 10); softmax cross-entropy loss.

One traced function (``train_step``) does a whole step: the forward pass, the
loss, ``E.gradients`` of the loss with respect to the four weights, and the
SGD update; it is compiled once for ``target="cpu"`` (the first call with a
batch's shapes) and called per mini-batch.  docs/autodiff.md has the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from stripeml import edsl as E

CHANNELS = 16
CLASSES = 10


def forward(X: E.Tensor, W1: E.Tensor, B1: E.Tensor, W2: E.Tensor, B2: E.Tensor) -> E.Tensor:
    """The logits ``[N, 10]`` of images ``X[N, 8, 8, 1]`` (channels last)."""
    N, H, W, CI, C, K, PH, PW = E.dims(8)
    n, x, y, kx, ky, ci, c, i, j, k = E.indexes(10)
    X.bind_dims(N, H, W, CI)
    W1.bind_dims(3, 3, CI, C)
    B1.bind_dims(C)
    W2.bind_dims(PH, PW, C, K)  # PH = H / 2, PW = W / 2
    B2.bind_dims(K)
    conv = E.output(N, H, W, C)
    conv[n, x, y, c] += X[n, x + kx - 1, y + ky - 1, ci] * W1[kx, ky, ci, c]
    act = E.relu(conv + B1)
    pool = E.output(N, H // 2, W // 2, C)
    pool[n, x, y, c] >= act[n, 2 * x + i, 2 * y + j, c]  # noqa: B015
    pool.add_constraint(i < 2)
    pool.add_constraint(j < 2)
    dense = E.output(N, K)
    dense[n, k] += pool[n, x, y, c] * W2[x, y, c, k]
    return dense + B2


def cross_entropy(logits: E.Tensor, Y: E.Tensor) -> E.Tensor:
    """The mean over the batch of ``-sum(Y * log_softmax(logits))`` (a scalar)."""
    N, K = E.dims(2)
    n, k = E.indexes(2)
    Y.bind_dims(N, K)
    top = E.output(N, 1)
    top[n, 0] >= logits[n, k]  # noqa: B015
    shifted = logits - top
    total = E.output(N, 1)
    total[n, 0] += E.exp(shifted)[n, k]
    picked = E.output()
    picked[()] += Y[n, k] * (shifted - E.log(total))[n, k]
    return -picked / N


def make_step(lr: float) -> E.EdslFunction:
    def train_step(X, Y, W1, B1, W2, B2):
        loss = cross_entropy(forward(X, W1, B1, W2, B2), Y)
        dW1, dB1, dW2, dB2 = E.gradients(loss, [W1, B1, W2, B2])
        return W1 - lr * dW1, B1 - lr * dB1, W2 - lr * dW2, B2 - lr * dB2, loss

    return E.function(train_step, target="cpu")


@E.function(target="cpu")
def predict(X, W1, B1, W2, B2):
    return forward(X, W1, B1, W2, B2)


def load(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]  # [1797, 8, 8, 1]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    test = order[: len(x) // 5]
    train = order[len(x) // 5 :]
    return x[train], y[train], x[test], y[test]


def init(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((3, 3, 1, CHANNELS)) * np.sqrt(2.0 / 9)
    w2 = rng.standard_normal((4, 4, CHANNELS, CLASSES)) * np.sqrt(1.0 / (16 * CHANNELS))
    b1, b2 = np.zeros(CHANNELS), np.zeros(CLASSES)
    return [np.ascontiguousarray(a, dtype=np.float32) for a in (w1, b1, w2, b2)]


def progress(items: Iterable[int], total: int, quiet: bool) -> Any:
    """A tqdm bar where tqdm is installed and stderr is a terminal, else the items."""
    if not quiet and sys.stderr.isatty():
        try:
            from tqdm import tqdm

            return tqdm(items, total=total, leave=False, unit="batch", desc=f"epoch of {total}")
        except ImportError:
            pass
    return items


def timed(
    fns: dict[str, Callable[[], object]], passes: int = 5, block: int = 20
) -> dict[str, float]:
    """Median seconds per call of each function: blocks of ``block`` calls that
    alternate between the functions over ``passes`` passes, each block after a
    50 ms pause (so the other library's threads go idle) and one untimed call."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(passes):
        for name, fn in fns.items():
            time.sleep(0.05)
            fn()
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def torch_step(
    batch: np.ndarray, onehot: np.ndarray, weights: list[np.ndarray], lr: float, threads: int
) -> Callable[[], None]:
    """One SGD step of the same model in PyTorch eager (NCHW)."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    x = torch.from_numpy(batch.transpose(0, 3, 1, 2).copy())
    target = torch.from_numpy(onehot.argmax(1))
    w1 = torch.from_numpy(weights[0].transpose(3, 2, 0, 1).copy()).requires_grad_()
    b1 = torch.from_numpy(weights[1].copy()).requires_grad_()
    w2 = torch.from_numpy(weights[2].reshape(-1, CLASSES).T.copy()).requires_grad_()
    b2 = torch.from_numpy(weights[3].copy()).requires_grad_()
    params = [w1, b1, w2, b2]

    def step() -> None:
        h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
        z = F.linear(h.permute(0, 2, 3, 1).reshape(len(x), -1), w2, b2)
        loss = F.cross_entropy(z, target)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= lr * g

    return step


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="3 epochs (for make demo and the tests)")
    ap.add_argument("--torch", action="store_true", help="time one step against PyTorch eager")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    epochs = 3 if args.quick else args.epochs

    start = time.perf_counter()
    x_train, y_train, x_test, y_test = load(args.seed)
    eye = np.eye(CLASSES, dtype=np.float32)
    weights = init(args.seed)
    step = make_step(args.lr)
    rng = np.random.default_rng(args.seed)
    batches = len(x_train) // args.batch  # the remainder is dropped: one compiled shape
    accuracy = 0.0
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        losses = []
        bar = progress(range(batches), batches, args.quiet)
        for b in bar:
            idx = order[b * args.batch : (b + 1) * args.batch]
            *weights, loss = step(x_train[idx], eye[y_train[idx]], *weights)
            losses.append(float(loss))
            if hasattr(bar, "set_postfix"):  # the bar shows the running loss, last accuracy
                bar.set_postfix(loss=f"{np.mean(losses):.4f}", accuracy=f"{accuracy:.2%}")
        logits = predict(x_test, *weights)
        accuracy = float((np.argmax(logits, axis=1) == y_test).mean())
        print(
            f"epoch {epoch:2d}/{epochs}  loss {np.mean(losses):.4f}  "
            f"held-out accuracy {accuracy:6.2%}  ({time.perf_counter() - start:5.1f} s)",
            flush=True,
        )
    print(f"trained in {time.perf_counter() - start:.1f} s: held-out accuracy {accuracy:.2%}")

    if args.torch:
        xb, yb = x_train[: args.batch], eye[y_train[: args.batch]]
        fns: dict[str, Callable[[], object]] = {"stripeml": lambda: step(xb, yb, *weights)}
        try:
            fns["torch"] = torch_step(xb, yb, weights, args.lr, step.target.threads)
        except ImportError:
            print("(PyTorch is not installed: stripeml alone)")
        med = timed(fns)
        line = f"one training step (batch {args.batch}, median of 100): stripeml "
        line += f"{med['stripeml'] * 1e3:.3f} ms"
        if "torch" in med:
            line += f", PyTorch eager {med['torch'] * 1e3:.3f} ms "
            line += f"({med['torch'] / med['stripeml']:.2f}x), {step.target.threads} threads each"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
