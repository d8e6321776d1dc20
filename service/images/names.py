"""Image names: one spelling per image, as Docker and containers/image write a reference.

    name as given                   stored and looked up as
    debian:bookworm                 docker.io/library/debian:bookworm   (a Docker Hub short name)
    rollout/base                    docker.io/rollout/base:latest       (`:latest` when untagged)
    ghcr.io/org/base:1              ghcr.io/org/base:1                  (a registry host is kept:
    localhost:5000/x, localhost/x   localhost:5000/x:latest, ...         '.' or ':' or localhost)

`qualify` is that one spelling, used by every build, import, lookup and admission, so an image
imported or built as `ghcr.io/org/base:1` is the one a Dockerfile's `FROM ghcr.io/org/base:1`
finds. No name is ever pulled: a registry host in a name is only part of the name. A short
name also finds an image stored as `localhost/<name>`, which is how buildah and podman name
their local builds (and how this store named every image before).

Aliases (`Settings.image_aliases`, ROLLOUT_IMAGE_ALIASES) let an operator say "this public
image is that local one" (air-gapped machines, mirrors): a key is a name, or a pattern with
one `*`; a value is a local name, in which `*` stands for what the pattern's `*` matched.
Exact names are tried before patterns, patterns in the order given; one hop, never chained.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from service.errors import ConfigError, ImageError

__all__ = ["ImageAliases", "candidates", "qualify"]

_HUB = "docker.io"
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}")


def _split_domain(name: str) -> tuple[str, str]:
    """(registry host, the rest); Docker's rule: the first component is a host if it has a
    '.' or a ':' or is `localhost`."""
    first, slash, rest = name.partition("/")
    if slash and first == "index.docker.io":
        return _HUB, rest
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return _HUB, name


def qualify(name: str) -> str:
    """`debian:bookworm` -> `docker.io/library/debian:bookworm`: the store's one spelling."""
    if not name or name != name.strip() or any(c.isspace() for c in name):
        raise ImageError(name, "name", "an image name is non-empty and has no spaces")
    domain, rest = _split_domain(name)
    path, at, digest = rest.partition("@")
    repository, colon, tag = path.rpartition(":") if ":" in path else (path, "", "")
    if domain == _HUB and "/" not in repository:
        repository = f"library/{repository}"
    if not all(_COMPONENT.fullmatch(part) for part in repository.split("/")):
        raise ImageError(
            name, "name", "an image name's path is lowercase letters, digits and . _ - separators"
        )
    if (colon and not _TAG.fullmatch(tag)) or (at and not _DIGEST.fullmatch(digest)):
        raise ImageError(name, "name", "an image name's tag or digest is malformed")
    suffix = (f":{tag}" if colon else "") + (f"@{digest}" if at else "")
    return f"{domain}/{repository}{suffix or ':latest'}"


def candidates(name: str) -> list[str]:
    """The stored names `name` may be found under: its own spelling, then for a name with no
    registry host the `localhost/` one (buildah's and podman's local builds)."""
    qualified = qualify(name)
    domain, rest = _split_domain(name)
    if domain != _HUB or name.startswith(f"{_HUB}/") or name.startswith("index.docker.io/"):
        return [qualified]
    return [qualified, qualify(f"localhost/{rest}")]


@dataclass(frozen=True)
class _Alias:
    key: str
    pattern: re.Pattern[str] | None
    target: str


class ImageAliases:
    """The operator's aliases, checked once (ConfigError naming the setting); `targets` gives
    what a name may stand for."""

    def __init__(self, aliases: Mapping[str, str]) -> None:
        exact, patterns = [], []
        for key, target in aliases.items():
            if key.count("*") > 1 or ("*" in target and "*" not in key):
                raise ConfigError(
                    f"ROLLOUT_IMAGE_ALIASES: {key!r}: a key has at most one '*', and a value "
                    "has a '*' only if its key does"
                )
            if "*" in key:
                head, tail = key.split("*")
                regex = re.compile(f"{re.escape(_pattern_head(head))}(.+){re.escape(tail)}")
                patterns.append(_Alias(key, regex, target))
            else:
                exact.append(_Alias(_setting(key), None, _setting(target)))
        self._aliases = exact + patterns

    def targets(self, name: str) -> list[tuple[str, str]]:
        """(alias key, the local name it points at) for each alias matching `name`."""
        qualified = qualify(name)
        found = []
        for alias in self._aliases:
            if alias.pattern is None:
                if alias.key == qualified:
                    found.append((alias.key, alias.target))
            elif matched := alias.pattern.fullmatch(qualified):
                found.append((alias.key, _substituted(alias, matched[1], name)))
        return found

    def __bool__(self) -> bool:
        return bool(self._aliases)


def _setting(name: str) -> str:
    try:
        return qualify(name)
    except ImageError as exc:
        raise ConfigError(f"ROLLOUT_IMAGE_ALIASES: {name!r}: {exc.detail}") from exc


def _substituted(alias: _Alias, matched: str, name: str) -> str:
    target = alias.target.replace("*", matched)
    try:
        return qualify(target)
    except ImageError as exc:
        why = f"the alias {alias.key} -> {alias.target} makes {target!r}: {exc.detail}"
        raise ImageError(name, "alias", why) from exc


def _pattern_head(head: str) -> str:
    """The part of a pattern before its `*`, spelled as `qualify` spells names (`python:*`
    matches `docker.io/library/python:...`, `t-bench/*` matches `docker.io/t-bench/...`)."""
    if not head:
        return head
    domain, rest = _split_domain(head)
    if rest and domain == _HUB and "/" not in rest:
        rest = f"library/{rest}"
    return f"{domain}/{rest}"
