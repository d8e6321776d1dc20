"""`freeze_startup_objects`: what the server made at start is out of the collector's reach, and
young collections are rarer (in a fresh interpreter: the freeze is for the whole process)."""

from __future__ import annotations

import subprocess
import sys


def test_startup_objects_are_frozen_and_young_collections_rarer() -> None:
    script = (
        "import gc\n"
        "from service.memory import freeze_startup_objects\n"
        "before = gc.get_freeze_count()\n"
        "freeze_startup_objects()\n"
        "left = len(gc.get_objects())\n"
        "print(before, gc.get_freeze_count(), left, gc.get_threshold()[0])\n"
    )
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    before, frozen, left, young = (int(value) for value in done.stdout.split())
    assert before == 0
    assert frozen > 1_000  # the interpreter's and the service's modules at least
    assert left < 100  # every survivor was frozen: the collector's generations are ~empty
    assert young == 10_000
