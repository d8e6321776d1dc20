"""Endpoint shorthands resolve from the environment; explicit fields win; errors name fields."""

from __future__ import annotations

import pytest

from service.errors import SpecError
from service.models import EndpointSpec
from service.proxy.endpoints import ResolvedEndpoint, resolve_endpoint


def fields(error: SpecError) -> set[str]:
    return {violation.field for violation in error.violations}


@pytest.mark.parametrize(
    ("kind", "environ", "expected"),
    [
        (
            "vllm",
            {"VLLM_MODEL": "qwen"},
            ResolvedEndpoint("http://127.0.0.1:8000/v1", "", "qwen"),
        ),
        (
            "vllm",
            {"VLLM_BASE_URL": "http://gpu:9000", "VLLM_API_KEY": "k", "VLLM_MODEL": "m"},
            ResolvedEndpoint("http://gpu:9000/v1", "k", "m"),
        ),
        (
            "openai",
            {"OPENAI_API_KEY": "sk-o", "OPENAI_MODEL": "gpt-x"},
            ResolvedEndpoint("https://api.openai.com/v1", "sk-o", "gpt-x"),
        ),
        (
            "hf_router",
            {"HF_TOKEN": "hf-t", "HF_ROUTER_MODEL": "org/m:fast"},
            ResolvedEndpoint("https://router.huggingface.co/v1", "hf-t", "org/m:fast"),
        ),
    ],
)
def test_shorthand_fills_from_environment(
    kind: str, environ: dict[str, str], expected: ResolvedEndpoint
) -> None:
    assert resolve_endpoint(EndpointSpec(kind=kind), environ) == expected


def test_explicit_fields_win_over_the_environment() -> None:
    spec = EndpointSpec(kind="openai", base_url="http://mine:1/", api_key="sk-spec", model="spec-m")
    environ = {"OPENAI_BASE_URL": "http://env", "OPENAI_API_KEY": "sk-env", "OPENAI_MODEL": "env-m"}
    assert resolve_endpoint(spec, environ) == ResolvedEndpoint(
        "http://mine:1/v1", "sk-spec", "spec-m"
    )


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("http://h:8000", "http://h:8000/v1"),
        ("http://h:8000/", "http://h:8000/v1"),
        ("http://h:8000/v1/", "http://h:8000/v1"),
        ("https://h/v1beta/openai/", "https://h/v1beta/openai"),
    ],
)
def test_v1_is_appended_only_when_the_url_has_no_path(base_url: str, expected: str) -> None:
    resolved = resolve_endpoint(EndpointSpec(base_url=base_url, model="m"), {})
    assert resolved.base_url == expected


def test_unknown_kind_names_the_kind_field() -> None:
    with pytest.raises(SpecError) as caught:
        resolve_endpoint(EndpointSpec(kind="anthropic"), {})
    assert fields(caught.value) == {"spec.endpoint.kind"}
    assert "hf_router" in str(caught.value)


def test_every_missing_piece_is_named() -> None:
    with pytest.raises(SpecError) as caught:
        resolve_endpoint(EndpointSpec(kind="openai"), {})
    assert fields(caught.value) == {"spec.endpoint.api_key", "spec.endpoint.model"}
    assert "OPENAI_API_KEY" in str(caught.value)


def test_explicit_endpoint_needs_base_url_and_model_but_no_key() -> None:
    with pytest.raises(SpecError) as caught:
        resolve_endpoint(EndpointSpec(), {"VLLM_MODEL": "ignored"})
    assert fields(caught.value) == {"spec.endpoint.base_url", "spec.endpoint.model"}
    assert resolve_endpoint(EndpointSpec(base_url="http://h", model="m"), {}).api_key == ""


def test_a_base_url_that_is_not_http_is_rejected() -> None:
    with pytest.raises(SpecError) as caught:
        resolve_endpoint(EndpointSpec(base_url="ftp://h/v1", model="m"), {})
    assert fields(caught.value) == {"spec.endpoint.base_url"}


def test_the_key_never_shows_in_repr() -> None:
    resolved = resolve_endpoint(
        EndpointSpec(base_url="http://h", api_key="sk-hidden", model="m"), {}
    )
    assert "sk-hidden" not in repr(resolved)


@pytest.mark.parametrize(
    ("base_url", "asks"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("https://my-vllm.internal/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://router.huggingface.co/v1", False),
    ],
)
def test_token_ids_are_asked_only_of_self_hosted_servers(base_url: str, asks: bool) -> None:
    assert ResolvedEndpoint(base_url, "", "m").asks_token_ids is asks


@pytest.mark.parametrize(
    ("spec", "private_ok"),
    [
        (EndpointSpec(base_url="http://llm.internal:8000", model="m"), False),  # the caller's
        (EndpointSpec(kind="vllm"), True),  # the operator's configured URL
        (EndpointSpec(kind="vllm", base_url="http://gpu:8000/v1"), True),  # the same URL
    ],
)
def test_only_a_callers_own_url_is_kept_out_of_private_ranges(
    spec: EndpointSpec, private_ok: bool
) -> None:
    environ = {"VLLM_BASE_URL": "http://gpu:8000/v1", "VLLM_MODEL": "m"}
    assert resolve_endpoint(spec, environ, allow_private=False).private_ok is private_ok
    assert resolve_endpoint(spec, environ, allow_private=True).private_ok is True
