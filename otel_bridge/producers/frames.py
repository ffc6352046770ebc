"""Length-prefixed pickle frames over a pipe: the channel between :mod:`otel_bridge.producers.scrape_process` and the
child it starts (:mod:`otel_bridge.producers.scrape_child`). Both ends are this package, same version, same
interpreter: nothing else writes to these pipes.
"""

from __future__ import annotations

import pickle
import struct
import threading
from typing import IO, Any

_HEADER = struct.Struct("!I")


class FrameWriter:
    """Writes whole frames; safe to share between threads."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, message: Any) -> None:
        """Write ``message`` as one frame (``OSError`` once the other end is gone)."""
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self._stream.write(_HEADER.pack(len(body)) + body)
            self._stream.flush()

    def close(self) -> None:
        """Close the stream: the reader at the other end sees the end of the channel."""
        with self._lock:
            self._stream.close()


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
