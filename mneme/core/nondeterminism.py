"""Nondeterministic outputs explained: which regions depend on the threads' order, why, and by how much.

Two witnesses. The IR (`order_dependence`): float atomics, exchanges, compare-and-swaps and stores at
atomically handed-out indexes name the buffers whose bytes follow the order threads run in. And the
replays: the recorded configuration run several times from the prologue; a region whose bytes differ
between runs, or from the recording, is order-dependent whatever the IR says (a race the IR does not
show). For each such region the observed spread gives a float policy with a bound (the largest error
seen, times a margin), which `mneme nondeterminism --apply` stores in the recording's epilogue, where
`mneme annotate` overrides it.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from mneme.core.divergence import ROUNDING_BOUND, FloatDivergence, float_divergence
from mneme.core.errors import UsageError
from mneme.core.snapshot import RegionPolicy

log = logging.getLogger(__name__)


@attrs.frozen
class RegionFinding:
    """What the IR and the replays say of one region the kernel writes."""

    addr: int
    size: int
    arg: int | None  # the pointer argument into it, if any
    reasons: tuple[str, ...]  # from the IR: why its bytes follow the threads' order
    between_runs: FloatDivergence | None  # the largest difference between two replays
    vs_recording: FloatDivergence | None  # the largest difference of a replay from the recorded epilogue
    runs_differ: bool  # the replays' bytes were not all the same
    matches_recording: bool  # every replay reproduced the recorded bytes
    policy: RegionPolicy | None  # derived from the spread; None where none is needed or none fits
    note: str = ""  # why no policy, where there is none

    @property
    def order_dependent(self) -> bool:
        return bool(self.reasons) or self.runs_differ


def _worst(divergences: list[FloatDivergence | None]) -> FloatDivergence | None:
    found = [d for d in divergences if d is not None]
    if not found:
        return None
    return max(found, key=lambda d: (d.nan_mismatch, d.max_rel, d.max_abs, d.max_ulp))


def derive_policy(spreads: list[FloatDivergence | None], margin: float) -> tuple[RegionPolicy | None, str]:
    """The policy accepting `margin` times the largest observed spread, or None and why not."""
    worst = _worst(spreads)
    if worst is None:
        return None, "no spread observed to derive a bound from"
    policy = worst.accepting_policy(margin)
    if policy is None:
        return None, "a NaN against a number: no tolerance accepts it"
    if policy.relative and worst.max_rel > ROUNDING_BOUND:
        return None, f"the spread (relative {worst.max_rel:.3g}) is beyond a rounding difference: a race, not rounding"
    return policy, ""


def analyze(executor: Any, config: Any = None, *, runs: int = 3, margin: float = 4.0) -> list[RegionFinding]:
    """Replay `config` (default: the recorded one) `runs` times on `executor` and name the order-dependent regions.

    `executor`: an open `BaseExecutor` (its cache state should leave each run's output in place: any
    but "primed"). Returns one finding per region the kernel writes, order-dependent ones first.
    """
    from mneme.core.executor import pointer_args
    from mneme.core.order_dependence import order_dependent_params

    if runs < 2:
        raise UsageError(f"comparing replays needs at least 2 runs, got {runs}")
    if not margin >= 1:
        raise UsageError(f"the margin over the observed spread must be >= 1, got {margin}")
    ex = executor
    config = config or ex.default_config()
    reasons_by_param: dict[int, list[str]] = {}
    if ex.rec.llvm_files:
        try:
            reasons_by_param = order_dependent_params(ex.optimized_ir(config), ex.rec.kernel_name)
        except Exception as exc:  # noqa: BLE001 - the replays still witness; the IR's reading is a bonus
            log.warning("kernel %s: its IR could not be read for atomics: %s", ex.rec.kernel_name, exc)
    regions = {r.addr: r for r in ex.epilogue.regions}
    pointers = pointer_args(ex.rec, ex.args, ex.epilogue.regions)
    arg_of = {}
    for index, value in pointers.items():
        for addr, region in regions.items():
            if addr <= value < addr + region.size:
                arg_of.setdefault(addr, index)
    outputs: list[dict[int, bytes]] = []
    for _ in range(runs):
        result = ex.execute(config)
        if not result.executed:
            raise UsageError(f"kernel {ex.rec.kernel_name!r} did not run: {result.error}")
        outputs.append({addr: ex.device.read(addr, regions[addr].size) for addr in ex.written})
    findings = []
    for addr in ex.written:
        region = regions[addr]
        expected = bytes(ex.epilogue.read_region(addr))
        arg = arg_of.get(addr)
        reasons = tuple(reasons_by_param.get(arg, ())) if arg is not None else ()
        first = outputs[0][addr]
        runs_differ = any(out[addr] != first for out in outputs[1:])
        between = _worst([float_divergence(first, out[addr]) for out in outputs[1:]])
        vs_recording = _worst([float_divergence(expected, out[addr]) for out in outputs])
        matches = all(out[addr] == expected for out in outputs)
        policy, note = None, ""
        if (reasons or runs_differ) and not matches:
            policy, note = derive_policy([between, vs_recording], margin)
        elif reasons and matches:
            note = "every replay here matched the recording bit for bit: no spread to derive a bound from"
        findings.append(
            RegionFinding(addr, region.size, arg, reasons, between, vs_recording, runs_differ, matches, policy, note)
        )
    findings.sort(key=lambda f: (not f.order_dependent, f.addr))
    return findings
