"""The original Mneme API's `mneme.recorded_execution` (see `mneme.compat`)."""

from mneme.compat.recorded_execution import MemStateRef, RecordedExecution, SnapshotType, find_non_jsonables

KernelInstance = RecordedExecution.KernelInstance

__all__ = ["KernelInstance", "MemStateRef", "RecordedExecution", "SnapshotType", "find_non_jsonables"]
