"""One page of `RolloutStore.list` (and of `list_groups`), whatever the database: validate,
pick keys, read rows.

The backends differ only in how they fetch the page's (create_us, id) keys and one row;
how a `take` ends a page early and which token resumes it is the same for all of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from service.errors import FieldViolation, SpecError
from service.store.codec import decode_page_token, encode_page_token

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "PageKeys", "read_page"]

DEFAULT_PAGE_SIZE = 50
"""Rollouts per page when the caller asks for 0."""
MAX_PAGE_SIZE = 1000
"""Larger page sizes are lowered to this."""

PageKeys = Callable[[tuple[int, str] | None, int], Awaitable[list[tuple[int, str]]]]
"""(create_us, id) of up to `limit` matching rows after the given key, newest first."""

T = TypeVar("T")


async def read_page(
    page_size: int,
    page_token: str,
    page_keys: PageKeys,
    read: Callable[[str], Awaitable[T]],
    take: Callable[[T], bool] | None,
) -> tuple[list[T], str]:
    """The page's rows (rollouts, groups), read one at a time so that `take` can end it early.

    Raises SpecError naming "page_size" or "page_token".
    """
    if page_size < 0:
        raise SpecError([FieldViolation("page_size", "must not be negative")])
    size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    after = decode_page_token(page_token) if page_token else None
    keys = await page_keys(after, size + 1)
    page: list[T] = []
    for index, (_, row_id) in enumerate(keys[:size]):
        row = await read(row_id)
        if take is not None and not take(row):
            return page, (encode_page_token(*keys[index - 1]) if index else page_token)
        page.append(row)
    token = encode_page_token(*keys[size - 1]) if len(keys) > size else ""
    return page, token
