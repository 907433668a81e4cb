"""Verification: compare an expected epilogue with actual device contents, region by region.

Regions are compared in windows: equal windows take one memcmp; only windows that differ
are decoded into their dtype. NaN is handled explicitly: NaN against a number is always a
mismatch; NaN against NaN at the same element matches only under a typed float policy
(exact policies compare bytes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np

from mneme.core.snapshot.diff import changed_runs, equal
from mneme.core.snapshot.format import EXACT, RegionPolicy

WINDOW = 16 << 20  # bytes compared at a time
_TYPED_STEP = 1 << 20  # bytes decoded into floats at a time (keeps temporaries in cache)

_NUMPY = {
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "f16": np.float16,
    "bf16": np.uint16,
    "f32": np.float32,
    "f64": np.float64,
}


@attrs.frozen
class RegionReport:
    """How one region's actual bytes compare with the expected ones.

    `error` is the statistic the policy checks against its threshold (the max element error
    for norm "none", else the norm of the error vector, relative when the policy is).
    `violations` counts elements beyond tolerance (bytes, for exact policies).
    """

    addr: int
    size: int
    policy: RegionPolicy
    ok: bool
    differing_bytes: int = 0
    first_offset: int | None = None
    max_abs: float = 0.0
    max_rel: float = 0.0
    error: float = 0.0
    violations: int = 0
    nan_mismatch: int = 0
    problem: str = ""  # "", or why the region could not be compared (missing, size)

    def describe(self) -> str:
        if self.ok:
            return f"region 0x{self.addr:x}: ok"
        if self.problem:
            return f"region 0x{self.addr:x} ({self.size} B): {self.problem}"
        parts = [f"region 0x{self.addr:x} ({self.size} B, {self.policy}): {self.differing_bytes} bytes differ"]
        if self.first_offset is not None:
            parts.append(f"first at +{self.first_offset}")
        if not self.policy.exact:
            parts.append(
                f"max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}, "
                f"{self.policy.norm} error {self.error:.3g} (threshold {self.policy.threshold:g}"
                f"{', relative' if self.policy.relative else ''})"
            )
        if self.nan_mismatch:
            parts.append(f"{self.nan_mismatch} NaN mismatches")
        return ", ".join(parts)


@attrs.frozen
class GlobalReport:
    name: str
    size: int
    ok: bool
    differing_bytes: int = 0
    first_offset: int | None = None
    problem: str = ""

    def describe(self) -> str:
        if self.ok:
            return f"global {self.name}: ok"
        if self.problem:
            return f"global {self.name}: {self.problem}"
        return f"global {self.name} ({self.size} B): {self.differing_bytes} bytes differ, first at +{self.first_offset}"


@attrs.frozen
class CompareReport:
    regions: list[RegionReport]
    globals: list[GlobalReport] = attrs.Factory(list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.regions) and all(g.ok for g in self.globals)

    def __bool__(self) -> bool:
        return self.ok

    @property
    def mismatches(self) -> list[str]:
        """One line per region or global that does not match."""
        return [r.describe() for r in (*self.regions, *self.globals) if not r.ok]


def compare(
    expected,
    actual,
    *,
    actual_globals: Mapping[str, bytes] | None = None,
    policies: Mapping[int, RegionPolicy] | None = None,
    window: int = WINDOW,
) -> CompareReport:
    """Compare every region and global of the `expected` snapshot with `actual`.

    Parameters
    ----------
    expected : a `Snapshot` (usually the recorded epilogue)
    actual : a `Snapshot`, or a mapping from region address to bytes-like contents
    actual_globals : device globals by name (default: `actual.globals` when it is a Snapshot)
    policies : per-address overrides of the recorded verification policies
    """
    window = max(8, window // 8 * 8)
    reports = []
    for info in expected.regions:
        policy = (policies or {}).get(info.addr, info.policy)
        pieces = expected.iter_region(info.addr, chunk_size=window, reuse=True)
        reports.append(_compare_region(info.addr, info.size, policy, pieces, actual, window))
    if actual_globals is None and hasattr(actual, "globals") and not isinstance(actual, Mapping):
        actual_globals = actual.globals
    globals_ = [_compare_global(name, data, actual_globals) for name, data in sorted(expected.globals.items())]
    return CompareReport(reports, globals_)


def compare_buffers(
    expected, actual, policy: RegionPolicy = EXACT, *, addr: int = 0, window: int = WINDOW
) -> RegionReport:
    """Compare two in-memory buffers under `policy` (the engine `compare` uses per region)."""
    exp = memoryview(expected).cast("B")
    window = max(8, window // 8 * 8)
    pieces = (exp[o : o + window] for o in range(0, len(exp), window))
    return _compare_region(addr, len(exp), policy, pieces, {addr: actual}, window)


def changed_regions(prologue, epilogue) -> list[tuple[int, int]]:
    """(addr, size) ranges the kernel wrote: where the epilogue differs from the prologue.

    Diff regions answer from their run tables (cheap); other regions are compared in
    1 KiB steps (`diff.GRANULARITY`); regions absent from the prologue count whole. Ranges are
    sorted, merged, and a superset of the bytes that changed.
    """
    ranges: list[tuple[int, int]] = []
    for info in epilogue.regions:
        runs = epilogue.changed_runs(info.addr)
        if runs is None:
            if info.addr not in prologue or prologue.region(info.addr).size != info.size:
                runs = [(0, info.size)] if info.size else []
            else:
                runs, offset = [], 0
                for piece in epilogue.iter_region(info.addr, chunk_size=WINDOW, reuse=True):
                    base = prologue.read_range(info.addr, offset, len(piece))
                    if not equal(piece, base):
                        runs.extend((offset + o, n) for o, n in changed_runs(base, piece))
                    offset += len(piece)
        ranges.extend((info.addr + o, n) for o, n in runs)
    merged: list[list[int]] = []
    for addr, size in sorted(ranges):
        if merged and addr <= merged[-1][0] + merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], addr + size - merged[-1][0])
        else:
            merged.append([addr, size])
    return [(a, n) for a, n in merged]


# -- the engine --------------------------------------------------------------------------------


def _actual_pieces(actual, addr: int, size: int, window: int):
    """An object with .take(n) returning the next n actual bytes, or a problem string."""
    if isinstance(actual, Mapping):
        if addr not in actual:
            return None, "missing from the actual state"
        data = memoryview(actual[addr]).cast("B")
        if len(data) != size:
            return None, f"actual region has {len(data)} bytes, expected {size}"
        return _Cursor(lambda off, n: data[off : off + n]), ""
    if addr not in actual:
        return None, "missing from the actual snapshot"
    if actual.region(addr).size != size:
        return None, f"actual region has {actual.region(addr).size} bytes, expected {size}"
    buffer = bytearray()

    def read(offset: int, n: int):
        nonlocal buffer
        if n > len(buffer):
            buffer = bytearray(n)  # pieces are at most max(window, the expected's chunk size)
        view = memoryview(buffer)[:n]
        actual.read_range_into(addr, offset, view)
        return view

    return _Cursor(read), ""


class _Cursor:
    def __init__(self, read):
        self.read, self.offset = read, 0

    def take(self, n: int):
        piece = self.read(self.offset, n)
        self.offset += n
        return piece


def _compare_region(addr, size, policy, pieces, actual, window) -> RegionReport:
    cursor, problem = _actual_pieces(actual, addr, size, window)
    if cursor is None:
        return RegionReport(addr, size, policy, ok=False, problem=problem)
    acc = _Accumulator(policy)
    offset = 0
    for piece in pieces:
        act = cursor.take(len(piece))
        acc.update(piece, act, offset)
        offset += len(piece)
    return acc.report(addr, size)


class _Accumulator:
    def __init__(self, policy: RegionPolicy):
        self.policy = policy
        self.typed = not policy.exact
        self.need_ref = policy.relative and policy.norm != "none"
        self.differing = 0
        self.first: int | None = None
        self.violations = 0
        self.nan_mismatch = 0
        self.max_abs = self.max_rel = 0.0
        self.sum_abs = self.sum_sq = 0.0  # error norms
        self.ref_max = self.ref_sum = self.ref_sq = 0.0  # expected-value norms (relative norms)

    def update(self, exp, act, offset: int) -> None:
        if equal(exp, act):
            if self.need_ref:
                self._reference(exp)
            return
        e8, a8 = np.frombuffer(exp, np.uint8), np.frombuffer(act, np.uint8)
        ne = e8 != a8
        count = int(np.count_nonzero(ne))
        self.differing += count
        if self.first is None:
            self.first = offset + int(np.argmax(ne))
        if not self.typed:
            self.violations += count
            return
        itemsize = self.policy.itemsize
        whole = len(e8) // itemsize * itemsize
        if whole < len(e8) and not np.array_equal(e8[whole:], a8[whole:]):
            self.violations += 1  # a partial trailing element must match exactly
        if whole:
            self._typed(e8[:whole], a8[:whole])

    def _values(self, raw: np.ndarray) -> np.ndarray:
        """Elements as floats: float32 for f16/bf16/f32 (no copy for f32), float64 otherwise."""
        dtype = self.policy.dtype
        if dtype == "bf16":
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        if dtype == "f16":
            return raw.view(np.float16).astype(np.float32)
        if dtype in ("f32", "f64"):
            return raw.view(_NUMPY[dtype])
        return raw.view(_NUMPY[dtype]).astype(np.float64)

    def _int_error(self, e8: np.ndarray, a8: np.ndarray) -> np.ndarray:
        """|a - e| exactly for integer dtypes (no float rounding to zero), as float64 magnitudes."""
        dtype = self.policy.dtype
        width = self.policy.itemsize * 8
        e, a = e8.view(_NUMPY[dtype]), a8.view(_NUMPY[dtype])
        if width < 64:
            return np.abs(a.astype(np.int64) - e.astype(np.int64)).astype(np.float64)
        ue, ua = e.view(np.uint64), a.view(np.uint64)
        if dtype == "i64":  # order-preserving map to unsigned
            flip = np.uint64(1 << 63)
            ue, ua = ue ^ flip, ua ^ flip
        return np.where(ua >= ue, ua - ue, ue - ua).astype(np.float64)

    def _typed(self, e8: np.ndarray, a8: np.ndarray) -> None:
        step = _TYPED_STEP // self.policy.itemsize * self.policy.itemsize
        for start in range(0, len(e8), step):
            self._typed_part(e8[start : start + step], a8[start : start + step])

    def _typed_part(self, e8: np.ndarray, a8: np.ndarray) -> None:
        policy = self.policy
        e = self._values(e8)
        if policy.is_float:
            a = self._values(a8)
            with np.errstate(invalid="ignore", over="ignore"):
                err = np.abs(a - e)
            odd = np.isnan(err)  # a NaN on either side, or inf - inf
            if odd.any():
                e_nan, a_nan = np.isnan(e[odd]), np.isnan(a[odd])
                self.nan_mismatch += int(np.count_nonzero(e_nan ^ a_nan))
                err[odd] = 0.0  # NaN pairs and equal infinities match; NaN-vs-number is counted above
            ref = np.abs(e)
            if odd.any():
                ref[odd] = 0.0
        else:
            err = self._int_error(e8, a8)
            ref = np.abs(e)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = err / ref  # x/0 -> inf: any error on a zero is infinitely relative
        rel[err == 0] = 0.0
        if err.size:
            self.max_abs = max(self.max_abs, float(err.max()))
            self.max_rel = max(self.max_rel, float(rel.max()))
        if policy.norm == "none":
            limit = rel if policy.relative else err
            self.violations += int(np.count_nonzero(~(limit <= policy.threshold)))
        elif policy.norm == "L1":
            self.sum_abs += float(err.sum(dtype=np.float64))
        elif policy.norm == "L2":
            err64 = err.astype(np.float64)
            self.sum_sq += float(np.dot(err64, err64))
        if self.need_ref:
            self._accumulate_ref(ref)

    def _reference(self, exp) -> None:
        itemsize = self.policy.itemsize
        raw = np.frombuffer(exp, np.uint8)
        raw = raw[: len(raw) // itemsize * itemsize]
        ref = np.abs(self._values(raw))
        ref[np.isnan(ref)] = 0.0
        self._accumulate_ref(ref)

    def _accumulate_ref(self, ref: np.ndarray) -> None:
        if not ref.size:
            return
        norm = self.policy.norm
        if norm == "Linf":
            self.ref_max = max(self.ref_max, float(ref.max()))
        elif norm == "L1":
            self.ref_sum += float(ref.sum(dtype=np.float64))
        elif norm == "L2":
            ref64 = ref.astype(np.float64)
            self.ref_sq += float(np.dot(ref64, ref64))

    def report(self, addr: int, size: int) -> RegionReport:
        policy = self.policy
        if not self.typed:
            return RegionReport(
                addr,
                size,
                policy,
                ok=self.differing == 0,
                differing_bytes=self.differing,
                first_offset=self.first,
                violations=self.violations,
            )
        norm = policy.norm
        if norm == "none":
            error = self.max_rel if policy.relative else self.max_abs
            within = self.violations == 0
        else:
            value, ref = {
                "L1": (self.sum_abs, self.ref_sum),
                "L2": (math.sqrt(self.sum_sq), math.sqrt(self.ref_sq)),
                "Linf": (self.max_abs, self.ref_max),
            }[norm]
            if policy.relative:
                value = 0.0 if value == 0 else (value / ref if ref else math.inf)
            error = value
            within = error <= policy.threshold and self.violations == 0
        ok = within and self.nan_mismatch == 0
        return RegionReport(
            addr,
            size,
            policy,
            ok=ok,
            differing_bytes=self.differing,
            first_offset=self.first,
            max_abs=self.max_abs,
            max_rel=self.max_rel,
            error=error,
            violations=self.violations,
            nan_mismatch=self.nan_mismatch,
        )


def _compare_global(name: str, data: bytes, actual_globals) -> GlobalReport:
    if actual_globals is None or name not in actual_globals:
        return GlobalReport(name, len(data), ok=False, problem="missing from the actual state")
    other = bytes(actual_globals[name])
    if len(other) != len(data):
        return GlobalReport(name, len(data), ok=False, problem=f"actual has {len(other)} bytes, expected {len(data)}")
    if other == data:
        return GlobalReport(name, len(data), ok=True)
    ne = np.frombuffer(data, np.uint8) != np.frombuffer(other, np.uint8)
    return GlobalReport(
        name, len(data), ok=False, differing_bytes=int(np.count_nonzero(ne)), first_offset=int(np.argmax(ne))
    )
