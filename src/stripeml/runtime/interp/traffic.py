"""Memory traffic: the bytes each memory location reads and writes during a run.

Pass a :class:`Traffic` to :func:`~stripeml.runtime.interp.run` (or call
:func:`~stripeml.runtime.interp.run_with_report`) and every access is counted
against the location of the buffer it goes through:

* each point's ``load`` reads, and each point's ``store`` writes, one element
  of its view (a store through an aggregation counts once, as a write);
* a ``special`` reads its input views and writes its output view whole;
* the location is the view's own ``location`` when it names one other than
  the default ``DRAM``, else that of the buffer it refines: the root
  parameter or the ``none`` allocation at the end of its ``from`` chain.

So a copy block moving a tile from a DRAM buffer into an SRAM allocation
counts DRAM reads and SRAM writes, and the compute that then loads the tile
counts SRAM reads.  Counting uses the sizes of the point sets the executor
already has (never a loop per element), so the fast path stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...ir.nodes import DEFAULT_LOCATION, Refinement


@dataclass
class Traffic:
    """Bytes read and written per memory location (``{"DRAM": 4096, ...}``)."""

    reads: dict[str, int] = field(default_factory=dict)
    writes: dict[str, int] = field(default_factory=dict)
    # id(storage) -> location of the root parameter or allocation that owns it
    _places: dict[int, str] = field(default_factory=dict, repr=False, compare=False)

    def place(self, storage: np.ndarray, location: str) -> None:
        """Record where the buffer backed by ``storage`` lives."""
        self._places[id(storage)] = location

    def location(self, ref: Refinement, storage: np.ndarray) -> str:
        """The location an access through ``ref`` (backed by ``storage``) touches."""
        if ref.location != DEFAULT_LOCATION:
            return ref.location
        return self._places.get(id(storage), ref.location)

    def read(self, ref: Refinement, storage: np.ndarray, elements: int) -> None:
        """Count ``elements`` elements of ``storage`` read through ``ref``."""
        if elements:
            loc = self.location(ref, storage)
            self.reads[loc] = self.reads.get(loc, 0) + elements * storage.itemsize

    def write(self, ref: Refinement, storage: np.ndarray, elements: int) -> None:
        """Count ``elements`` elements of ``storage`` written through ``ref``."""
        if elements:
            loc = self.location(ref, storage)
            self.writes[loc] = self.writes.get(loc, 0) + elements * storage.itemsize

    @property
    def locations(self) -> list[str]:
        """Every location that moved data, in first-seen order (reads first)."""
        return list(dict.fromkeys([*self.reads, *self.writes]))

    def total(self, location: str) -> int:
        """Bytes read plus written at ``location``."""
        return self.reads.get(location, 0) + self.writes.get(location, 0)

    def as_dict(self) -> dict[str, dict[str, int]]:
        """``{location: {"read": bytes, "written": bytes}}``."""
        return {
            loc: {"read": self.reads.get(loc, 0), "written": self.writes.get(loc, 0)}
            for loc in self.locations
        }
