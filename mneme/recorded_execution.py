"""The original Mneme API's `mneme.recorded_execution` (see `mneme.compat`)."""

from mneme.compat.kernel_source import KernelSource
from mneme.compat.recorded_execution import MemStateRef, RecordedExecution, SnapshotType, find_non_jsonables

KernelInstance = RecordedExecution.KernelInstance

__all__ = ["KernelInstance", "KernelSource", "MemStateRef", "RecordedExecution", "SnapshotType", "find_non_jsonables"]
