"""Calls by address: what the PyTorch frontend (``stripeml.torch``) needs of
:mod:`stripeml.runtime.cpu_direct`, through the API layer (frontends do not
import the runtime).

``direct_call(function, arrays)`` is the :class:`~stripeml.runtime.cpu_direct.DirectCall`
of the executable ``function`` runs for ``arrays`` (which it has run at least
once), or ``None`` (another backend, a buffer that is not C-contiguous):
called with the inputs' and the results' data addresses, in parameter and
output order, it runs the program with none of a call's checks (see that
module for what the caller promises instead)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..runtime.cpu_direct import DirectCall

if TYPE_CHECKING:
    from . import Function

__all__ = ["DirectCall", "direct_call"]


def direct_call(function: Function, arrays: Sequence[Any]) -> DirectCall | None:
    """The direct call of ``function``'s executable for ``arrays`` (its
    parameters, in order), or None."""
    exe = function.lower(*arrays)
    return DirectCall.make(exe._compiled, function.params, function.outputs, function.constants)
