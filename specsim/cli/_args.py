"""Command-line arguments shared by the ``specsim`` commands (layer 5, entry points)."""
from __future__ import annotations

from specsim.acceptance import Acceptance
from specsim.errors import SpecsimValueError


def acceptance_from_args(args, required: bool = True):
    """Build the Acceptance given on the command line (one of --acceptance, --cumulative,
    --conditional, --mal).  With ``required=False`` none given returns None."""
    t = args.profile_temperature
    mal_arg = getattr(args, "mal", None)
    given = [x for x in (args.acceptance, args.cumulative, args.conditional, mal_arg) if x is not None]
    if not given and not required:
        if t is not None:
            raise SpecsimValueError("profile_temperature", "applies to an acceptance given on the command line", t)
        return None
    if len(given) != 1:
        raise SpecsimValueError(
            "acceptance", "give exactly one of --acceptance ALPHA, --cumulative P1,P2,..., --conditional A1,A2,..., --mal MAL@N"
        )
    if args.acceptance is not None:
        return Acceptance.constant(args.acceptance, temperature=t)
    if args.cumulative is not None:
        return Acceptance.from_rates([float(x) for x in args.cumulative.split(",")], kind="cumulative", temperature=t)
    if args.conditional is not None:
        return Acceptance.from_rates([float(x) for x in args.conditional.split(",")], kind="conditional", temperature=t)
    mal, _, n = args.mal.partition("@")
    if not n:
        raise SpecsimValueError("--mal", "takes MAL@N, e.g. 3.2@4", args.mal)
    return Acceptance.from_mal(float(mal), int(n), temperature=t)
