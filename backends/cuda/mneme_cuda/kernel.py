"""CUDA kernels: loading a cubin or PTX (with the driver JIT's options), device globals, launches."""

from __future__ import annotations

import ctypes
import logging
from typing import TYPE_CHECKING, Any

from mneme.core import kernel_clock
from mneme.core.backend import DeviceBinary, LoadedKernel, Resources
from mneme.core.errors import ExperimentError, MissingGlobalError, MnemeError, UnsupportedError
from mneme.core.launching import LaunchAttributes
from mneme_cuda.driver import CudaError, check, driver, fault

if TYPE_CHECKING:
    from mneme_cuda.device import CudaDevice

log = logging.getLogger(__name__)

JIT_CACHE_MODES = {
    "": None,
    "ca": "CU_JIT_CACHE_OPTION_CA",
    "cg": "CU_JIT_CACHE_OPTION_CG",
    "cs": "CU_JIT_CACHE_OPTION_NONE",
    "lu": "CU_JIT_CACHE_OPTION_NONE",
    "cv": "CU_JIT_CACHE_OPTION_NONE",
}

# Launch errors that say this geometry cannot launch the recorded way (cooperatively, with clusters):
# the configuration is invalid, as one with too many threads is; another geometry may launch.
_GEOMETRY_REFUSED = {
    "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE": "a cooperative launch needs every block resident at once, and this "
    "grid has more blocks than the device holds with this block size and shared memory; use fewer or smaller blocks",
    "CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES": "a block cluster of this size does not fit on one GPC with this block size "
    "and shared memory; use smaller blocks",
}


class CudaKernel(LoadedKernel):
    """One kernel of a loaded CUDA module."""

    def __init__(self, device: CudaDevice, binary: DeviceBinary, module, function):
        super().__init__(binary)
        self.device = device
        self.module = module
        self.function = function
        self._resources: Resources | None = None
        self._max_dynamic_shared = 48 << 10
        self._param_bytes: int | None = None
        self.launched = False  # a first launch may load the kernel or grow local memory: both may synchronize

    def _release(self) -> None:
        self.device._modules.discard(self)
        if self.device.context_alive and not self.device.broken:
            result = driver().cuModuleUnload(self.module)
            if result[0] != driver().CUresult.CUDA_SUCCESS:
                log.warning("cuModuleUnload of %r failed: %s", self.binary.kernel_name, result[0])

    def attribute(self, name: str) -> int:
        cu = driver()
        attr = getattr(cu.CUfunction_attribute, name)
        return int(check(cu.cuFuncGetAttribute(attr, self.function), f"cuFuncGetAttribute {name}"))

    @property
    def resources(self) -> Resources:
        """Registers, local, constant and static shared memory, max threads per block (from the driver)."""
        self.check_open()
        if self._resources is None:
            base = self.binary.resources
            self._resources = Resources(
                registers=self.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
                local_mem=self.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
                const_mem=self.attribute("CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES"),
                shared_mem=self.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
                spill_stores=base.spill_stores,
                spill_loads=base.spill_loads,
                max_threads_per_block=self.attribute("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            )
        return self._resources

    def occupancy(self, block_threads: int, shared_mem: int = 0) -> float:
        """Active warps per multiprocessor over the maximum, for this block size and dynamic shared memory."""
        cu = driver()
        blocks = check(
            cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, block_threads, shared_mem),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
        warps = blocks * -(-block_threads // 32)
        return warps / (self.device.max_threads_per_sm // 32)

    def param_layout(self) -> list[tuple[int, int]]:
        """(offset, size) of each kernel parameter, from the driver."""
        cu = driver()
        layout = []
        while True:
            result = cu.cuFuncGetParamInfo(self.function, len(layout))
            if result[0] != cu.CUresult.CUDA_SUCCESS:
                return layout
            layout.append((int(result[1]), int(result[2])))

    @property
    def param_bytes(self) -> int:
        """Size of the kernel's parameter buffer (the end of its last parameter); -1 when unknown."""
        if self._param_bytes is None:
            layout = self.param_layout()
            self._param_bytes = max((o + s for o, s in layout), default=0) if layout else -1
        return self._param_bytes

    def packed_args(self, args: bytes) -> bytes:
        """`args` fitted to the parameter buffer: trailing padding dropped (the driver rejects a longer buffer)."""
        size = self.param_bytes
        if size < 0 or len(args) == size:
            return args
        if len(args) > size and not any(args[size:]):
            return args[:size]
        if size == 0 and len(args) > 0:
            return b""
        raise ExperimentError(
            f"kernel {self.binary.kernel_name!r} takes {size} bytes of parameters, the argument buffer has "
            f"{len(args)}; the recording's argument layout does not match this binary",
            kind="launch",
        )


class DeviceKernels:
    """`CudaDevice`'s kernel loading, device globals and launches (a mixin: it uses the device's stream and context)."""

    def load(self, binary: DeviceBinary, config: Any = None) -> CudaKernel:
        """Load a cubin, or JIT a PTX with options from `config` (ptxas_opt, max_registers, cache_mode)."""
        cu = self._enter()
        if binary.backend not in ("cuda", "") or binary.kind not in ("cubin", "ptx", "fatbin"):
            raise UnsupportedError(
                f"the cuda backend loads cubin, fatbin or PTX, not a {binary.backend} {binary.kind!r} "
                f"binary of kernel {binary.kernel_name!r}"
            )
        data = binary.data
        if binary.kind == "ptx" and not data.endswith(b"\0"):
            data = data + b"\0"
        options, values = self._jit_options(binary, config)
        try:
            if options:
                module = check(
                    cu.cuModuleLoadDataEx(data, len(options), options, values),
                    f"loading {binary.kind} of kernel {binary.kernel_name!r}",
                )
            else:
                module = check(cu.cuModuleLoadData(data), f"loading {binary.kind} of kernel {binary.kernel_name!r}")
        except CudaError as exc:
            raise ExperimentError(str(exc), kind="load") from exc
        try:
            function = check(
                cu.cuModuleGetFunction(module, binary.kernel_name.encode()),
                f"finding kernel {binary.kernel_name!r} in its module",
            )
        except CudaError as exc:
            cu.cuModuleUnload(module)
            raise ExperimentError(str(exc), kind="load") from exc
        kernel = CudaKernel(self, binary, module, function)
        self._modules.add(kernel)
        return kernel

    def _jit_options(self, binary: DeviceBinary, config: Any) -> tuple[list, list]:
        if binary.kind != "ptx" or config is None:
            return [], []
        cu = driver()
        options, values = [], []
        options.append(cu.CUjit_option.CU_JIT_OPTIMIZATION_LEVEL)
        values.append(int(getattr(config, "ptxas_opt", 3)))
        if getattr(config, "max_registers", 0):
            options.append(cu.CUjit_option.CU_JIT_MAX_REGISTERS)
            values.append(int(config.max_registers))
        mode = JIT_CACHE_MODES.get(getattr(config, "cache_mode", ""))
        if mode:
            options.append(cu.CUjit_option.CU_JIT_CACHE_MODE)
            values.append(getattr(cu.CUjit_cacheMode, mode))
        return options, values

    def _global(self, kernel: CudaKernel, name: str) -> tuple[int, int]:
        kernel.check_open()
        cu = self._enter()
        try:
            addr, size = check(cu.cuModuleGetGlobal(kernel.module, name.encode()), f"cuModuleGetGlobal({name!r})")
        except CudaError as exc:
            raise MissingGlobalError(
                f"device global {name!r} is not in the module of kernel {kernel.binary.kernel_name!r} "
                f"({exc.name}); was it pruned or renamed?"
            ) from exc
        return int(addr), int(size)

    def write_global(self, kernel: LoadedKernel, name: str, data: bytes) -> None:
        addr, size = self._global(kernel, name)
        if memoryview(data).nbytes != size:
            raise MnemeError(
                f"device global {name!r} of kernel {kernel.binary.kernel_name!r} has {size} bytes, "
                f"the recorded value has {memoryview(data).nbytes}"
            )
        self.write(addr, data)

    def read_global(self, kernel: LoadedKernel, name: str, size: int | None = None) -> bytes:
        addr, actual = self._global(kernel, name)
        return self.read(addr, actual if size is None else min(size, actual))

    def global_address(self, kernel: LoadedKernel, name: str) -> tuple[int, int]:
        """(device address, size) of a module global, for device-side compare of globals."""
        return self._global(kernel, name)

    def _launch_async(self, kernel: CudaKernel, grid, block, shared_mem: int, args: bytes, keep: list) -> None:
        cu = driver()
        if shared_mem > kernel._max_dynamic_shared:
            check(
                cu.cuFuncSetAttribute(
                    kernel.function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem
                ),
                "allowing more dynamic shared memory",
            )
            kernel._max_dynamic_shared = shared_mem
        extra = 0
        args = kernel.packed_args(bytes(args))
        if args:
            # Pass the packed parameter buffer as-is (CU_LAUNCH_PARAM_BUFFER_POINTER).
            buffer = ctypes.create_string_buffer(bytes(args), len(args))
            size = ctypes.c_size_t(len(args))
            table = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
            keep.extend((buffer, size, table))
            extra = ctypes.addressof(table)
        how = kernel.launch_attributes
        what = f"launching kernel {kernel.binary.kernel_name!r} with grid {grid} block {block}"
        try:
            if how.names:  # as the application launched it: cooperatively, with clusters
                check(
                    cu.cuLaunchKernelEx(
                        self._launch_config(how, grid, block, shared_mem, keep), kernel.function, None, extra
                    ),
                    f"{what} {how.describe()}",
                )
            else:
                check(
                    cu.cuLaunchKernel(
                        kernel.function,
                        grid.x,
                        grid.y,
                        grid.z,
                        block.x,
                        block.y,
                        block.z,
                        shared_mem,
                        self.stream,
                        None,
                        extra,
                    ),
                    what,
                )
            kernel.launched = True
        except CudaError as exc:
            if exc.sticky:
                self.broken = exc.name
                raise fault(exc, kernel.binary.kernel_name) from exc
            if exc.name in _GEOMETRY_REFUSED:  # this configuration cannot launch so; others may
                raise ExperimentError(f"{exc}: {_GEOMETRY_REFUSED[exc.name]}", kind="invalid") from exc
            raise ExperimentError(str(exc), kind="launch") from exc

    def _launch_config(self, how: LaunchAttributes, grid, block, shared_mem: int, keep: list):
        """cuLaunchKernelEx's configuration for a launch with attributes (`keep` holds it alive)."""
        cu = driver()
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid.x, grid.y, grid.z
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block.x, block.y, block.z
        cfg.sharedMemBytes = shared_mem
        cfg.hStream = self.stream
        attributes = []
        if how.cooperative:
            a = cu.CUlaunchAttribute()
            a.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            a.value.cooperative = 1
            attributes.append(a)
        if how.cluster is not None:
            a = cu.CUlaunchAttribute()
            a.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = how.cluster.as_tuple()
            attributes.append(a)
        cfg.attrs = attributes
        cfg.numAttrs = len(attributes)
        keep.extend((cfg, attributes))
        return cfg

    def launch(self, kernel: LoadedKernel, grid, block, shared_mem: int, args: bytes) -> None:
        kernel.check_open()
        self._enter()
        keep: list = []
        # a supervisor (kernel_clock) kills this process if the kernel never ends: the GPU cannot stop it
        with kernel_clock.running():
            self._launch_async(kernel, grid, block, shared_mem, args, keep)
            self._sync(f"kernel {kernel.binary.kernel_name!r}", kernel.binary.kernel_name)


def launch(function, grid: tuple[int, int, int], block: tuple[int, int, int], args: bytes, stream, keep: list) -> None:
    """Launch with the arguments packed in one buffer (CU_LAUNCH_PARAM_BUFFER_POINTER); `keep` holds it alive."""
    buffer = ctypes.create_string_buffer(args, len(args))
    size = ctypes.c_size_t(len(args))
    table = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
    keep.extend((buffer, size, table))
    check(
        driver().cuLaunchKernel(function, *grid, *block, 0, stream, None, ctypes.addressof(table)),
        f"launching {function}",
    )
