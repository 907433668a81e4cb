"""The original Mneme API's `mneme.convert` (see `mneme.compat`)."""

from mneme.compat.convert import (
    convert_to_json,
    export_proteus_tuned_kernel,
    jit_attribute,
)

__all__ = ["convert_to_json", "export_proteus_tuned_kernel", "jit_attribute"]
