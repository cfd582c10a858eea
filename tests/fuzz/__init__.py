"""The differential fuzzer: random valid Tile programs on every backend against a
brute-force reference, and a mutation fuzzer for the Tile and Stripe IR parsers.

Modules, bottom up: ``choose`` (random choices from hypothesis or a seed),
``numerics``, ``contraction`` (contraction semantics by enumeration),
``gen_contraction`` (random contractions, shared with
``tests/test_random_contractions.py``), ``program`` (a program as data, its
Tile text, JSON), ``inputs`` and ``generate`` (random programs), ``values``
and ``reference`` (the oracle, with error bounds), ``compare``, ``known``
(the known-bug classes), ``backends`` (running one program on every target),
``pool`` (worker processes that survive crashes and hangs), ``runner``,
``minimise``, ``mutate`` (the parser fuzzer), ``session`` and ``__main__``
(``make fuzz``).  ``docs/reliability.md`` says what all this guarantees.
"""
