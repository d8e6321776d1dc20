"""What keeps Harbor's CLI on this machine: left alone, importing LiteLLM fetches a model price
list from GitHub (three tries), and `harbor run` sends telemetry; both leave loopback and cost
about 15 s a run offline."""

from __future__ import annotations

__all__ = ["HARBOR_OFFLINE_ENV"]

HARBOR_OFFLINE_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HARBOR_TELEMETRY": "0"}
