"""mindlite: an embeddable data-and-AI query engine (Python front).

The DB-API 2.0 connection, results and helpers land with the Python issue; this package already
builds and imports its native module."""

from ._native import __version__

__all__ = ["__version__"]
