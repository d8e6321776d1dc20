"""What the opencode harness hands opencode: its config document and environment."""

from __future__ import annotations

import json

from service.agents.opencode_config import (
    INSTRUCTION_FILE,
    MODELS_CACHE,
    XDG_ROOT,
    config_content,
    launcher_script,
    opencode_env,
    option_violations,
    seed_files,
)
from service.models.model_access import ModelAccess

PROXIED = ModelAccess(
    base_url="http://127.0.0.1:48080/r/tok/v1",
    api_key="tok",
    model="rollout-policy",
    small_model="rollout-policy-aux",
)
DIRECT = ModelAccess(
    base_url="http://h/v1", api_key="k", model="Qwen/Qwen3-8B", small_model="Qwen/Qwen3-8B"
)


def test_the_provider_points_at_the_model_access_with_two_aliases() -> None:
    config = config_content(PROXIED, {})

    provider = config["provider"]["rollout"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": PROXIED.base_url, "apiKey": "tok"}
    assert set(provider["models"]) == {"rollout-policy", "rollout-policy-aux"}
    assert config["model"] == "rollout/rollout-policy"
    assert config["small_model"] == "rollout/rollout-policy-aux"
    assert config["enabled_providers"] == ["rollout"]
    assert (config["autoupdate"], config["share"], config["snapshot"]) == (False, "disabled", False)


def test_one_model_serves_both_roles_when_there_is_no_alias() -> None:
    config = config_content(DIRECT, {})

    assert list(config["provider"]["rollout"]["models"]) == ["Qwen/Qwen3-8B"]
    assert config["small_model"] == config["model"] == "rollout/Qwen/Qwen3-8B"


def test_permissions_never_ask_and_deny_the_disabled_tools() -> None:
    assert config_content(PROXIED, {})["permission"] == {
        "*": "allow",
        "webfetch": "deny",
        "question": "deny",
    }
    chosen = config_content(PROXIED, {"disabled_tools": ["bash"]})["permission"]
    assert chosen == {"*": "allow", "bash": "deny"}
    assert config_content(PROXIED, {"disabled_tools": []})["permission"] == {"*": "allow"}


def test_a_system_prompt_replaces_the_build_agents_prompt() -> None:
    assert "agent" not in config_content(PROXIED, {})
    config = config_content(PROXIED, {"system_prompt": "Be terse."})
    assert config["agent"] == {"build": {"prompt": "Be terse."}}


def test_the_environment_is_private_and_offline() -> None:
    env = opencode_env(PROXIED, {})

    assert json.loads(env["OPENCODE_CONFIG_CONTENT"]) == config_content(PROXIED, {})
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        assert env[f"XDG_{name}_HOME"].startswith("/home/user/.opencode-xdg/")
    for flag in ("MODELS_FETCH", "AUTOUPDATE", "SHARE", "LSP_DOWNLOAD"):
        assert env[f"OPENCODE_DISABLE_{flag}"] == "1"


def test_the_models_cache_is_seeded_empty_in_opencodes_own_cache_dir() -> None:
    env = opencode_env(PROXIED, {})

    files = seed_files("Do it.")

    assert files[MODELS_CACHE] == b"{}"
    assert f"{env['XDG_CACHE_HOME']}/opencode/models.json" == MODELS_CACHE
    assert all(path.startswith(f"{XDG_ROOT}/") for path in files)
    assert MODELS_CACHE not in seed_files("Do it.", empty_models_cache=False)


def test_the_launcher_feeds_the_instruction_on_stdin() -> None:
    script = launcher_script("/opt/open code/opencode").decode()

    assert (
        script == f"exec '/opt/open code/opencode' run --pure --format json < {INSTRUCTION_FILE}\n"
    )


def test_option_violations_name_each_field() -> None:
    assert option_violations({"disabled_tools": ["bash"], "system_prompt": "x"}) == []
    fields = [
        v.field for v in option_violations({"disabled_tools": "bash", "system_prompt": 3, "tmp": 1})
    ]
    assert sorted(fields) == [
        "spec.agent.options.disabled_tools",
        "spec.agent.options.system_prompt",
        "spec.agent.options.tmp",
    ]
    assert option_violations({"disabled_tools": ["", "bash"]})[0].field.endswith("disabled_tools")
