"""The differential fuzzer: random valid Tile programs on every backend against a
brute-force reference, and a mutation fuzzer for the Tile and Stripe IR parsers.

Modules, bottom up: ``choose`` (random choices from hypothesis or a seed),
``numerics``, ``contraction`` (contraction semantics by enumeration),
``gen_contraction`` (random contractions, shared with
``tests/test_random_contractions.py``), ``program`` (a program as data, its
Tile text, JSON), ``generate`` (random programs), ``reference`` (the oracle,
with error bounds), ``compare``, ``backends`` (running one program on every
backend), ``pool`` (worker processes that survive crashes and hangs),
``runner``, ``minimise``, ``mutate`` (the parser fuzzer) and ``__main__``
(``make fuzz``).  ``docs/reliability.md`` says what all this guarantees.
"""
