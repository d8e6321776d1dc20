"""One page of `RolloutStore.list`, whatever the database: validate, pick keys, read rows.

The backends differ only in how they fetch the page's (create_us, id) keys and one rollout;
how a `take` ends a page early and which token resumes it is the same for all of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from service.errors import FieldViolation, SpecError
from service.models import Rollout
from service.store.base import RolloutPage, TakeRollout
from service.store.codec import decode_page_token, encode_page_token

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "PageKeys", "read_page"]

DEFAULT_PAGE_SIZE = 50
"""Rollouts per page when the caller asks for 0."""
MAX_PAGE_SIZE = 1000
"""Larger page sizes are lowered to this."""

PageKeys = Callable[[tuple[int, str] | None, int], Awaitable[list[tuple[int, str]]]]
"""(create_us, id) of up to `limit` matching rollouts after the given key, newest first."""


async def read_page(
    page_size: int,
    page_token: str,
    page_keys: PageKeys,
    read: Callable[[str], Awaitable[Rollout]],
    take: TakeRollout | None,
) -> RolloutPage:
    """The page's rollouts, read one at a time so that `take` can end it early.

    Raises SpecError naming "page_size" or "page_token".
    """
    if page_size < 0:
        raise SpecError([FieldViolation("page_size", "must not be negative")])
    size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    after = decode_page_token(page_token) if page_token else None
    keys = await page_keys(after, size + 1)
    page: list[Rollout] = []
    for index, (_, rollout_id) in enumerate(keys[:size]):
        rollout = await read(rollout_id)
        if take is not None and not take(rollout):
            return page, (encode_page_token(*keys[index - 1]) if index else page_token)
        page.append(rollout)
    token = encode_page_token(*keys[size - 1]) if len(keys) > size else ""
    return page, token
