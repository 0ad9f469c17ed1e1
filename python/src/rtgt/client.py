"""JSON-RPC client for rtgt (and any SPDK-framed JSON-RPC server).

Framing is SPDK's: a request is one JSON object written to a stream socket with no length
prefix and no delimiter; the server answers with one JSON value per request (rtgt and SPDK
follow each with ``\\n``). Responses are read with a raw JSON decoder over the accumulated
stream, so a response split across reads, or several responses in one read, are both fine.

Like SPDK's ``rpc.py`` client:

* ``params`` is omitted from the request when it is ``None`` or empty;
* request ids count up from 1 on each connection;
* ``conn_retries`` retries a refused or missing socket, ``retry_interval`` seconds apart;
* an ``error`` member in a response raises :class:`RpcError`, which carries the server's
  ``code`` and ``message``.

Unlike SPDK's client, ``timeout`` is wall-clock time for the whole response (SPDK measures
CPU time, which in practice never expires while the client waits). When a call times out
or the server closes the connection mid-response, the connection is dropped: a late
response could otherwise be taken for the answer to the next request. The next call
connects again. A connection the server has closed while it was idle (rtgt closes
connections idle for ``rtgt serve --rpc-idle-timeout``, 60 s by default) is noticed before
the next request is sent, and replaced by a new one.
"""

import codecs
import json
import os
import socket
import time
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

#: SPDK's (and rtgt's) default RPC socket.
DEFAULT_SOCKET = "/var/tmp/spdk.sock"
#: Port used when the address is an IP address or host name (rpc.py ``-p``).
DEFAULT_PORT = 5260
#: Seconds to wait for a response (rpc.py ``-t``).
DEFAULT_TIMEOUT = 60.0
#: Largest response accepted. SPDK caps its responses at 32 MiB; this leaves headroom.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024

_RECV_CHUNK = 65536


class RtgtError(Exception):
    """Base class of every error this package raises."""


class RpcError(RtgtError):
    """The server answered with a JSON-RPC error object.

    Attributes:
        code: the JSON-RPC error code (SPDK codes: -32700, -32600, -32601, -32602, -32603,
            -1 for the wrong RPC state, or a negative errno such as -17 or -19).
        message: the server's message, which names the object at fault.
        method: the method that was called (``None`` for errors without a request).
        params: the parameters that were sent.
        request_id: the request's id.
        data: the error's ``data`` member, if the server sent one.
    """

    def __init__(
        self,
        code: int,
        message: str,
        method: Optional[str] = None,
        params: Any = None,
        request_id: Any = None,
        data: Any = None,
    ) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.method = method
        self.params = params
        self.request_id = request_id
        self.data = data

    def __str__(self) -> str:
        where = f"{self.method}: " if self.method else ""
        return f"{where}{self.message} (code {self.code})"

    def __repr__(self) -> str:
        return f"RpcError(code={self.code!r}, message={self.message!r}, method={self.method!r})"


class ConnectError(RtgtError):
    """The server could not be reached (after the configured retries)."""


class RpcTimeout(RtgtError, TimeoutError):
    """No complete response arrived within the timeout."""


class ConnectionClosed(RtgtError):
    """The server closed the connection before a complete response arrived."""


class ProtocolError(RtgtError):
    """The server sent something that is not a JSON-RPC response to the request."""


def _is_unix_address(address: str) -> bool:
    return "/" in address or os.path.exists(address)


class Client:
    """A connection to a JSON-RPC server on a Unix socket or TCP.

    ``address`` is a socket path (anything containing ``/``, or an existing file) or an IP
    address / host name, in which case ``port`` is used (as rpc.py's ``-s`` and ``-p``).

    The connection is opened on the first call (or by :meth:`connect`) and kept for later
    calls. A client is a context manager; leaving the ``with`` block closes it.

    Besides :meth:`call`, any method name can be called as an attribute with keyword
    arguments; arguments that are ``None`` are left out, as rpc.py does::

        with Client("/var/tmp/spdk.sock") as c:
            c.call("nvmf_create_subsystem", {"nqn": nqn, "allow_any_host": True})
            c.bdev_malloc_create(num_blocks=131072, block_size=512, name="Malloc0")
            subsystems = c.nvmf_get_subsystems()
    """

    def __init__(
        self,
        address: str = DEFAULT_SOCKET,
        port: int = DEFAULT_PORT,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        conn_retries: int = 0,
        retry_interval: float = 0.2,
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive or None, not {timeout!r}")
        if conn_retries < 0:
            raise ValueError(f"conn_retries must not be negative, not {conn_retries!r}")
        self.address = address
        self.port = port
        self.timeout = timeout
        self.conn_retries = conn_retries
        self.retry_interval = retry_interval
        self._sock: Optional[socket.socket] = None
        self._next_id = 1
        self._buf = ""
        self._decoder = json.JSONDecoder()
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    # ----- connection -----

    @property
    def connected(self) -> bool:
        """Whether a connection is open."""
        return self._sock is not None

    def describe(self) -> str:
        """The endpoint, for messages: the socket path, or ``host:port``."""
        if _is_unix_address(self.address):
            return self.address
        if ":" in self.address:
            return f"[{self.address}]:{self.port}"
        return f"{self.address}:{self.port}"

    def connect(self) -> None:
        """Opens the connection, retrying ``conn_retries`` times.

        A no-op if a connection is open, unless the server has closed it (after its idle
        timeout): then a new one is opened.
        """
        if self._sock is not None:
            if not self._closed_by_server():
                return
            self.close()
        attempts = self.conn_retries + 1
        last: Optional[OSError] = None
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.retry_interval)
            try:
                self._sock = self._open()
                break
            except OSError as e:
                last = e
        if self._sock is None:
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            reason = last.strerror if last is not None and last.strerror else str(last)
            raise ConnectError(f"cannot connect to {self.describe()}{tries}: {reason}") from last
        self._next_id = 1
        self._buf = ""
        self._utf8.reset()

    def _closed_by_server(self) -> bool:
        """Whether the server has closed the open, idle connection (nothing is pending on it)."""
        assert self._sock is not None
        if self._buf.strip():
            return False
        try:
            self._sock.setblocking(False)
            try:
                data = self._sock.recv(1, socket.MSG_PEEK)
            finally:
                self._sock.settimeout(self.timeout)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return data == b""

    def _open(self) -> socket.socket:
        if _is_unix_address(self.address):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.settimeout(self.timeout)
                s.connect(self.address)
            except OSError:
                s.close()
                raise
            return s
        infos = socket.getaddrinfo(self.address, self.port, type=socket.SOCK_STREAM)
        last: Optional[OSError] = None
        for family, kind, proto, _, addr in infos:
            s = socket.socket(family, kind, proto)
            try:
                s.settimeout(self.timeout)
                s.connect(addr)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return s
            except OSError as e:
                s.close()
                last = e
        raise last if last is not None else OSError(f"no address for {self.address}")

    def close(self) -> None:
        """Closes the connection, if open. A later call connects again."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._buf = ""

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    # ----- requests -----

    @staticmethod
    def request(method: str, params: Any = None, request_id: Any = None) -> dict:
        """The request object for a call, exactly as :meth:`call` sends it."""
        req: dict = {"jsonrpc": "2.0", "method": method}
        if request_id is not None:
            req["id"] = request_id
        if params:
            req["params"] = params
        return req

    def send(self, method: str, params: Any = None) -> int:
        """Sends one request without waiting for its response; returns its id.

        Pair with :meth:`recv`. :meth:`call` is send + recv + error check.
        """
        self.connect()
        request_id = self._next_id
        self._next_id += 1
        self._write(self.request(method, params, request_id))
        return request_id

    def _write(self, obj: Any) -> None:
        assert self._sock is not None
        data = json.dumps(obj).encode("utf-8")
        try:
            self._sock.sendall(data)
        except socket.timeout as e:
            self.close()
            raise RpcTimeout(f"timed out sending to {self.describe()}") from e
        except OSError as e:
            self.close()
            raise ConnectionClosed(f"connection to {self.describe()} lost: {e}") from e

    def recv(self, timeout: Optional[float] = None) -> Any:
        """Reads the next complete JSON value from the connection.

        Waits at most ``timeout`` seconds (default: the client's timeout). Raises
        :class:`RpcTimeout` or :class:`ConnectionClosed`, and closes the connection, when no
        complete value arrives.
        """
        if self._sock is None:
            raise ConnectionClosed("not connected")
        value = self._take()
        if value is not _INCOMPLETE:
            return value
        limit = self.timeout if timeout is None else timeout
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._fail_timeout(limit)
                self._sock.settimeout(left)
            else:
                self._sock.settimeout(None)
            try:
                chunk = self._sock.recv(_RECV_CHUNK)
            except socket.timeout:
                self._fail_timeout(limit)
            except OSError as e:
                self.close()
                raise ConnectionClosed(f"connection to {self.describe()} lost: {e}") from e
            if not chunk:
                partial = self._buf.strip()
                self.close()
                if partial:
                    raise ConnectionClosed(
                        f"connection closed by {self.describe()} with a partial response: "
                        f"{_clip(partial)}"
                    )
                raise ConnectionClosed(f"connection closed by {self.describe()}")
            text = self._utf8.decode(chunk)
            self._buf += text
            if len(self._buf) > MAX_RESPONSE_BYTES:
                self.close()
                raise ProtocolError(f"response larger than {MAX_RESPONSE_BYTES} bytes")
            # A top-level value (object or array) ends with '}' or ']': only then can a new
            # value have completed, so large responses are not re-parsed on every read.
            if "}" in text or "]" in text:
                value = self._take()
                if value is not _INCOMPLETE:
                    return value

    def _fail_timeout(self, limit: Optional[float]) -> None:
        partial = self._buf.strip()
        self.close()
        detail = f"; partial response: {_clip(partial)}" if partial else ""
        raise RpcTimeout(
            f"timeout after {limit:g} s waiting for a response from {self.describe()}{detail}"
        )

    def _take(self) -> Any:
        buf = self._buf.lstrip()
        if not buf:
            self._buf = ""
            return _INCOMPLETE
        try:
            value, end = self._decoder.raw_decode(buf)
        except json.JSONDecodeError:
            self._buf = buf
            return _INCOMPLETE
        self._buf = buf[end:]
        return value

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None) -> Any:
        """Calls ``method`` and returns its result; raises :class:`RpcError` on an error.

        ``params`` is sent as given (``None`` and empty are omitted from the request).
        """
        request_id = self.send(method, params)
        response = self.recv()
        return self._result(response, method, params, request_id)

    def _result(self, response: Any, method: str, params: Any, request_id: Any) -> Any:
        if not isinstance(response, dict):
            self.close()
            raise ProtocolError(f"{method}: expected a response object, got {_clip(response)}")
        error = response.get("error")
        if error is not None:
            if not isinstance(error, dict):
                raise ProtocolError(f"{method}: malformed error member {_clip(error)}")
            raise RpcError(
                int(error.get("code", 0)),
                str(error.get("message", "")),
                method=method,
                params=params,
                request_id=response.get("id", request_id),
                data=error.get("data"),
            )
        if response.get("id") != request_id:
            self.close()
            raise ProtocolError(
                f"{method}: response id {response.get('id')!r} does not match request id "
                f"{request_id!r}"
            )
        if "result" not in response:
            raise ProtocolError(f"{method}: response has neither result nor error")
        return response["result"]

    def batch(
        self, calls: Iterable[Union[Tuple[str], Tuple[str, Optional[Mapping[str, Any]]]]]
    ) -> List[Any]:
        """Sends a JSON-RPC batch (one array of requests) and returns one entry per call, in
        order: the result, or an :class:`RpcError` instance for a call that failed.
        """
        calls = [tuple(c) for c in calls]
        if not calls:
            raise ValueError("a batch needs at least one call")
        self.connect()
        reqs = []
        for c in calls:
            method = c[0]
            params = c[1] if len(c) > 1 else None
            reqs.append(self.request(method, params, self._next_id))
            self._next_id += 1
        self._write(reqs)
        response = self.recv()
        if not isinstance(response, list):
            if isinstance(response, dict) and "error" in response:
                self._result(response, "batch", None, None)
            self.close()
            raise ProtocolError(f"expected a batch response array, got {_clip(response)}")
        by_id = {r.get("id"): r for r in response if isinstance(r, dict)}
        out: List[Any] = []
        for req in reqs:
            r = by_id.get(req["id"])
            if r is None:
                raise ProtocolError(f"batch response has no entry for id {req['id']}")
            try:
                out.append(self._result(r, req["method"], req.get("params"), req["id"]))
            except RpcError as e:
                out.append(e)
        return out

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(**kwargs: Any) -> Any:
            return self.call(name, {k: v for k, v in kwargs.items() if v is not None})

        method.__name__ = name
        return method


class DryRunClient:
    """Prints each request instead of sending it (``rtgt-rpc --dry-run``); returns ``None``."""

    def __init__(self, out: Any = None) -> None:
        self.out = out
        self.requests: List[dict] = []
        self._next_id = 1

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None) -> None:
        req = Client.request(method, params, self._next_id)
        self._next_id += 1
        self.requests.append(req)
        if self.out is not None:
            print(json.dumps(req, indent=2), file=self.out)
        return None

    def close(self) -> None:
        pass

    def __enter__(self) -> "DryRunClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


class _Incomplete:
    pass


_INCOMPLETE = _Incomplete()


def _clip(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


__all__: Sequence[str] = [
    "DEFAULT_SOCKET",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT",
    "Client",
    "DryRunClient",
    "RtgtError",
    "RpcError",
    "ConnectError",
    "RpcTimeout",
    "ConnectionClosed",
    "ProtocolError",
]
