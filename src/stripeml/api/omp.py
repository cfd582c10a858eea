"""Running a program's kernels on another library's OpenMP team: what the
PyTorch frontend (``stripeml.torch.threads``) needs of
:mod:`stripeml.runtime.omp_team`, through the API layer (frontends do not
import the runtime).

``openmp_entry_points()`` finds the process's OpenMP runtime (``GOMP_parallel``
and ``omp_get_thread_num``); setting ``LOCAL.entry`` to them on a thread runs
that thread's split kernels on the team until it is set back (``None``: the
runtime's native pool)."""

from __future__ import annotations

from ..runtime.omp_team import _LOCAL as LOCAL
from ..runtime.omp_team import openmp_entry_points

__all__ = ["LOCAL", "openmp_entry_points"]
