"""The CUDA backend's native snapshot reader: the core's (`mneme.core.snapshot.snapio`), found also in the
checkout's prebuilt libraries (`mneme_cuda.libraries`)."""

from mneme.core.snapshot.snapio import ENTRY_DTYPE, STORED, Decode, NativeDecoder, native_decoder, read_parallel
from mneme_cuda import libraries  # noqa: F401 - declares the checkout's .gpu/lib to the native-library helper

__all__ = ["ENTRY_DTYPE", "STORED", "Decode", "NativeDecoder", "native_decoder", "read_parallel"]
