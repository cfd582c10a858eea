"""The fixed-seed CI slice of the differential fuzzer (``make fuzz`` runs longer).

240 generated programs (seeds 0-239, in four chunks so xdist spreads them) on
every available target, and 3000 parser mutants, each in a worker process
that survives crashes.  Any mismatch with the reference, any exception that
is not a StripeError, any death or hang fails the test, which prints the
program minimised.  The known bugs other slices are fixing are left out
(``known.EXCLUDED_NOW`` names each and its slice); they are generated again
once removed from that list.
"""

from __future__ import annotations

import pytest

from .backends import available_targets
from .known import EXCLUDED_NOW
from .pool import Pool
from .session import fuzz_parsers, fuzz_programs, minimise_parser_failure, minimise_program_failure

CHUNK = 60


def _report_program_failures(pool: Pool, tally) -> str:
    lines = [f"{len(tally.failures)} failures in {tally.programs} programs"]
    for f in tally.failures[:10]:
        lines.append(
            f"seed {f.seed}: {f.status} on {f.target} ({f.kind}, mode {f.mode}): {f.detail[:600]}"
        )
    first = tally.failures[0]
    if first.target != "reference":
        program, _ = minimise_program_failure(pool, first, EXCLUDED_NOW, 120.0, budget=120)
        lines.append(f"seed {first.seed} minimised:\n{program.source()}")
    lines.append(f"original:\n{first.source}")
    return "\n".join(lines)


@pytest.mark.parametrize("chunk", range(4))
def test_programs_agree_with_the_reference_on_every_target(chunk: int) -> None:
    seeds = range(chunk * CHUNK, (chunk + 1) * CHUNK)
    targets = list(available_targets())
    with Pool(1, 120.0) as pool:
        tally = fuzz_programs(seeds, targets, pool, EXCLUDED_NOW)
        assert not tally.failures, _report_program_failures(pool, tally)
    # Not vacuous: every target ran (and passed) nearly every program.
    for t in targets:
        assert tally.per_target[t]["ok"] >= 0.8 * len(seeds), (t, dict(tally.per_target[t]))


@pytest.mark.parametrize("chunk", range(2))
def test_parser_mutants_raise_only_stripe_errors(chunk: int) -> None:
    with Pool(1, 5.0) as pool:
        tally = fuzz_parsers(1500, 100 + chunk, pool, EXCLUDED_NOW)
        if tally.failures:
            f = tally.failures[0]
            small = minimise_parser_failure(pool, f, 5.0)
            pytest.fail(
                f"{len(tally.failures)} of {sum(tally.mutants.values())} mutants failed; first: "
                f"{f['kind']} {f['status']} {f.get('error', '')}\n{f.get('detail', '')[-1500:]}\n"
                f"minimised: {small!r}"
            )
    # Not vacuous: some mutants get past the parsers into checks, lowering and running.
    ran = sum(v for k, v in tally.outcomes.items() if k.endswith(" ran"))
    assert ran >= 50, dict(tally.outcomes)
