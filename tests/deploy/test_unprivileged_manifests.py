"""deploy/k8s-unprivileged: the overlay for a server that is not root, rendered by kustomize
(`kubectl kustomize`, offline) and validated strictly like deploy/k8s
(tests/deploy/test_manifests.py), plus what the overlay exists for: a pod that is neither
privileged nor root, nothing of a root server's left, and the settings the server accepts.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.config import load_settings
from tests.deploy.test_manifests import DEPLOY, KUBERNETES_VERSION

OVERLAY = DEPLOY / "k8s-unprivileged"
pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="renders the overlay with kubectl kustomize"
)


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    output = subprocess.run(
        ["kubectl", "kustomize", str(OVERLAY)], check=True, capture_output=True, text=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc is not None]


def _one(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def test_every_rendered_manifest_is_valid_for_kubernetes_strictly(
    rendered: list[dict[str, Any]],
) -> None:
    for document in rendered:
        try:
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(part) for part in exc.path)
            pytest.fail(f"{document['kind']}/{document['metadata']['name']}: {where}: {exc}")


def test_the_server_is_neither_privileged_nor_root(rendered: list[dict[str, Any]]) -> None:
    pod = _one(rendered, "Deployment", "rollout-server")["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    context = server["securityContext"]
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["runAsUser"] != 0
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["hostUsers"] is False  # what procMount Unmasked needs
    assert context["procMount"] == "Unmasked"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert "id-blocks" not in volumes  # a root server's, on the node
    assert volumes["images"]["persistentVolumeClaim"]["readOnly"] is True
    _one(rendered, "PersistentVolumeClaim", volumes["images"]["persistentVolumeClaim"]["claimName"])
    mounts = {mount["name"]: mount for mount in server["volumeMounts"]}
    assert "id-blocks" not in mounts
    config = _one(rendered, "ConfigMap", "rollout-config")["data"]
    assert mounts["images"]["mountPath"] == config["ROLLOUT_CACHE_DIR"] + "/images"


def test_the_server_accepts_the_overlays_settings(
    rendered: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _one(rendered, "ConfigMap", "rollout-config")["data"]
    assert config["ROLLOUT_SANDBOX_DISK_MB"] == "0"
    for name, value in config.items():
        monkeypatch.setenv(name, value)
    assert load_settings([]).sandbox_disk_mb == 0
