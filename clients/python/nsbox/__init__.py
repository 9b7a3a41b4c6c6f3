# nsbox/__init__.py: the Python client of the nsbox service (`nsbox serve`): the names a user imports.
"""Sandboxes from `nsbox serve`, standard library only. See README.md."""

from .clip import DEFAULT_OUTPUT_LIMIT, clip, format_tool_output
from .errors import (CapacityFull, Conflict, InternalError, NotFound, NsboxError, Refused, RequestTimeout,
                     ServerGone, SetupFailed)
from .runtime import ExecutionResult, SandboxRuntime
from .sandbox import ExecResult, Files, Listing, Sandbox
from .transport import Transport, default_socket, endpoint_urls

__version__ = "0.1.0"
__all__ = ["Sandbox", "Files", "Listing", "ExecResult", "SandboxRuntime", "ExecutionResult", "clip",
           "format_tool_output", "DEFAULT_OUTPUT_LIMIT", "NsboxError", "NotFound", "Refused", "CapacityFull",
           "Conflict", "SetupFailed", "InternalError", "ServerGone", "RequestTimeout", "Transport", "default_socket",
           "endpoint_urls"]
