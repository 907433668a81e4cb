"""The version of every Mneme distribution (mneme-gpu and its backends); see scripts/set-version."""

__version__ = "0.1.0"
