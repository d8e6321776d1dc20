"""What an image sandbox sees: the image, and of the host only what the service shares.

Mounts inside a local sandbox on an image, in order (a later mount covers an earlier one):

    /                      the image through the sandbox's own overlay, writable
                           (`overlay_start`): its writes land on its own disk, never
                           in the image; root inside is the sandbox's own host id block
    /dev, /proc            fresh; /proc shows only the sandbox's own pid namespace
    <cache dir>            the service's downloads (opencode), read-only, at the host's
                           path, as agents expect them; its `images/` hidden by an empty
                           tmpfs (other images' files are not this sandbox's business)
    <server interpreter>   read-only, only where it is not a system directory the image
                           has its own of (/usr, /bin, /lib ...): the venv (sys.prefix)
                           and a base_prefix such as ~/.pyenv/versions/X, for the tools
                           installed beside the interpreter (opencode's rg)
    KIT_DIR (/.rollout/host)  the host's loader, libraries, sh, sleep, interpreter with
                           its standard library and the proxy's forwarder, read-only, at
                           a private prefix (`host_kit`): the holder and the forwarder
                           run on these, never on the image's (which may lack them)
    /etc/resolv.conf       the one resolver a FULL sandbox can reach (`network`)
    PROXY_DIR              the sandbox's own proxy directory, read-only, as on the host root

Nothing else of the host: no host /etc, /home, /srv, /opt, state dir or other sandbox.
The holder checks that the image has bash on its PATH (every command is `bash -c`) and
otherwise refuses to start, naming what is missing: the rollout fails as SANDBOX at
creation rather than at its first command.
The image's users and groups are its own (/etc/passwd of the image); commands run as its
root, HOME stays `base.HOME` (made in the overlay) and they start in `base.WORKDIR`.
"""

from __future__ import annotations

import os
import shlex
import sys

from service.images import ImageConfig
from service.sandboxes.base import HOME, PROXY_DIR
from service.sandboxes.local.bwrap import HostView, SandboxLayout, bind_args
from service.sandboxes.local.host_kit import KIT_DIR, host_kit
from service.sandboxes.local.image import image_dirs

__all__ = [
    "IMAGE_PATH",
    "image_env",
    "image_holder_command",
    "image_mount_args",
    "image_mount_points",
    "image_shared",
]

IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""PATH inside when the image's config sets none."""
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/var")
_IMAGES_DIR = "images"


def _is_system(path: str) -> bool:
    return path == "/" or any(path == t or path.startswith(t + "/") for t in _SYSTEM_TREES)


def image_shared(view: HostView) -> tuple[str, ...]:
    """Host paths bound read-only into every image sandbox (see the module's table)."""
    interpreter = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)]
    paths = [*view.shared, *(p for p in interpreter if not _is_system(p))]
    return tuple(dict.fromkeys(paths))


def _binds(view: HostView) -> list[tuple[str, str]]:
    """(host path, path inside) of every read-only bind but the proxy directory's."""
    return [*((path, path) for path in image_shared(view)), *host_kit().binds]


def image_mount_points(view: HostView) -> list[str]:
    """Where bwrap mounts into the image: made ahead in the overlay (`prepare_upper`).

    A file's mount point is its parent directory here (bwrap makes the file)."""
    points = [
        os.path.dirname(inside) if os.path.isfile(host) else inside for host, inside in _binds(view)
    ]
    return [*dict.fromkeys(points), PROXY_DIR]


def image_mount_args(view: HostView, layout: SandboxLayout) -> list[str]:
    """bwrap's mounts for a sandbox on an image (`bwrap.holder_argv`)."""
    args = ["--bind", image_dirs(layout)["root"], "/", "--dev", "/dev", "--proc", "/proc"]
    for host, inside in _binds(view):
        args += bind_args("--ro-bind", host, inside)
    for cache in view.shared:
        if os.path.isdir(os.path.join(cache, _IMAGES_DIR)):
            args += ["--tmpfs", os.path.join(cache, _IMAGES_DIR)]
    args += ["--ro-bind", str(layout.resolv_conf), "/etc/resolv.conf"]
    return args + bind_args("--ro-bind", str(layout.proxy_dir), PROXY_DIR)


def image_env(config: ImageConfig) -> dict[str, str]:
    """A command's basic environment on an image: the image's ENV over a root's basics."""
    basics = {"PATH": IMAGE_PATH, "HOME": HOME, "USER": "root", "LANG": "C.UTF-8", "TERM": "dumb"}
    return {**basics, **config.env, "HOME": HOME}


def image_holder_command(config: ImageConfig) -> list[str]:
    """The holder's command on an image (`bwrap.holder_argv`): the kit's sh checks the
    image can run commands, says `ready` and becomes the kit's sleep."""
    kit = host_kit()
    path = image_env(config)["PATH"]
    sleep = shlex.join(kit.argv(f"{KIT_DIR}/bin/sleep", "infinity"))
    missing = f"the image has no bash on its PATH ({path}): every command runs as bash -c"
    script = (
        f"PATH={shlex.quote(path)}; command -v bash >/dev/null || "
        f"{{ echo {shlex.quote(missing)} >&2; exit 1; }}; echo ready && exec {sleep}"
    )
    return kit.argv(f"{KIT_DIR}/bin/sh", "-c", script)
