"""Executors: the reference interpreter today; the CPU JIT and GPU runtimes plug in via
:mod:`stripeml.runtime.backend`."""
