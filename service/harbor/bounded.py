"""A decompressed archive stream that `tarfile` cannot read past a byte budget.

`tarfile` reads a PAX extended header or a GNU long-name record whole, in one `read`, before
the caller sees the member it belongs to: a budget counted per member (`source._Budget`)
never sees it, and a 254 KiB gzip of a 256 MiB PAX header of zeros allocates 256 MiB. This
reader bounds the position `tarfile` may reach (every header, record, padding and content
byte alike) and refuses a `read` or `seek` that would pass the bound *before* decompressing
a byte of it, so memory stays under the bound whatever the headers declare.
"""

from __future__ import annotations

import io
from typing import BinaryIO

__all__ = ["BoundExceeded", "BoundedReader"]


class BoundExceeded(Exception):
    """A read or seek would take the stream past its bound."""

    def __init__(self, limit: int, position: int, wanted: int) -> None:
        self.limit, self.position, self.wanted = limit, position, wanted
        super().__init__(f"{wanted} bytes at offset {position} would pass the {limit}-byte bound")


class BoundedReader(io.RawIOBase):
    """`stream` (seekable, e.g. a `gzip.GzipFile`) up to byte `limit`; past it, BoundExceeded."""

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        super().__init__()
        self._stream, self._limit = stream, limit

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._stream.tell()

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            raise io.UnsupportedOperation("only reads of a given size")
        position = self.tell()
        if position + size > self._limit:
            raise BoundExceeded(self._limit, position, size)
        return self._stream.read(size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET:
            raise io.UnsupportedOperation("only absolute seeks")
        if offset > self._limit:
            raise BoundExceeded(self._limit, self.tell(), offset - self.tell())
        return self._stream.seek(offset)
