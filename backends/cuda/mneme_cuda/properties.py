"""A CUDA device's handle and properties through the driver: what the backend asks without opening a device
(architecture, name) and what `mneme_cuda.device.CudaDevice` reads when it opens one."""

from __future__ import annotations

from mneme.core.errors import BackendUnavailable
from mneme_cuda.driver import check, driver, require


def device_handle(index: int):
    found = require()
    if not 0 <= index < found.device_count:
        raise BackendUnavailable(f"no CUDA device {index}: this machine has {found.device_count}")
    return check(driver().cuDeviceGet(index), f"cuDeviceGet({index})")


def attribute(dev, name: str) -> int:
    cu = driver()
    return int(
        check(cu.cuDeviceGetAttribute(getattr(cu.CUdevice_attribute, name), dev), f"cuDeviceGetAttribute {name}")
    )


def compute_capability(dev) -> tuple[int, int]:
    return (
        attribute(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
        attribute(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"),
    )


def device_name(dev) -> str:
    raw = check(driver().cuDeviceGetName(256, dev), "cuDeviceGetName")
    return raw.split(b"\0", 1)[0].decode()
