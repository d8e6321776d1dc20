"""The bounded archive stream: nothing past its bound is read, or sought to."""

from __future__ import annotations

import io

import pytest

from service.harbor.bounded import BoundedReader, BoundExceeded


def test_reads_up_to_the_bound_and_refuses_past_it_before_reading() -> None:
    stream = io.BytesIO(bytes(range(10)))
    reader = BoundedReader(stream, 6)
    assert reader.read(4) == bytes(range(4))
    with pytest.raises(BoundExceeded, match="3 bytes at offset 4 would pass the 6-byte bound"):
        reader.read(3)
    assert stream.tell() == 4  # the refused read took nothing
    assert reader.read(2) == b"\x04\x05"


def test_seeks_past_the_bound_and_unsized_reads_are_refused() -> None:
    reader = BoundedReader(io.BytesIO(bytes(10)), 6)
    assert reader.seek(6) == 6
    with pytest.raises(BoundExceeded):
        reader.seek(7)
    with pytest.raises(io.UnsupportedOperation):
        reader.read()
