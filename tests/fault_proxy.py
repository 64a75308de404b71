"""A fault-injecting TCP proxy for the tests: between a client and a real redis-server on loopback,
it forwards both ways until told to lose something, as a network or a dying server does:

- :meth:`FaultProxy.drop_next_reply`: the next bytes Redis sends back (the reply of a command it
  has run) are swallowed and the client's connection closed: the call ran, its caller never hears.
  :meth:`FaultProxy.drop_reply_to` does the same to the reply of the next command that holds some
  bytes (a script's operation name), whatever else the client sends first.
- :meth:`FaultProxy.cut_after`: after that many more bytes from the client, the connection is
  closed both ways: Redis runs the whole commands it got, the rest never reach it (a pipeline cut
  half way).

Test support only. Every connection is its own thread; :meth:`close` ends them all.
"""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

CHUNK = 65536


class FaultProxy:
    """Listens on a free loopback port (:attr:`port`) and forwards each connection to ``target``."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._drop_reply = False
        self._drop_after: bytes | None = None  # the reply to the next command holding these bytes is dropped
        self._skip = 0  # ... after this many such commands were let through
        self._cut_in: int | None = None  # client bytes still to forward before the cut
        self.dropped = 0  # replies swallowed
        self.cut = 0  # connections cut
        self._closed = threading.Event()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def drop_next_reply(self) -> None:
        """Swallow the next reply Redis sends on any connection, and close that connection."""
        with self._lock:
            self._drop_reply = True

    def drop_reply_to(self, marker: bytes, *, skip: int = 0) -> None:
        """Swallow the reply to the next command whose bytes hold ``marker`` (such as
        ``b"$3\r\npop\r\n"``, a script call's operation), after letting ``skip`` such replies
        through, and close that connection."""
        with self._lock:
            self._drop_after, self._skip = marker, skip

    def cut_after(self, client_bytes: int) -> None:
        """Close the next connection to send that many more bytes, once they are forwarded."""
        with self._lock:
            self._cut_in = client_bytes

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in list(self._open):
                _quietly_close(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                _quietly_close(client)
                continue
            with self._lock:
                self._open.update((client, server))
            threading.Thread(target=self._pump, args=(client, server), name="fault-proxy-conn", daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, server)
        selector.register(server, selectors.EVENT_READ, client)
        marked = False  # this connection sent the marked command: its next reply is dropped
        try:
            while not self._closed.is_set():
                for key, _ in selector.select(timeout=0.2):
                    source, sink = key.fileobj, key.data
                    data = source.recv(CHUNK)  # type: ignore[union-attr]
                    if not data:
                        return
                    if source is server and (marked or self._take_drop()):
                        return
                    if source is client:
                        marked = marked or self._take_marker(data)
                        data, cut = self._take_cut(data)
                        sink.sendall(data)
                        if cut:
                            return
                    else:
                        sink.sendall(data)
        except OSError:
            return
        finally:
            selector.close()
            for sock in (client, server):
                _quietly_close(sock)
            with self._lock:
                self._open.difference_update((client, server))

    def _take_drop(self) -> bool:
        with self._lock:
            if not self._drop_reply:
                return False
            self._drop_reply = False
            self.dropped += 1
            return True

    def _take_marker(self, data: bytes) -> bool:
        with self._lock:
            if self._drop_after is None or self._drop_after not in data:
                return False
            if self._skip:
                self._skip -= 1
                return False
            self._drop_after = None
            self.dropped += 1
            return True

    def _take_cut(self, data: bytes) -> tuple[bytes, bool]:
        """What of ``data`` to forward, and whether to cut the connection after it."""
        with self._lock:
            if self._cut_in is None:
                return data, False
            if len(data) < self._cut_in:
                self._cut_in -= len(data)
                return data, False
            head, self._cut_in = data[:self._cut_in], None
            self.cut += 1
            return head, True


def _quietly_close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


@contextmanager
def fault_proxy(target_port: int) -> Iterator[FaultProxy]:
    proxy = FaultProxy(target_port)
    try:
        yield proxy
    finally:
        proxy.close()
