"""python -m tests.mutation: break each safety rule in a scratch copy; every mutation
must be killed by the tests named for it.

    python -m tests.mutation            every mutation (lab tests: root, some minutes)
    python -m tests.mutation --quick    only those tests/unit must kill (no lab, seconds)
    python -m tests.mutation --list     the rules and their tests, nothing run
    python -m tests.mutation -k lock    mutations whose rule mentions "lock"

Exit 0 when every mutation was killed; 1 when one survived, went stale (no longer
applies to the code: rewrite it) or ran out of time; 2 when the named tests fail on the
unmutated code (then nothing could be learned from killing).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from .catalogue import MUTATIONS
from .mutate import Mutation
from .runner import Outcome, baseline, run_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="only the mutations tests/unit must kill")
    parser.add_argument("-k", metavar="TEXT", help="only rules containing TEXT")
    parser.add_argument("--list", action="store_true", help="list, run nothing")
    parser.add_argument("-j", "--jobs", type=int, default=2,
                        help="mutations run side by side (default 2)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds one mutation's tests may take (default 600)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip checking that the named tests pass unmutated")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if (m.unit or not args.quick)
              and (args.k is None or args.k.lower() in m.rule.lower())]
    if args.quick:  # the quick set runs its unit tests only
        chosen = [_unit_only(m) for m in chosen]
    if not chosen:
        print("no mutation matches", file=sys.stderr)
        return 1
    if args.list:
        for m in chosen:
            print(f"{m.rule}\n    {m.path} {m.function}: {m.find!r} -> {m.replace!r}\n"
                  f"    tests: {' '.join(m.tests)}")
        return 0
    started = time.monotonic()
    if not args.no_baseline:
        ok, out = baseline(chosen, args.timeout)
        if not ok:
            print(out[-3000:])
            print("the named tests fail on the unmutated code: fix that first",
                  file=sys.stderr)
            return 2
        print(f"baseline: the named tests pass unmutated ({time.monotonic() - started:.0f} s)",
              flush=True)
    outcomes = run_all(chosen, max(1, args.jobs), args.timeout, _print)
    bad = [o for o in outcomes if o.verdict != "killed"]
    print(f"\n{len(outcomes) - len(bad)} of {len(outcomes)} mutation(s) killed in "
          f"{time.monotonic() - started:.0f} s" + (": every safety rule is guarded" if not bad
                                                  else ""))
    for o in bad:
        print(f"  {o.verdict.upper()}: {o.mutation.rule}"
              + (f" ({o.by})" if o.by else "")
              + (f"\n    would let: {o.mutation.why}" if o.verdict == "survived" else ""))
    return 1 if bad else 0


def _unit_only(m: Mutation) -> Mutation:
    return replace(m, tests=tuple(t for t in m.tests if t.startswith("tests/unit/")))


def _print(o: Outcome) -> None:
    mark = {"killed": "killed  ", "survived": "SURVIVED", "stale": "STALE   ",
            "timeout": "TIMEOUT "}[o.verdict]
    print(f"{mark} {o.seconds:5.0f} s  {o.mutation.rule}"
          + (f"\n                   {o.by}" if o.by else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
