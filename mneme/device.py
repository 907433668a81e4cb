"""The original Mneme API's `mneme.device` (see `mneme.compat`)."""

from mneme.compat.device import (
    DeviceFunction,
    DeviceModule,
    MemBuffer,
    get_device_arch,
    get_device_count,
    set_device,
)
from mneme.compat.types import dim3

__all__ = ["DeviceFunction", "DeviceModule", "MemBuffer", "dim3", "get_device_arch", "get_device_count", "set_device"]
