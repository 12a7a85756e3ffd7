"""A canary: a listener that counts every connection it accepts, so a test can say "nothing reached it"."""

from __future__ import annotations

import contextlib
import socket
import threading


class Canary:
    """A TCP (or Unix) listener counting accepted connections; `[::]` listens on every local address, v4 and v6."""

    def __init__(self, host: str = "::", port: int = 0, *, unix_path: str | None = None) -> None:
        if unix_path is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(unix_path)
        elif ":" in host:
            self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self.sock.bind((host, port))
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.bind((host, port))
        self.sock.listen(64)
        self.port = 0 if unix_path is not None else self.sock.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)
