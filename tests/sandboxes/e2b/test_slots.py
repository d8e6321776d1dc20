"""The cap on live E2B sandboxes when rollouts verify FRESH: each holds its agent's sandbox
while it asks for its verifier's, so their first sandboxes leave the last place free and no
set of rollouts can wait on one another forever."""

from __future__ import annotations

import asyncio

from service.sandboxes.e2b.guard import SandboxSlots


async def _fresh_rollout(slots: SandboxSlots, held: list[int]) -> None:
    agent = await slots.take(keep_one=True)
    held.append(1)
    await asyncio.sleep(0)  # every rollout has its agent's sandbox before any verifies
    verifier = await slots.take()
    held.append(2)
    verifier.release()
    agent.release()


async def test_rollouts_verified_fresh_never_wait_on_each_other_at_the_cap() -> None:
    slots = SandboxSlots(3)
    held: list[int] = []
    await asyncio.wait_for(asyncio.gather(*(_fresh_rollout(slots, held) for _ in range(6))), 5)
    assert held.count(2) == 6


async def test_a_first_sandbox_leaves_the_last_place_to_a_verifiers() -> None:
    slots = SandboxSlots(2)
    agent = await slots.take(keep_one=True)
    second_agent = asyncio.create_task(slots.take(keep_one=True))
    await asyncio.sleep(0.05)
    assert not second_agent.done()
    verifier = await asyncio.wait_for(slots.take(), 1)  # passes the waiting first sandbox
    verifier.release()
    assert not second_agent.done()
    agent.release()
    (await asyncio.wait_for(second_agent, 1)).release()


async def test_sandboxes_that_need_no_other_fill_the_cap() -> None:
    slots = SandboxSlots(2)
    held = [await slots.take(), await slots.take()]
    third = asyncio.create_task(slots.take())
    await asyncio.sleep(0.05)
    assert not third.done()
    held[0].release()
    (await asyncio.wait_for(third, 1)).release()


async def test_a_cancelled_wait_holds_no_place() -> None:
    slots = SandboxSlots(1)
    held = await slots.take()
    waiting = asyncio.create_task(slots.take())
    await asyncio.sleep(0.05)
    waiting.cancel()
    held.release()  # the place goes to no one: the waiter is gone
    await asyncio.gather(waiting, return_exceptions=True)
    (await asyncio.wait_for(slots.take(), 1)).release()


async def test_a_place_granted_as_its_taker_is_cancelled_is_given_back() -> None:
    slots = SandboxSlots(1)
    held = await slots.take()
    waiting = asyncio.create_task(slots.take())
    await asyncio.sleep(0.05)
    held.release()  # granted to the waiter, which has not run yet
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    (await asyncio.wait_for(slots.take(), 1)).release()
