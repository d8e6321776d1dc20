"""How an agent inside a sandbox reaches a model: what its harness's configuration points at.

The proxy makes one (`proxy.access`), the engine hands it to the harness (`AgentContext`),
so it lives below both.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModelAccess"]


class ModelAccess(BaseModel):
    """How the agent reaches a model from inside the sandbox."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    """OpenAI-compatible base URL as seen from inside the sandbox (ends in /v1)."""
    api_key: str = Field(repr=False)
    """What the agent sends as its key: a per-rollout token when proxied, never the real key;
    the real one when direct, so it is kept out of the repr."""
    model: str
    """Model name the agent asks for (the proxy overrides it upstream)."""
    small_model: str
    """Alias for auxiliary calls (titles); the proxy marks those turns not trainable."""
