"""Mneme: record GPU kernel launches, replay them as verified experiments, autotune them."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mneme")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
