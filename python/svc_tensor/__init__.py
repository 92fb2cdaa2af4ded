"""svc-tensor for Python: offline verifiers of provenance receipts and evidence bundles
(standard library only) and a numpy client of the tensor store.

Importing this package imports nothing else: `Client` and `SvcError` load the client module
(and numpy) on first use, so the verifiers run where numpy is not installed.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["Client", "SvcError"]


def __getattr__(name: str):
    if name in ("Client", "SvcError"):
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'svc_tensor' has no attribute {name!r}")
