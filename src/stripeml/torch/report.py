"""What the backend did (or would do) with each graph: counters, reports, log lines.

:data:`STATS` counts for ``stripeml.torch.stats()``; a :class:`GraphReport` per
captured graph says which ATen operators it has, which are unsupported and why,
and how it was split; :func:`note` writes the one-line summaries on the
``stripeml.torch`` logger (as warnings with ``STRIPEML_TORCH_VERBOSE=1``).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger("stripeml.torch")

#: Counts, for tests and curiosity: graphs dynamo handed over, programs compiled,
#: graphs run eagerly instead, wholly or in part (fallbacks), calls of compiled
#: graphs; for split graphs, ``partitions`` (supported parts, each compiled on
#: its own) and ``eager_nodes`` (ATen nodes left to PyTorch between them).
STATS: Counter[str] = Counter()


def _verbose() -> bool:
    return os.environ.get("STRIPEML_TORCH_VERBOSE", "") not in ("", "0")


def note(text: str) -> None:
    if _verbose():
        log.warning(text)
    else:
        log.info(text)


@dataclass
class GraphReport:
    """What happened (or would happen) to one captured graph."""

    ops: Counter[str] = field(default_factory=Counter)  # ATen operator -> count
    unsupported: dict[str, str] = field(default_factory=dict)  # operator -> why
    reason: str = ""  # why the whole graph runs eagerly, when it does
    #: when the graph is split: the ATen operators of each supported partition
    #: (each compiles as its own program) ...
    partitions: list[Counter[str]] = field(default_factory=list)
    #: ... and the ATen operators of the nodes PyTorch runs between them -> count
    eager: Counter[str] = field(default_factory=Counter)
    #: "inference", or for training AOTAutograd's "forward" or "backward" graph
    kind: str = "inference"

    @property
    def compiles(self) -> bool:
        """The whole graph compiles as one program."""
        return not self.unsupported and not self.reason

    @property
    def partial(self) -> bool:
        """The graph is split: its partitions compile, the rest runs eagerly."""
        return bool(self.partitions) and not self.reason


def summary(report: GraphReport) -> str:
    if report.reason:
        return report.reason
    return "unsupported: " + ", ".join(
        f"{op} ({why})" if why else op for op, why in sorted(report.unsupported.items())
    )


def split_summary(report: GraphReport) -> str:
    sizes = " + ".join(str(sum(p.values())) for p in report.partitions)
    n = sum(report.eager.values())
    eager = ", ".join(f"{op} x{k}" for op, k in sorted(report.eager.items()))
    return (
        f"{len(report.partitions)} partition(s) compile ({sizes} ATen ops), "
        f"{n} node(s) fall back to eager: {eager}; {summary(report)}"
    )
