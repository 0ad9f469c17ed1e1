# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

"""A small JSON-RPC client for rtgt's SPDK-framed socket, shipped to the managed host.

Requests are single JSON objects (``params`` left out when empty, ids counting from 1);
responses are read with a raw JSON decoder from the stream. An ``error`` in a response
raises :class:`RpcError` with the server's code and message. Nothing outside the standard
library is needed on the managed host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import time

DEFAULT_SOCKET = "/var/tmp/spdk.sock"
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"


class RpcError(Exception):
    """The server answered with an error (``code``, ``message``), or could not be reached
    (``code`` is ``None``)."""

    def __init__(self, message, code=None, method=None):
        super(RpcError, self).__init__(message)
        self.message = message
        self.code = code
        self.method = method

    def __str__(self):
        where = "%s: " % self.method if self.method else ""
        code = " (code %s)" % self.code if self.code is not None else ""
        return "%s%s%s" % (where, self.message, code)


class RpcClient:
    """One connection to ``socket_path`` (or to ``host``:``port`` over TCP when ``host``
    is given), opened on the first call."""

    def __init__(self, socket_path=DEFAULT_SOCKET, host=None, port=5260, timeout=60.0):
        self.socket_path = socket_path
        self.host = host
        self.port = port
        self.timeout = timeout
        self._sock = None
        self._buf = ""
        self._id = 0
        self._decoder = json.JSONDecoder()

    def _endpoint(self):
        return "%s:%s" % (self.host, self.port) if self.host else self.socket_path

    def _connect(self):
        try:
            if self.host:
                sock = socket.create_connection((self.host, self.port), self.timeout)
            else:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                sock.connect(self.socket_path)
        except (OSError, socket.error) as e:
            raise RpcError("cannot connect to %s: %s" % (self._endpoint(), e))
        self._sock = sock

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._buf = ""

    def call(self, method, params=None):
        """Returns the result of ``method``; raises :class:`RpcError`."""
        if self._sock is None:
            self._connect()
        self._id += 1
        request = {"jsonrpc": "2.0", "method": method, "id": self._id}
        if params:
            request["params"] = params
        try:
            self._sock.sendall(json.dumps(request).encode("utf-8"))
            response = self._recv()
        except (OSError, socket.error, ValueError) as e:
            self.close()
            raise RpcError("%s (talking to %s)" % (e, self._endpoint()), method=method)
        if not isinstance(response, dict):
            raise RpcError("unexpected response %r" % (response,), method=method)
        error = response.get("error")
        if error is not None:
            raise RpcError(error.get("message", ""), code=error.get("code"), method=method)
        return response.get("result")

    def _recv(self):
        deadline = time.time() + self.timeout
        raw = b""
        while True:
            text = self._buf.lstrip()
            if text:
                try:
                    value, end = self._decoder.raw_decode(text)
                    self._buf = text[end:]
                    return value
                except ValueError:
                    pass
            left = deadline - time.time()
            if left <= 0:
                raise socket.timeout("timeout after %s s waiting for a response" % self.timeout)
            self._sock.settimeout(left)
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ValueError("connection closed by the server")
            raw += chunk
            try:
                self._buf += raw.decode("utf-8")
                raw = b""
            except UnicodeDecodeError:
                continue  # a multi-byte character split across reads


def rpc_argument_spec():
    """The connection options every module takes (see the ``rtgt.target.rpc`` fragment)."""
    return dict(
        socket=dict(type="path", default=DEFAULT_SOCKET),
        rpc_host=dict(type="str"),
        rpc_port=dict(type="int", default=5260),
        timeout=dict(type="float", default=60.0),
    )


def client_from_module(module):
    """A client for the module's connection options."""
    p = module.params
    path = p["socket"]
    if not p.get("rpc_host") and not os.path.exists(path):
        module.fail_json(msg="rtgt RPC socket %s does not exist (is rtgt serve running?)" % path)
    return RpcClient(path, p.get("rpc_host"), p["rpc_port"], p["timeout"])


def fail_rpc(module, error, **result):
    """Fails the task with the server's message; the code and method are returned too."""
    module.fail_json(msg=str(error), rpc_code=error.code, rpc_method=error.method, **result)


def is_not_found(error):
    """Whether an error says the object does not exist (``-19 No such device``)."""
    return error.code == -19
