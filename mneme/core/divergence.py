"""How far a replay's output is from the recorded epilogue, and the policy that would accept it.

A variant compiled from IR need not reproduce the application's floating-point bits (clang's code is
not nvcc's: contraction into FMAs, division and square-root sequences, denormal flushing), and a kernel
that accumulates floats atomically gives other bits on every run. "Did not verify" alone leaves the user
guessing a tolerance; this module measures the largest absolute, relative and ULP error of a region read
as floats, and words the `mneme annotate` command whose policy accepts exactly what was seen.
"""

from __future__ import annotations

import logging
import math

import attrs
import numpy as np

from mneme.core.snapshot import RegionPolicy, compare_buffers

_FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
_ORDERED = {"f16": (np.int16, 0x7FFF), "f32": (np.int32, 0x7FFFFFFF), "f64": (np.int64, 0x7FFFFFFFFFFFFFFF)}
# Read as a float type, a region of integers is mostly NaNs, infinities and denormals: below this share of
# ordinary values (zero or normal) it is not reported as floats.
_PLAUSIBLE = 0.9


@attrs.frozen
class FloatDivergence:
    """The largest errors of one region read as `dtype`, over the elements that differ."""

    dtype: str
    elements: int  # elements that differ
    max_abs: float
    max_rel: float  # inf where an expected zero became nonzero
    max_ulp: int
    nan_mismatch: int  # NaN on one side only

    def describe(self) -> str:
        text = (
            f"as {self.dtype}: {self.elements} elements differ, max abs error {self.max_abs:.3g}, "
            f"max rel error {self.max_rel:.3g}, max {self.max_ulp} ulp"
        )
        return text + (f", {self.nan_mismatch} NaN where the other side has a number" if self.nan_mismatch else "")

    def accepting_policy(self, margin: float = 1.0) -> RegionPolicy | None:
        """The loosest-needed policy that accepts these errors (`margin` times them), None where none can.

        Relative where every differing element's expected value is nonzero, else absolute; the threshold
        is the observed error rounded up to two significant digits. A NaN against a number is accepted by
        no tolerance.
        """
        if self.nan_mismatch or not math.isfinite(self.max_abs):
            return None
        relative = math.isfinite(self.max_rel)
        return RegionPolicy(
            dtype=self.dtype,
            threshold=round_up((self.max_rel if relative else self.max_abs) * margin),
            relative=relative,
        )


def round_up(value: float, digits: int = 2) -> float:
    """`value` rounded up to `digits` significant digits (0 stays 0)."""
    if value <= 0:
        return 0.0
    scale = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    rounded = float(f"{math.ceil(value / scale - 1e-9) * scale:.{digits}g}")
    while rounded < value:  # the formatting may round below; one step up is enough
        rounded = float(f"{rounded + scale:.{digits}g}")
    return rounded


def ulp_distance(expected: np.ndarray, actual: np.ndarray, dtype: str) -> np.ndarray:
    """Units in the last place between two float arrays of `dtype`, elementwise (as float64 counts)."""
    signed, magnitude = _ORDERED[dtype]

    def ordered(values: np.ndarray) -> np.ndarray:
        bits = values.view(signed).astype(np.int64)
        return np.where(bits < 0, -(bits & magnitude), bits).astype(np.float64)  # sign-magnitude -> ordered

    return np.abs(ordered(actual) - ordered(expected))


def float_divergence(expected: bytes, actual: bytes, dtype: str | None = None) -> FloatDivergence | None:
    """The errors of `actual` against `expected` read as `dtype` (default: f32, else f64, where plausible).

    None when the two are equal, of other sizes, or when neither float reading is plausible for the
    expected bytes (integers, pointers).
    """
    if len(expected) != len(actual) or expected == actual:
        return None
    choices = [dtype] if dtype else [d for d in ("f32", "f64") if len(expected) % np.dtype(_FLOATS[d]).itemsize == 0]
    for name in choices:
        if name not in _FLOATS:
            return None
        size = np.dtype(_FLOATS[name]).itemsize
        whole = len(expected) // size * size
        e = np.frombuffer(expected, np.uint8, whole).view(_FLOATS[name])
        a = np.frombuffer(actual, np.uint8, whole).view(_FLOATS[name])
        if dtype is None and not _plausible(e):
            continue
        loosest = RegionPolicy(dtype=name, threshold=float(np.finfo(_FLOATS[name]).max))  # only the errors matter
        report = compare_buffers(e.tobytes(), a.tobytes(), loosest)
        differ = (e.view(_ORDERED[name][0]) != a.view(_ORDERED[name][0])) & ~(np.isnan(e) & np.isnan(a))
        finite = differ & np.isfinite(e) & np.isfinite(a)
        ulp = int(ulp_distance(e[finite], a[finite], name).max()) if finite.any() else 0
        return FloatDivergence(
            name, int(np.count_nonzero(differ)), report.max_abs, report.max_rel, ulp, report.nan_mismatch
        )
    return None


def _plausible(values: np.ndarray) -> bool:
    if not values.size:
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        tiny = np.finfo(values.dtype).tiny
        magnitude = np.abs(values.astype(np.float64))
        ordinary = np.isfinite(magnitude) & ((magnitude == 0) | (magnitude >= tiny))
    return np.count_nonzero(ordinary) >= _PLAUSIBLE * values.size


def annotate_command(
    database: str, record_id: str, policy: RegionPolicy, *, arg: int | None = None, region: int | None = None
) -> str:
    """The `mneme annotate` command line that stores `policy` for a region (by argument, else by address)."""
    where = f"--arg {arg}" if arg is not None else f"--region 0x{region:x}"
    kind = "--relative" if policy.relative else "--absolute"
    return (
        f"mneme annotate {database} -rid {record_id} {where} --dtype {policy.dtype} "
        f"--threshold {policy.threshold:g} {kind}"
    )


# A rounding difference (another compiler's FMAs, a reordered float sum) stays below this relative error;
# beyond it the variant computes something else, and no tolerance is suggested for it.
ROUNDING_BOUND = 1e-3


def explain(
    rec,
    instance,
    pointers: dict[int, int],
    failed,
    expected_of,
    actual_of,
    order_reasons: dict[int, list[str]] | None = None,
) -> dict[int, str]:
    """Region address -> its errors as floats and, where they are rounding-sized, the `mneme annotate`
    command that accepts them, for each failed region that reads as floats. `failed`: the epilogue's
    regions that did not verify; `pointers`: argument index -> pointer value (`executor.pointer_args`);
    `expected_of(region)`, `actual_of(region)`: recorded and replayed bytes;
    `order_reasons`: parameter index -> why its memory follows the threads' order (`order_dependence`)."""
    out = {}
    for region in failed:
        policy = region.policy
        expected = bytes(expected_of(region))
        div = float_divergence(
            expected, bytes(actual_of(region)), policy.dtype if policy.is_float and policy.dtype in _FLOATS else None
        )
        arg = next((i for i, p in pointers.items() if region.addr <= p < region.addr + region.size), None)
        why = (order_reasons or {}).get(arg) if arg is not None else None
        order = (
            f"order-dependent ({why[0]}): mneme nondeterminism -rdb {rec.path} -rid {instance.dynamic_hash} "
            "derives a bound from replays"
            if why
            else ""
        )
        if div is None:
            if order:
                out[region.addr] = order
            continue
        accept = div.accepting_policy()
        if accept is not None and accept.threshold > ROUNDING_BOUND * (1 if accept.relative else _scale(expected, div)):
            how = "; too far off for a rounding difference: the variant computes something else"
        elif accept is None:
            how = "; no tolerance accepts a NaN against a number"
        else:
            how = f"; to accept it: {annotate_command(str(rec.path), instance.dynamic_hash, accept, arg=arg, region=region.addr)}"
        out[region.addr] = f"{div.describe()}{how}" + (f"; {order}" if order else "")
    return out


def _scale(expected: bytes, div: FloatDivergence) -> float:
    """The largest finite magnitude of the expected values (what an absolute error is small against)."""
    size = np.dtype(_FLOATS[div.dtype]).itemsize
    values = np.frombuffer(expected, np.uint8, len(expected) // size * size).view(_FLOATS[div.dtype]).astype(np.float64)
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size else 0.0


def failed_regions(executor, reports, pointers: dict[int, int]) -> dict[int, str]:
    """`explain` for an executor's failed verification (`reports`: one per epilogue region, in order)."""
    ex = executor
    failed = [r for r, report in zip(ex.epilogue.regions, reports) if not report.ok]
    if not failed:
        return {}
    if not ex._expected_host:
        ex._expected_host = {r.addr: ex.epilogue.read_region(r.addr) for r in ex.epilogue.regions}
    return explain(
        ex.rec,
        ex.instance,
        pointers,
        failed,
        lambda r: ex._expected_host[r.addr],
        lambda r: ex.device.read(r.addr, r.size),
        order_reasons(ex),
    )


def order_reasons(executor) -> dict[int, list[str]]:
    """Parameter index -> why its memory follows the threads' order, from the recorded configuration's
    optimized IR (read once per executor; none without IR)."""
    from mneme.core.errors import MnemeError
    from mneme.core.order_dependence import order_dependent_params

    ex = executor
    if ex._order is None:
        ex._order = {}
        if ex.rec.llvm_files:
            try:
                text = ex.builder.optimized_ir(ex.default_config())
                ex._order = order_dependent_params(text, ex.rec.kernel_name)
            except MnemeError as exc:
                logging.getLogger(__name__).debug("no order analysis of %s: %s", ex.rec.kernel_name, exc)
    return ex._order
