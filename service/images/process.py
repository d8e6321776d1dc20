"""Running the image tools (mmdebstrap, buildah, skopeo, cp) with their output as progress.

Every line a tool prints becomes an `ImageProgress`, so a long build is never a silent hang;
a failure or a timeout becomes one `ImageError` naming the image, the step and the tool's last
lines. Cancelling the caller kills the tool's whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from collections.abc import Sequence

from service.errors import ImageError
from service.images.models import ImageProgress, ProgressCallback

__all__ = ["DEBIAN_PACKAGE_OF", "run_tool"]

DEBIAN_PACKAGE_OF = {"mmdebstrap": "mmdebstrap", "buildah": "buildah", "skopeo": "skopeo"}
"""The Debian package that provides each tool, for the error when one is missing."""
_TAIL_LINES = 20


async def run_tool(
    argv: Sequence[str],
    *,
    image: str,
    step: str,
    on_progress: ProgressCallback,
    timeout_s: float,
) -> list[str]:
    """Run `argv` to completion; return its output lines (stdout and stderr interleaved)."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        package = DEBIAN_PACKAGE_OF.get(argv[0], argv[0])
        message = f"{argv[0]} is not installed (apt-get install {package})"
        raise ImageError(image, step, message) from exc
    lines: list[str] = []
    try:
        async with asyncio.timeout(timeout_s):
            await _pump(process, lines, image, step, on_progress)
            code = await process.wait()
    except TimeoutError as exc:
        raise ImageError(image, step, f"{argv[0]} took over {timeout_s:.0f}s; killed") from exc
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    if code != 0:
        tail = "\n".join(deque(lines, maxlen=_TAIL_LINES))
        raise ImageError(image, step, f"{argv[0]} failed (exit {code}):\n{tail}")
    return lines


async def _pump(
    process: asyncio.subprocess.Process,
    lines: list[str],
    image: str,
    step: str,
    on_progress: ProgressCallback,
) -> None:
    assert process.stdout is not None
    async for raw in process.stdout:
        line = raw.decode(errors="replace").rstrip()
        lines.append(line)
        if line:
            on_progress(ImageProgress(image=image, step=step, message=line))
