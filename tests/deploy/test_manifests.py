"""deploy/: the Kubernetes manifests, validated offline, and the checks that keep them true to
the server they run (its API port, its health port, its settings, its image).

Schema validation is kubernetes-validate's bundled OpenAPI schemas for one fixed Kubernetes
version, strict (an unknown field, say a misspelt `readinesProbe`, fails), so no cluster and
no network are needed. The other checks are what a schema cannot see: probes on the health
port the server serves (health only, in plaintext, beside a TLS API), Services that select
the server's pods, secrets referenced rather than written into the Deployment, one image name
from the build script to the Deployment.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.api.transport import (
    check_exposure,
    check_metrics_exposure,
    check_proxy_exposure,
)
from service.config import Settings, load_settings
from service.errors import ConfigError

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "k8s"
KUBERNETES_VERSION = "1.30.0"
EXAMPLE_SECRETS = K8S / "secrets.example.yaml"
_SECRET_WORDS = re.compile(r"TOKEN|PASSWORD|SECRET|_KEY$|DATABASE_URL", re.IGNORECASE)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _manifests() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def _all() -> list[dict[str, Any]]:
    return [doc for path in _manifests() for doc in _documents(path)]


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in _all() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _kustomization() -> dict[str, Any]:
    return dict(yaml.safe_load((K8S / "kustomization.yaml").read_text()))


SERVER = ("Deployment", "rollout-server")


@pytest.mark.parametrize(
    ("path", "index"),
    [(p, i) for p in _manifests() for i in range(len(_documents(p)))],
    ids=lambda value: value.name if isinstance(value, Path) else str(value),
)
def test_every_manifest_is_valid_for_kubernetes_strictly(path: Path, index: int) -> None:
    document = _documents(path)[index]
    try:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = "/".join(str(part) for part in exc.path)
        pytest.fail(f"{path.name} {document.get('kind')}: {where}: {exc.message}")


def test_the_kustomization_applies_every_manifest_but_the_example_secrets() -> None:
    listed = set(_kustomization()["resources"])
    assert listed == {p.name for p in _manifests()} - {EXAMPLE_SECRETS.name}


def test_everything_lives_in_the_kustomization_namespace() -> None:
    namespace = _kustomization()["namespace"]
    assert _one("Namespace", namespace)
    for doc in _all():
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == namespace, doc["metadata"]["name"]


def _port(setting: str) -> int:
    listen = _one("ConfigMap", "rollout-config")["data"][setting]
    return int(listen.rsplit(":", 1)[1])


def _api_port() -> int:
    return _port("ROLLOUT_LISTEN")


def _containers(kind: str, name: str) -> list[dict[str, Any]]:
    return list(_one(kind, name)["spec"]["template"]["spec"]["containers"])


def test_the_server_probes_the_grpc_health_service_on_the_health_port() -> None:
    # The API speaks only TLS, which the kubelet's gRPC probe cannot: the probes go to
    # ROLLOUT_HEALTH_LISTEN, which serves grpc.health.v1 alone (tests/e2e/test_health_listen.py).
    health = _port("ROLLOUT_HEALTH_LISTEN")
    assert health != _api_port()
    for container in _containers(*SERVER):
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert named["grpc"] == _api_port(), "the grpc containerPort is where ROLLOUT_LISTEN is"
        assert named["health"] == health, "the health containerPort is ROLLOUT_HEALTH_LISTEN's"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"] == {"port": health}, f"{container['name']} {probe}"


def test_no_service_exposes_the_health_port() -> None:
    for name in ("rollout", "rollout-headless"):
        ports = _one("Service", name)["spec"]["ports"]
        assert "health" not in [p["targetPort"] for p in ports], name
        assert _port("ROLLOUT_HEALTH_LISTEN") not in [p["port"] for p in ports], name


def test_the_api_speaks_tls_from_the_mounted_rollout_tls_secret() -> None:
    data = _one("ConfigMap", "rollout-config")["data"]
    pod = _one(*SERVER)["spec"]["template"]["spec"]
    volume = next(
        v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "rollout-tls"
    )
    assert volume["secret"]["defaultMode"] == 0o400, "readable by the root server only"
    [mount] = [
        m for c in pod["containers"] for m in c["volumeMounts"] if m["name"] == volume["name"]
    ]
    examples = {s["metadata"]["name"]: s for s in _documents(EXAMPLE_SECRETS)}
    for setting, key in (("ROLLOUT_TLS_CERT_FILE", "tls.crt"), ("ROLLOUT_TLS_KEY_FILE", "tls.key")):
        assert Path(data[setting]) == Path(mount["mountPath"]) / key, setting
        assert key in examples["rollout-tls"]["stringData"], key


def test_allow_insecure_listen_is_needed_for_the_metrics_endpoint_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in _one("ConfigMap", "rollout-config")["data"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ROLLOUT_ALLOW_INSECURE_LISTEN", "false")
    settings = load_settings([])
    # The API has TLS (the test above) and tokens; the proxy stays on loopback.
    check_exposure(settings, encrypted=True, authenticated=True)
    check_proxy_exposure(settings)
    with pytest.raises(ConfigError, match="ROLLOUT_METRICS_LISTEN"):
        check_metrics_exposure(settings)


def test_the_health_probes_need_no_token() -> None:
    # The kubelet's gRPC probe sends no metadata: a closed health service fails every probe.
    data = _one("ConfigMap", "rollout-config")["data"]
    assert data.get("ROLLOUT_AUTH_HEALTH_OPEN", "true") == "true"


def test_the_headless_service_selects_the_server_pods_on_the_grpc_port() -> None:
    headless = _one("Service", "rollout-headless")["spec"]
    assert headless["clusterIP"] == "None"
    pods = _one(*SERVER)["spec"]["template"]["metadata"]["labels"]
    assert headless["selector"].items() <= pods.items()
    assert [p["targetPort"] for p in headless["ports"]] == ["grpc"]
    assert _one("Service", "rollout")["spec"]["selector"] == headless["selector"]


def test_the_deployment_runs_three_replicas_on_one_shared_database() -> None:
    server = _one(*SERVER)
    assert server["spec"]["replicas"] == 3
    env = {e["name"]: e for c in _containers(*SERVER) for e in c.get("env", [])}
    assert env["ROLLOUT_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "rollout-postgres"


def _secret_references(pod: dict[str, Any]) -> set[tuple[str, str | None]]:
    """(secret, key) pairs the pod spec reads; key None for a whole secret volume."""
    refs: set[tuple[str, str | None]] = set()
    for container in pod["containers"]:
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add((ref["name"], ref["key"]))
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            refs.add((volume["secret"]["secretName"], None))
    return refs


@pytest.mark.parametrize(
    ("kind", "name"), [SERVER, ("StatefulSet", "rollout-postgres")], ids=lambda v: v
)
def test_secrets_are_referenced_never_written_into_a_workload(kind: str, name: str) -> None:
    pod = _one(kind, name)["spec"]["template"]["spec"]
    for container in pod["containers"]:
        for env in container.get("env", []):
            if _SECRET_WORDS.search(env["name"]):
                assert "value" not in env, f"{env['name']} is written into the {kind}"
    examples = {s["metadata"]["name"]: s for s in _documents(EXAMPLE_SECRETS)}
    for secret, key in _secret_references(pod):
        assert secret in examples, f"{secret}: not in {EXAMPLE_SECRETS.name}"
        assert key is None or key in examples[secret]["stringData"], f"{secret}/{key}"


def test_the_config_map_holds_no_secret_and_only_real_settings() -> None:
    data = _one("ConfigMap", "rollout-config")["data"]
    for name in data:  # a *_FILE setting names a file of a mounted secret: a path is no secret
        assert name.endswith("_FILE") or not _SECRET_WORDS.search(name), f"{name} is a secret"
    env = [e["name"] for c in _containers(*SERVER) for e in c.get("env", [])]
    known = set(Settings.model_fields)
    unknown = [n for n in [*data, *env] if n.removeprefix("ROLLOUT_").lower() not in known]
    assert not unknown, f"not settings of the server (a typo is silently ignored): {unknown}"


def test_the_server_accepts_the_config_maps_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in _one("ConfigMap", "rollout-config")["data"].items():
        monkeypatch.setenv(name, value)
    settings = load_settings([])
    assert settings.listen == f"0.0.0.0:{_api_port()}"


def test_the_token_file_is_inside_the_mounted_tokens_secret() -> None:
    token_file = Path(_one("ConfigMap", "rollout-config")["data"]["ROLLOUT_AUTH_TOKEN_FILE"])
    pod = _one(*SERVER)["spec"]["template"]["spec"]
    volume = next(
        v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "rollout-tokens"
    )
    mounts = [
        m for c in pod["containers"] for m in c["volumeMounts"] if m["name"] == volume["name"]
    ]
    assert [token_file.parent] == [Path(m["mountPath"]) for m in mounts]
    examples = {s["metadata"]["name"]: s for s in _documents(EXAMPLE_SECRETS)}
    assert token_file.name in examples["rollout-tokens"]["stringData"]
    assert volume["secret"]["defaultMode"] == 0o400, "readable by the root server only"


def test_one_image_name_from_the_build_script_to_the_deployment() -> None:
    built = re.search(r'TAG="\$\{1:-([^}]+)\}"', (DEPLOY / "build_image.sh").read_text())
    assert built is not None
    name, tag = built.group(1).rsplit(":", 1)
    images = {c["image"] for c in _containers(*SERVER)}
    assert images == {f"{name}:{tag}"}
    assert {"name": name, "newTag": tag} in _kustomization()["images"]


def _ci_packages() -> set[str]:
    ci = (DEPLOY.parent / ".ci" / "run").read_text()
    block = re.search(r"APT_PACKAGES=\((.*?)\n\)", ci, re.DOTALL)
    assert block is not None
    return set(re.findall(r"\[([\w.+-]+)\]=", block.group(1)))


def _image_packages() -> set[str]:
    containerfile = (DEPLOY / "Containerfile").read_text().replace("\\\n", " ")
    install = re.search(r"apt-get install -y --no-install-recommends ([^&]+)", containerfile)
    assert install is not None
    return set(install.group(1).split())


def test_the_image_installs_every_system_package_the_server_is_tested_with() -> None:
    # What only tests need: TLS test certificates, the llama server's build, the dashboard's
    # browser tests, the PostgreSQL store tests' own server (the cluster has rollout-postgres).
    test_only = {"openssl", "build-essential", "chromium", "postgresql"}
    missing = _ci_packages() - test_only - _image_packages()
    assert not missing, f".ci/run installs these for the server, the image does not: {missing}"
