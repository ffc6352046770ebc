"""Length-prefixed pickle frames over a pipe: the channel between :mod:`otel_bridge.producers.isolation.parent` and the
child it starts (:mod:`otel_bridge.producers.isolation.child`). Both ends are this package, same version, same
interpreter: nothing else writes to these pipes.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import threading
from typing import IO, Any

_HEADER = struct.Struct("!I")
PARENT_ENV = "OTEL_BRIDGE_PRODUCER_PARENT"
"""The environment variable holding the child's parent's pid: the child exits when its parent is another."""


class FrameWriter:
    """Writes whole frames to a pipe's file descriptor (made non-blocking); safe to share between threads.

    :meth:`send` waits for room in the pipe; :meth:`try_send` never waits: a frame of at most ``PIPE_BUF`` bytes is
    written whole or not at all (POSIX makes such a write atomic), so a caller that must not block (the training
    thread) can write directly and fall back to a queue only when the pipe is full or another thread is writing.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        os.set_blocking(fd, False)
        self._lock = threading.Lock()
        self._closed = False

    def send(self, message: Any) -> None:
        """Write ``message`` as one frame, waiting for room (``OSError`` once the other end is gone)."""
        frame = _frame(message)
        with self._lock:
            self._write_all(frame)

    def try_send(self, message: Any) -> bool:
        """Write ``message`` as one frame if that needs no waiting at all; ``False`` (nothing written) otherwise."""
        frame = _frame(message)
        if len(frame) > select.PIPE_BUF or not self._lock.acquire(blocking=False):
            return False
        try:
            if self._closed:
                raise BrokenPipeError("the channel is closed")
            os.write(self._fd, frame)  # a pipe takes a write of <= PIPE_BUF bytes whole, or raises EAGAIN
        except BlockingIOError:
            return False
        finally:
            self._lock.release()
        return True

    def _write_all(self, frame: bytes) -> None:
        if self._closed:
            raise BrokenPipeError("the channel is closed")
        view = memoryview(frame)
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                select.select([], [self._fd], [])

    def abandon(self) -> None:
        """In a forked copy of the writing process: never write again (the descriptor is the parent's channel; the
        caller points it elsewhere). A fresh lock: another thread of the parent may have held this one at the fork."""
        self._lock = threading.Lock()
        self._closed = True

    def close(self) -> None:
        """Close the pipe: the reader at the other end sees the end of the channel."""
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)


def _frame(message: Any) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def read_frame(stream: IO[bytes]) -> Any | None:
    """The next frame's message, or ``None`` at the end of the channel (the writer closed it or exited)."""
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    body = _read_exactly(stream, size)
    if body is None:
        return None
    return pickle.loads(body)


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
