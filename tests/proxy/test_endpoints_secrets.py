"""Server-held keys go only to their own base URL and never into a sandbox; a caller's key
and base URL are refused when they would inject headers, fail later, or be returned."""

from __future__ import annotations

import pytest

from service.errors import SpecError
from service.models import EndpointSpec
from service.proxy.endpoints import resolve_endpoint

SERVER = {"VLLM_BASE_URL": "http://gpu:9000/v1", "VLLM_API_KEY": "server-key", "VLLM_MODEL": "m"}


def refused(spec: EndpointSpec, environ: dict[str, str], **options: bool) -> set[str]:
    with pytest.raises(SpecError) as caught:
        resolve_endpoint(spec, environ, **options)
    return {violation.field for violation in caught.value.violations}


def test_the_server_key_goes_to_the_server_base_url() -> None:
    assert resolve_endpoint(EndpointSpec(kind="vllm"), SERVER).api_key == "server-key"
    same = EndpointSpec(kind="vllm", base_url="http://gpu:9000/")
    assert resolve_endpoint(same, SERVER).api_key == "server-key"


def test_the_server_key_never_goes_to_a_caller_chosen_url() -> None:
    elsewhere = EndpointSpec(kind="vllm", base_url="http://attacker.example:8000/v1")
    assert resolve_endpoint(elsewhere, SERVER).api_key == ""


def test_a_hosted_kind_elsewhere_needs_the_caller_key() -> None:
    spec = EndpointSpec(kind="openai", base_url="http://attacker.example/v1", model="m")
    assert refused(spec, {"OPENAI_API_KEY": "sk-server"}) == {"spec.endpoint.api_key"}


def test_the_server_key_never_enters_a_sandbox() -> None:
    spec = EndpointSpec(kind="vllm")
    assert refused(spec, SERVER, key_in_sandbox=True) == {"spec.endpoint.api_key"}
    own = EndpointSpec(kind="vllm", api_key="caller-key")
    assert resolve_endpoint(own, SERVER, key_in_sandbox=True).api_key == "caller-key"
    assert resolve_endpoint(spec, {"VLLM_MODEL": "m"}, key_in_sandbox=True).api_key == ""


@pytest.mark.parametrize("key", ["k\r\nX-Injected: 1", "k\n", "k€y", "k y", "k\x00"])
def test_a_key_that_is_not_a_header_value_is_refused(key: str) -> None:
    spec = EndpointSpec(base_url="http://h/v1", api_key=key, model="m")
    assert refused(spec, {}) == {"spec.endpoint.api_key"}


@pytest.mark.parametrize(
    "url",
    [
        "http://user:pw@h/v1",
        "http://token@h/v1",
        "http://[::1",
        "http://h:99999/v1",
        "http://h:0/v1",
        "http://h/v1?key=1",
        "http://h/v1#x",
        "http://hé.example/v1",
        "http://h/v1 ",
        "http:///v1",
        "file:///etc/passwd",
    ],
)
def test_a_base_url_that_would_fail_or_leak_is_refused(url: str) -> None:
    assert refused(EndpointSpec(base_url=url, model="m"), {}) == {"spec.endpoint.base_url"}


def test_a_bad_server_url_is_named_with_its_variable() -> None:
    with pytest.raises(SpecError) as caught:
        resolve_endpoint(EndpointSpec(kind="vllm"), {**SERVER, "VLLM_BASE_URL": "http://h:70000"})
    assert [v.field for v in caught.value.violations] == ["spec.endpoint.base_url"]
    assert "VLLM_BASE_URL" in str(caught.value)
