"""Measured tuning on top of the analytic default (docs/tuning.md).

``stripeml.tune(f, *example_inputs, budget_s=60, executor="local")`` measures
alternatives to the target file's pass options per kernel, checks each
against the interpreter, and stores the winners in the tuning database
(:mod:`stripeml.runtime.tuning_db`), which every later compile of the same
kernel on the same target reads.  Modules:

* :mod:`.kernels`: the kernels of a program as jobs (a program each, inputs,
  the interpreter's outputs), and compiling + checking one candidate;
* :mod:`.space`: the search space, from the passes' tunable options;
* :mod:`.search`: the beam search of one kernel;
* :mod:`.measure`: interleaved timing with pauses, medians, early stop;
* :mod:`.executors`: this process, or a Ray cluster;
* :mod:`.driver`: the whole tune, the budget, the report.
"""

from __future__ import annotations

from .driver import Progress, TuneReport, tune

__all__ = ["Progress", "TuneReport", "tune"]
