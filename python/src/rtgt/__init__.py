"""rtgt: Python client for the rtgt storage target's SPDK-compatible JSON-RPC interface.

* :class:`Client` — a connection over a Unix socket or TCP with SPDK's framing;
  :meth:`Client.call` returns a method's result or raises :class:`RpcError` (``code``,
  ``message``).
* :func:`save_config` / :func:`load_config` — SPDK's client-side configuration algorithms.
* ``rtgt-rpc`` (:mod:`rtgt.cli`) — rpc.py's command line for the methods rtgt implements.

No third-party dependencies.
"""

__version__ = "0.1.0"

from .client import (  # noqa: E402
    DEFAULT_PORT,
    DEFAULT_SOCKET,
    DEFAULT_TIMEOUT,
    Client,
    ConnectError,
    ConnectionClosed,
    DryRunClient,
    ProtocolError,
    RpcError,
    RpcTimeout,
    RtgtError,
)
from .config import (  # noqa: E402
    ConfigError,
    load_config,
    load_subsystem_config,
    save_config,
    save_subsystem_config,
)

__all__ = [
    "__version__",
    "DEFAULT_PORT",
    "DEFAULT_SOCKET",
    "DEFAULT_TIMEOUT",
    "Client",
    "DryRunClient",
    "RtgtError",
    "RpcError",
    "ConnectError",
    "RpcTimeout",
    "ConnectionClosed",
    "ProtocolError",
    "ConfigError",
    "save_config",
    "save_subsystem_config",
    "load_config",
    "load_subsystem_config",
]
