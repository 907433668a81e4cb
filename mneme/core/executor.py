"""One experiment: build a variant, load it, restore the recorded state, run, verify, time.

`BaseExecutor` is bound to one recording, one kernel instance and one device. `open()`
rebuilds the recorded device state at the recorded virtual addresses (prologue regions
streamed in) and keeps the epilogue for verification; `execute(config)` then runs one
experiment and returns an `ExperimentResult` (it never raises for a failed experiment:
compile errors, faults and verification failures are recorded in the result).

`mneme.core.kernel_builder.KernelBuilder` is the CPU half (link once, then `mneme.core.build.compile`
with a build cache in process memory); it needs no device, so compile-ahead processes
(`mneme.core.workers`) use it alone. The worker processes' servers are in `mneme.core.worker_servers`.
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import inspect
import logging
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from mneme.core import divergence, events, kernel_clock
from mneme.core.backend import Backend, Device, DeviceBinary, LoadedKernel, Resources, check_cache_state
from mneme.core.errors import ExperimentError, IRError, MissingGlobalError, MnemeError, UnsupportedError, UsageError
from mneme.core.ir_override import IROverride
from mneme.core.kernel_builder import MODES, KernelBuilder, resolve_backend
from mneme.core.recording import load_recording
from mneme.core.snapshot import Snapshot, compare_buffers
from mneme.core.types import ExperimentConfiguration, ExperimentResult, build_fields, canonical_json

log = logging.getLogger(__name__)


def utc_now() -> str:
    """The current time as UTC ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


# -- the experiment ---------------------------------------------------------------------------


class BaseExecutor:
    """One recording, one kernel instance, one device: runs experiments on the recorded state.

    Parameters
    ----------
    record_db : path of a recording database (or its folder), or a RecordedExecution
    record_id : the instance's dynamic hash; inferred when the recording has one instance
    iterations : timed runs per experiment
    device_id : device index of the backend
    backend : backend name or instance; default: the recorded one (host when that is not usable)
    mode : "ir" (compile the recorded IR), "ptx" or "cubin" (the application's own images)
    warmup : timed runs before the measured ones, reported in `result.warmup_time`
    cache : the state each timed run starts from (`mneme.core.backend.CACHE_STATES`): "flushed"
        (default), "warm", or "primed" (like for like with an application's repeated launches)
    timer : what times the runs, one of the device's `timers` ("auto": the backend's best that
        works here; a GPU backend's may read the kernel's own timestamps or device events
        events); `result.timer` names the one that measured
    """

    def __init__(
        self,
        record_db,
        record_id: str | None = None,
        iterations: int = 3,
        device_id: int = 0,
        backend: str | Backend | None = None,
        mode: str = "ir",
        warmup: int = 1,
        cache: str = "flushed",
        timer: str = "auto",
    ):
        if iterations < 1:
            raise UsageError(f"iterations must be >= 1, got {iterations}")
        if mode not in MODES:
            raise UsageError(f"unknown replay mode {mode!r}; use one of {', '.join(MODES)}")
        self.record_db = record_db
        self.record_id = record_id
        self.iterations = iterations
        self.device_id = device_id
        self.mode = mode
        self.warmup = max(0, warmup)
        check_cache_state(cache)
        self.cache = cache
        self.timer = timer
        self._backend_choice = backend
        self.rec = None
        self.instance = None
        self.backend: Backend | None = None
        self.device: Device | None = None
        self.builder: KernelBuilder | None = None
        self.prologue = None
        self.epilogue = None
        self.args = b""
        self.arch = ""
        self.written: list[int] = []  # addresses of the regions the kernel writes
        self._pristine: dict[int, bytes] = {}  # prologue bytes of the written regions
        self._dirty = False
        self._restore_all = False
        self._pristine_dev: dict[int, Any] = {}  # device copies of the written regions' prologue bytes
        self._expected_dev: dict[int, Any] = {}  # device copies of the epilogue regions
        self._expected_host: dict[int, bytes] = {}  # decoded epilogue regions (host-side compare)
        self._loaded: collections.OrderedDict[str, LoadedKernel] = collections.OrderedDict()
        self._region_names: dict[int, str] = {}
        self._order: dict[int, list[str]] | None = None  # divergence.order_reasons, read on the first failure

    # -- lifetime -------------------------------------------------------------------------
    def __enter__(self) -> BaseExecutor:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> BaseExecutor:
        """Load the recording, open the device, reserve the recorded range, restore the prologue."""
        if self.device is not None:
            return self
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        self.rec = load_recording(self.record_db)
        self.instance = self.rec.select(self.record_id)
        self.backend = resolve_backend(self.rec, self._backend_choice)
        self.prologue = Snapshot.open(self.instance.prologue_path)
        self.epilogue = Snapshot.open(self.instance.epilogue_path, base=self.prologue)
        self.instance.check_prologue(self.prologue)
        self.args = bytes(self.prologue.args)
        self.device = self.backend.open_device(self.device_id)
        self.device.check_timer(self.timer)  # a timer the device lacks is a usage error, not a failed experiment
        self.device.check_launch_attributes(self.instance.launch_attributes, self.rec.kernel_name)
        self.arch = self.backend.arch(self.device_id)
        self.builder = KernelBuilder(self.rec, self.args, self.backend, self.arch, self.mode)
        if self.mode != "ir":
            self.builder.recorded_binary(self.mode)  # a missing image is a usage error, not a failed experiment
        if self.rec.va_size:
            self.device.reserve(self.rec.va_addr, self.rec.va_size)
        for region in self.prologue.regions:
            self.device.map(region.addr, region.size)
        self.restore()
        prologue_addrs = {r.addr for r in self.prologue.regions}
        for region in self.epilogue.regions:
            if region.addr not in prologue_addrs:  # allocated during the launch: map it too
                self.device.map(region.addr, region.size)
        self.written = written_regions(self.prologue, self.epilogue)
        if not self._open_device_copies():
            self._pristine = {addr: self.prologue.read_region(addr) for addr in self.written if addr in prologue_addrs}
        self._region_names = region_names(self.rec, self.args, self.prologue.regions)
        log.debug(
            "opened %s instance %s on %s: %d regions, %d written",
            self.rec.path,
            self.instance.dynamic_hash,
            self.device_label,
            len(self.prologue.regions),
            len(self.written),
        )

    def _open_device_copies(self) -> bool:
        """Keep pristine and expected bytes on the device when it can (resets device to device, compare there).

        The pristine copies come from the just-restored regions (device to device) and the
        expected bytes decode from the epilogue straight to the device: no region passes
        through host memory whole. Returns False when the host must keep them.
        """
        device = self.device
        if not all(hasattr(device, name) for name in ("alloc", "copy", "write_snapshot_regions")):
            return False
        prologue_addrs = {r.addr for r in self.prologue.regions}
        try:
            for addr in self.written:
                if addr in prologue_addrs:
                    buffer = device.alloc(self.prologue.region(addr).size)
                    self._pristine_dev[addr] = buffer
                    device.copy(buffer.addr, addr, buffer.size)  # nothing has run since restore()
            if hasattr(device, "compare_regions"):
                for region in self.epilogue.regions:
                    self._expected_dev[region.addr] = device.alloc(region.size)
                device.write_snapshot_regions(self.epilogue, [(a, b.addr) for a, b in self._expected_dev.items()])
            device.synchronize()
        except MnemeError as exc:  # e.g. out of device memory: fall back to host copies
            log.warning(
                "keeping the recorded state on %s failed (%s); resetting and verifying from the host",
                self.device_label,
                exc,
            )
            for buffer in [*self._pristine_dev.values(), *self._expected_dev.values()]:
                try:
                    device.free(buffer)
                except MnemeError as free_exc:
                    log.debug("freeing a device copy failed: %s", free_exc)
            self._pristine_dev, self._expected_dev = {}, {}
            return False
        return True

    def close(self) -> None:
        self._pristine_dev, self._expected_dev = {}, {}  # owned by the device, freed with it
        for kernel in self._loaded.values():
            try:
                kernel.close()
            except MnemeError as exc:  # closing must release everything else too
                log.debug("unloading a kernel failed: %s", exc)
        self._loaded.clear()
        if self.device is not None:
            self.device.close()
            self.device = None

    # -- information --------------------------------------------------------------------------
    @property
    def device_label(self) -> str:
        if self.device is None:
            return ""
        info = self.device.info
        return f"{info.backend}:{info.index} {info.name}".strip()

    def default_config(self) -> ExperimentConfiguration:
        """The recorded launch as an ExperimentConfiguration."""
        self._check_open()
        inst = self.instance
        return ExperimentConfiguration(grid=inst.grid_dim, block=inst.block_dim, shared_mem=int(inst.shared_mem))

    def link_ir(self, config: ExperimentConfiguration | None = None):
        """The linked root module (cached per process); clone before mutating."""
        self._check_open()
        return self.builder.link_ir(config)

    def build(self, config: ExperimentConfiguration) -> DeviceBinary:
        self._check_open()
        return self.builder.build(config)

    def set_ir(self, override: IROverride | None) -> None:
        """Compile `override` (`mneme.core.ir_override.IROverride`) instead of the recording's IR from now
        on; None goes back to the recording's. A module that does not parse, verify or keep the kernel's
        signature fails each experiment that builds from it (a "compile" failure naming it)."""
        self._check_open()
        if override is not None and self.mode != "ir":
            raise UsageError(f"replacement IR needs --mode ir; this executor replays the application's {self.mode}")
        self.builder.set_ir(override)

    def _check_open(self) -> None:
        if self.device is None:
            raise MnemeError("the executor is not open; use it as a context manager or call open()")

    # -- one experiment ----------------------------------------------------------------------
    def execute(
        self,
        config: ExperimentConfiguration,
        binary: DeviceBinary | None = None,
        before_run: Callable[[], None] | None = None,
    ) -> ExperimentResult:
        """Run one experiment. `binary` is a prebuilt variant (compile-ahead); otherwise it is built here.

        `before_run` is called once the binary is built, before the device is used (worker pools
        use it to wait for exclusive use of the device).
        """
        self._check_open()
        events.emit("mneme_experiment_started", recording=self.rec, instance=self.instance, config=config)
        result = ExperimentResult(
            start_time=utc_now(), gpu_id=self.device_id, device=self.device_label, backend=self.backend.name
        )
        try:
            self._execute(config, binary, result, before_run)
        except ExperimentError as exc:
            if exc.kind == "fault":  # e.g. a timed run faulted after verification failed: the fault decides
                result.error_kind = ""  # what happens next (worker pools restart the process on it)
            fail_result(result, exc.kind, str(exc))
        except (IRError, UnsupportedError) as exc:
            fail_result(result, "compile", str(exc))
        except MnemeError as exc:
            fail_result(result, "error", str(exc))
        if result.failed and self._dirty and result.error_kind not in ("compile", "invalid", "load"):
            self._restore_all = True
        result.end_time = utc_now()
        events.emit(
            "mneme_experiment_finished", recording=self.rec, instance=self.instance, config=config, result=result
        )
        return result

    def _execute(
        self,
        config: ExperimentConfiguration,
        binary: DeviceBinary | None,
        result: ExperimentResult,
        before_run: Callable[[], None] | None,
    ) -> None:
        if not config.is_valid():
            raise ExperimentError(
                f"invalid configuration for kernel {self.rec.kernel_name!r}: block {config.block} "
                f"({config.block.size} threads) with launch bounds max_threads={config.max_threads}",
                kind="invalid",
            )
        if binary is None:
            try:
                binary = self.builder.build(config)
            except MnemeError as exc:
                raise ExperimentError(self.builder.build_failure(exc), kind="compile") from exc
        _record_build(result, binary)
        if before_run is not None:
            before_run()
        kernel = self._load(binary, result, config)
        _record_resources(result, kernel.resources)
        self._restore_globals(kernel)
        if self._restore_all:  # a faulting or wrong variant may have written anywhere
            self.restore()
            self._restore_all = False
        elif self._dirty:
            self.reset()
        self._dirty = True
        try:
            with kernel_clock.running():
                self.device.launch(kernel, config.grid, config.block, config.shared_mem, self.args)
        except ExperimentError:
            raise
        except MnemeError as exc:
            raise ExperimentError(f"launching kernel {self.rec.kernel_name!r} failed: {exc}", kind="launch") from exc
        result.executed = True
        self._verify(kernel, result)
        with kernel_clock.running(self.warmup + self.iterations + 1):  # +1: a primed cache's untimed run
            times = self.device.time(
                kernel,
                config.grid,
                config.block,
                config.shared_mem,
                self.args,
                self.warmup + self.iterations,
                before_each=self.reset,
                cache=self.cache,
                timer=self.timer,
            )
        result.timer = self.device.timer_used
        result.warmup_time = list(times[: self.warmup])
        result.exec_time = list(times[self.warmup :])

    def _load(self, binary: DeviceBinary, result: ExperimentResult, config: ExperimentConfiguration) -> LoadedKernel:
        takes_config = "config" in inspect.signature(self.device.load).parameters  # PTX JIT options
        key = hashlib.sha256(binary.data).hexdigest()
        if takes_config:  # the device's loader reads the configuration (a JIT's options)
            key += "|" + canonical_json(build_fields(config))
        kernel = self._loaded.get(key)
        if kernel is not None:
            self._loaded.move_to_end(key)
            return kernel
        start = time.perf_counter()
        try:
            kernel = self.device.load(binary, config=config) if takes_config else self.device.load(binary)
        except ExperimentError:
            raise
        except MnemeError as exc:
            raise ExperimentError(f"loading kernel {self.rec.kernel_name!r} failed: {exc}", kind="load") from exc
        result.load_time = time.perf_counter() - start
        kernel.launch_attributes = self.instance.launch_attributes  # cooperative, clusters: as recorded
        self._loaded[key] = kernel
        while len(self._loaded) > 8:
            _, old = self._loaded.popitem(last=False)
            old.close()
        return kernel

    def _restore_globals(self, kernel: LoadedKernel) -> None:
        # A global the application registered that this variant's module does not define (pruned, or
        # never emitted by the compiler that built it, e.g. libcu++'s piecewise_construct) holds nothing
        # the kernel reads: it is skipped, and left out of the verification (absent_globals).
        absent = []
        for name, data in self.prologue.globals.items():
            try:
                self.device.write_global(kernel, name, data)
            except MissingGlobalError:
                absent.append(name)
        if absent and getattr(kernel, "absent_globals", None) is None:
            log.info(
                "kernel %s: %d recorded device global(s) not in this variant's module, not restored: %s",
                self.rec.kernel_name,
                len(absent),
                ", ".join(sorted(absent)),
            )
        kernel.absent_globals = frozenset(absent)

    def restore(self) -> None:
        """Write every prologue region back to the device, streaming it from the snapshot.

        A device with `write_snapshot_regions` (a GPU backend's) decodes them straight into its pinned
        staging buffers, every region in one pass; others get each region in pieces through
        `write`.
        """
        write_all = getattr(self.device, "write_snapshot_regions", None)
        if write_all is not None:
            write_all(self.prologue)
            return
        for region in self.prologue.regions:
            offset = 0
            for chunk in self.prologue.iter_region(region.addr):
                self.device.write(region.addr + offset, chunk)
                offset += len(chunk)

    def reset(self) -> None:
        """Restore the regions the kernel writes to their recorded prologue contents."""
        if self._pristine_dev:
            for addr, buffer in self._pristine_dev.items():
                self.device.copy(addr, buffer.addr, buffer.size)
            return
        for addr, data in self._pristine.items():
            self.device.write(addr, data)

    def _verify(self, kernel: LoadedKernel, result: ExperimentResult) -> None:
        if self._expected_dev:
            try:
                self._verify_on_device(kernel, result)
                return
            except UnsupportedError as exc:  # a policy the device compare cannot apply
                log.debug("comparing on the host: %s", exc)
        if not self._expected_host:  # decoded once: decompressing the epilogue per experiment costs more than a run
            self._expected_host = {r.addr: self.epilogue.read_region(r.addr) for r in self.epilogue.regions}
        reports = [
            compare_buffers(self._expected_host[r.addr], self.device.read(r.addr, r.size), r.policy, addr=r.addr)
            for r in self.epilogue.regions
        ]
        lines = describe_mismatches(_Report(reports), self._region_names, self._divergence(reports))
        self._conclude_verification(kernel, result, lines)

    def _divergence(self, reports) -> dict[int, str]:
        """How far the failed regions are off as floats, why where their order is the threads' (divergence)."""
        return divergence.failed_regions(self, reports, pointer_args(self.rec, self.args, self.epilogue.regions))

    def _conclude_verification(self, kernel: LoadedKernel, result: ExperimentResult, lines: list[str]) -> None:
        """Add the device globals' comparison to the regions' and record the verdict."""
        absent = getattr(kernel, "absent_globals", frozenset())
        for name, data in self.epilogue.globals.items():
            if name in absent:
                continue
            if self.device.read_global(kernel, name, len(data)) != data:
                lines.append(f"global {name} differs")
        result.verified = not lines
        if lines:
            result.mismatches = lines
            fail_result(
                result,
                "verify",
                f"kernel {self.rec.kernel_name!r} did not reproduce the recorded epilogue: " + "; ".join(lines[:4]),
            )

    def _verify_on_device(self, kernel: LoadedKernel, result: ExperimentResult) -> None:
        requests = [
            _CompareRequest(self._expected_dev[r.addr].addr, r.addr, r.size, None if r.policy.exact else r.policy)
            for r in self.epilogue.regions
        ]
        diffs = self.device.compare_regions(requests)
        lines = describe_mismatches(_Report(diffs), self._region_names, self._divergence(diffs))
        self._conclude_verification(kernel, result, lines)

    def optimized_ir(self, config: ExperimentConfiguration) -> str:
        self._check_open()
        return self.builder.optimized_ir(config)

    def recorded_binary(self) -> DeviceBinary | None:
        """The application's own machine code (else its PTX) for a speed baseline; None when there is none."""
        self._check_open()
        return self.builder.recorded_binary("cubin", required=False) or self.builder.recorded_binary(
            "ptx", required=False
        )


@attrs.frozen
class _CompareRequest:
    """One region for a device-side compare: expected bytes at `expected`, the kernel's at `actual`."""

    expected: int
    actual: int
    size: int
    policy: Any = None


@attrs.frozen
class _Report:
    regions: list


def fail_result(result: ExperimentResult, kind: str, message: str) -> None:
    """Mark `result` failed; the first failure's kind and message are the ones it keeps."""
    result.failed = True
    if not result.error_kind:
        result.error_kind = kind
        result.error = message
    log.info("experiment failed (%s): %s", kind, message)


def _record_build(result: ExperimentResult, binary: DeviceBinary) -> None:
    stages = binary.stage_times or {}
    result.preprocess_ir_time = float(stages.get("preprocess", 0.0))
    result.opt_time = float(stages.get("optimize", 0.0))
    # Other lowering stages (retargeting, assembling, linking) count as code generation.
    result.codegen_time = sum(float(v) for k, v in stages.items() if k not in ("preprocess", "optimize", "cache"))
    result.obj_size = len(binary.data)
    result.variant_hash = binary.variant_hash
    result.code_hash = hashlib.sha256(binary.data).hexdigest()


def _record_resources(result: ExperimentResult, resources: Resources) -> None:
    result.reg_usage = resources.registers
    result.local_mem_usage = resources.local_mem
    result.const_mem_usage = resources.const_mem
    result.shared_mem_usage = resources.shared_mem
    result.spill_stores = resources.spill_stores
    result.spill_loads = resources.spill_loads
    result.assembler = resources.assembler


# -- region bookkeeping -------------------------------------------------------------------------


def written_regions(prologue, epilogue) -> list[int]:
    """Addresses of the regions whose epilogue contents differ from the prologue (or that are new)."""
    before = {r.addr: r for r in prologue.regions}
    written = []
    for region in epilogue.regions:
        base = before.get(region.addr)
        if base is None or base.size != region.size:
            written.append(region.addr)
            continue
        runs = epilogue.changed_runs(region.addr) if hasattr(epilogue, "changed_runs") else None
        if runs is not None:  # a diff region: its run table says it, without decoding either side
            if runs:
                written.append(region.addr)
            continue
        chunks_a = prologue.iter_region(region.addr)
        chunks_b = epilogue.iter_region(region.addr)
        if _stream_bytes(chunks_a) != _stream_bytes(chunks_b):
            written.append(region.addr)
    return written


def _stream_bytes(chunks) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def pointer_args(rec, args: bytes, regions=()) -> dict[int, int]:
    """Argument index -> pointer value of the recording's pointer arguments.

    With `regions`, an argument of unknown kind (a recording of a binary without IR) is a pointer when its
    eight bytes point into one of them."""
    values = {}
    for index, arg in enumerate(rec.args):
        if arg.size != 8 or arg.offset + 8 > len(args) or arg.kind not in ("pointer", "unknown"):
            continue
        value = struct.unpack_from("<Q", args, arg.offset)[0]
        if arg.kind == "pointer" or any(r.addr <= value < r.addr + r.size for r in regions):
            values[index] = value
    return values


def region_names(rec, args: bytes, regions) -> dict[int, str]:
    """Region address -> a readable name ("arg 3 (y)") for regions that kernel arguments point into."""
    names = {}
    pointers = pointer_args(rec, args, regions)
    for region in regions:
        for index, value in pointers.items():
            if region.addr <= value < region.addr + region.size:
                arg_name = rec.args[index].name
                names[region.addr] = f"arg {index}" + (f" ({arg_name})" if arg_name else "")
                break
    return names


def region_of_arg(rec, args: bytes, regions, index: int) -> int:
    """The address of the region argument `index` points into, or a UsageError saying why not."""
    if not 0 <= index < len(rec.args):
        raise UsageError(f"{rec.path}: kernel {rec.kernel_name!r} has {len(rec.args)} arguments; no argument {index}")
    pointers = pointer_args(rec, args, regions)
    if index not in pointers:
        raise UsageError(f"{rec.path}: argument {index} of kernel {rec.kernel_name!r} is not a pointer")
    value = pointers[index]
    for region in regions:
        if region.addr <= value < region.addr + region.size:
            return region.addr
    raise UsageError(f"{rec.path}: argument {index} points to 0x{value:x}, outside every recorded region")


def describe_mismatches(
    report, names: Mapping[int, str] | None = None, details: Mapping[int, str] | None = None
) -> list[str]:
    """One line per differing region or global: where, how many bytes, how far off (`details` by address:
    more to say of a region, e.g. its float errors)."""
    lines = []
    for region in report.regions:
        if region.ok:
            continue
        addr = getattr(region, "addr", getattr(region, "actual", None))  # RegionDiff of a device compare
        label = getattr(region, "name", None) or (f"region 0x{addr:x}" if isinstance(addr, int) else str(addr))
        if names and addr in names:
            label += f" [{names[addr]}]"
        parts = [f"{label} ({region.size} B): {region.differing_bytes} bytes differ"]
        if region.first_offset is not None and region.first_offset >= 0:
            parts.append(f"first at +{region.first_offset}")
        if getattr(region, "max_abs", None):
            parts.append(f"max abs error {region.max_abs:.3g}")
        if getattr(region, "max_rel", None):
            parts.append(f"max rel error {region.max_rel:.3g}")
        if getattr(region, "nan_mismatch", False):
            parts.append("NaN mismatch")
        if details and addr in details:
            parts.append(details[addr])
        lines.append(", ".join(parts))
    for entry in getattr(report, "globals", None) or ():
        if not getattr(entry, "ok", True):
            lines.append(entry.describe() if hasattr(entry, "describe") else f"global {entry.name} differs")
    return lines
