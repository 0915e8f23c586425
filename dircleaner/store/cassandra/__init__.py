"""The Apache Cassandra backend.

The driver imports numpy, when it is installed, for a result parser we never use
(``NumpyProtocolHandler``): 0.15-0.2 s of every Cassandra command's start-up, ``clean --prefix``
included. The driver is imported here first with numpy hidden, so that parser is skipped; numpy
stays importable afterwards for the commands that build or read a filter. When numpy is already
imported (a filter command, a worker) there is nothing to save and the driver imports as usual.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType


class _HideNumpy(MetaPathFinder):
    """Makes ``import numpy`` fail while the driver is imported."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "numpy" or fullname.startswith("numpy."):
            raise ImportError(f"{fullname} is hidden while the Cassandra driver is imported")
        return None


def _import_driver_without_numpy() -> None:
    if "numpy" in sys.modules or "cassandra.protocol" in sys.modules:
        return
    hide = _HideNumpy()
    sys.meta_path.insert(0, hide)
    try:
        importlib.import_module("cassandra.protocol")
    finally:
        sys.meta_path.remove(hide)


_import_driver_without_numpy()
