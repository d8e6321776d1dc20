"""The server and the fork server wait on pidfds and pasta with poll: holding many
sandboxes, their descriptors pass FD_SETSIZE (1024), where select.select refused
("filedescriptor out of range in select()") and 44-54 of 200 concurrent rollouts ended
INTERNAL."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import pytest

from service.sandboxes.local.descriptors import readable


@pytest.fixture
def high_pipe() -> Iterator[tuple[int, int]]:
    """A pipe whose read end is numbered past 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    read_end, write_end = os.pipe()
    high = os.dup2(read_end, 2000)
    os.close(read_end)
    try:
        yield high, write_end
    finally:
        os.close(high)
        os.close(write_end)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_descriptor_past_fd_setsize_is_waited_on(high_pipe: tuple[int, int]) -> None:
    read_end, write_end = high_pipe
    assert readable([read_end], 0) == set()
    os.write(write_end, b"x")
    assert readable([read_end], 1.0) == {read_end}
