"""The verifier: setup and verify command runs (`commands`), its environment, the reward
rules (`reward`), the integrity check of what the agent changed (`integrity`) and the
verifier's network and processes taken back from the agent (`takeover`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.verifier.commands import run_commands
    from service.verifier.environment import BYTECODE_DIR, VERIFIER_ENV
    from service.verifier.integrity import tampering
    from service.verifier.reward import Reward, compute_reward
    from service.verifier.takeover import open_verifier_network, take_back, verifier_network_notice

__all__ = [
    "BYTECODE_DIR",
    "VERIFIER_ENV",
    "Reward",
    "compute_reward",
    "open_verifier_network",
    "run_commands",
    "take_back",
    "tampering",
    "verifier_network_notice",
]

__getattr__ = door(__name__)
