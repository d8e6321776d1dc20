"""Harbor task directories as rollout input: read (`source`), mapped onto a spec (`mapping`),
their environment built into an image (`tasks`); what the engine uses of them is exported
here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.harbor.mapping import task_template_name
    from service.harbor.tasks import HarborTasks

__all__ = ["HarborTasks", "task_template_name"]

__getattr__ = door(__name__)
