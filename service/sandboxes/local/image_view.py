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
                           and a base_prefix such as ~/.pyenv/versions/X; the capture
                           proxy's forwarder runs on it (`proxy.access`). On a
                           /usr/bin/python3 server the image's own python3.X at that path
                           serves, as the Debian base's does on a Debian host of its release
    forward.py             the forwarder script alone, read-only, at the host's path
    /etc/resolv.conf       under network FULL: the one resolver it can reach
    PROXY_DIR              the sandbox's own proxy directory, read-only, as on the host root

Nothing else of the host: no host /etc, /home, /srv, /opt, state dir or other sandbox.
The image's users and groups are its own (/etc/passwd of the image); commands run as its
root, HOME stays `base.HOME` (made in the overlay) and they start in `base.WORKDIR`.
"""

from __future__ import annotations

import os
import sys

from service.images import ImageConfig
from service.models import NetworkPolicy
from service.proxy import forward
from service.sandboxes.base import HOME, PROXY_DIR
from service.sandboxes.local.bwrap import HostView, SandboxLayout, bind_args
from service.sandboxes.local.image import image_dirs

__all__ = [
    "IMAGE_PATH",
    "image_env",
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
    forwarder = os.path.realpath(forward.__file__)
    paths = [*view.shared, *(p for p in interpreter if not _is_system(p)), forwarder]
    return tuple(dict.fromkeys(paths))


def image_mount_points(view: HostView) -> list[str]:
    """Where bwrap mounts into the image: made ahead in the overlay (`prepare_upper`).

    A file's mount point is its parent directory here (bwrap makes the file)."""
    points = [path for path in image_shared(view) if not os.path.isfile(path)]
    files = [path for path in image_shared(view) if os.path.isfile(path)]
    points += [os.path.dirname(path) for path in files]
    return [*points, PROXY_DIR]


def image_mount_args(view: HostView, layout: SandboxLayout, network: NetworkPolicy) -> list[str]:
    """bwrap's mounts for a sandbox on an image (`bwrap.holder_argv`)."""
    args = ["--bind", image_dirs(layout)["root"], "/", "--dev", "/dev", "--proc", "/proc"]
    for path in image_shared(view):
        args += bind_args("--ro-bind", path, path)
    for cache in view.shared:
        if os.path.isdir(os.path.join(cache, _IMAGES_DIR)):
            args += ["--tmpfs", os.path.join(cache, _IMAGES_DIR)]
    if network is NetworkPolicy.FULL:
        args += ["--ro-bind", str(layout.resolv_conf), "/etc/resolv.conf"]
    return args + bind_args("--ro-bind", str(layout.proxy_dir), PROXY_DIR)


def image_env(config: ImageConfig) -> dict[str, str]:
    """A command's basic environment on an image: the image's ENV over a root's basics."""
    basics = {"PATH": IMAGE_PATH, "HOME": HOME, "USER": "root", "LANG": "C.UTF-8", "TERM": "dumb"}
    return {**basics, **config.env, "HOME": HOME}
