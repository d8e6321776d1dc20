"""Harbor tasks at admission and at sandbox creation: the one door the engine uses.

At admission (`resolve`) the task directory is read within its bounds (`source`), mapped
onto the spec (`mapping`) with the config of the image it starts from (its WorkingDir is
inherited; a USER other than root is refused: every command of a sandbox runs as its root),
and its `environment/` written under the server's state
directory, named by the task's digest (never under the cache, which sandboxes can read:
only the build context goes there, never tests or solution; `contexts` keeps them within
their budgets, and a task admitted after its context's removal writes it again). Its
Dockerfile's FROM images
must be in the store, or admission fails naming them and how to provide them. At sandbox
creation (`build_image`) that context is built by the image store, cached by content, its
progress reported as phase messages.

With backend e2b the Dockerfile becomes an E2B template instead (`sandbox.template` =
`harbor-task-<digest>`), built by the e2b SDK's template builder on E2B's builders at sandbox
creation unless a template of that name exists (`service.sandboxes.e2b.template`). Its FROM
images are E2B's to pull, so they need not be in the store (one that is lends its WorkingDir),
and an uploaded task's Dockerfile may be built: its RUN steps never run on this host.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from service.config import Settings
from service.errors import FieldViolation, ImageError, SandboxError, SpecError
from service.harbor.contexts import BuildContexts
from service.harbor.mapping import (
    dockerfile_from,
    dockerfile_user,
    resolve_spec,
    task_image_name,
    task_template_name,
)
from service.harbor.source import FIELD, TaskTree, read_archive, read_rooted, tree_digest
from service.images import ImageConfig, ImageProgress, ImageStore, from_images
from service.models import RolloutSpec, SandboxSpec
from service.sandboxes import Capabilities

if TYPE_CHECKING:
    from service.sandboxes import TemplateBuilds

__all__ = ["HarborTasks"]

_MIB = 1024 * 1024
CheckImage = Callable[[SandboxSpec], Awaitable[None]]


class HarborTasks:
    """Resolves Harbor task specs and builds their images for one server."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.contexts = BuildContexts(
            settings.state_dir / "harbor",
            ttl_s=settings.harbor_context_ttl_s,
            max_bytes=settings.harbor_contexts_max_mb * _MIB,
        )
        self._store = ImageStore.of_server(settings)
        self._templates: TemplateBuilds | None = None

    async def resolve(
        self, spec: RolloutSpec, check_image: CheckImage, backend: Capabilities
    ) -> RolloutSpec:
        """The spec a Harbor task directory makes for sandboxes of a `backend` (SpecError
        naming what is wrong)."""
        tree = await asyncio.to_thread(self._read, spec)
        digest = tree_digest(tree)
        if backend.task_templates:
            return await self._resolve_template(spec, tree, digest, check_image)
        dockerfile = "" if spec.sandbox.image else self._dockerfile(tree)
        image = await self._starting_image(spec, dockerfile)
        resolved = resolve_spec(spec, tree, digest, image)
        self._check_user(dockerfile, image)
        if resolved.sandbox.image == task_image_name(digest):
            await self._check_upload_build(spec, resolved.sandbox.image)
            await self._write_context(tree, digest)
            await self._check_parents(dockerfile, resolved.sandbox.image)
        else:
            await check_image(resolved.sandbox)
        return resolved

    async def _resolve_template(
        self, spec: RolloutSpec, tree: TaskTree, digest: str, check_image: CheckImage
    ) -> RolloutSpec:
        """The spec on E2B: the task's template (or the caller's `sandbox.template`)."""
        built = not (spec.sandbox.template or spec.sandbox.image)
        dockerfile = self._dockerfile(tree) if built else ""
        image = await self._starting_image(spec, dockerfile, required=False)
        resolved = resolve_spec(spec, tree, digest, image)
        self._check_user(dockerfile, image)
        template = spec.sandbox.template or task_template_name(digest)
        sandbox = resolved.sandbox.model_copy(
            update={"image": spec.sandbox.image, "template": template}
        )
        resolved = resolved.model_copy(update={"sandbox": sandbox})
        if built:
            self._check_upload_template(spec)
            await self._write_context(tree, digest)
        else:
            await check_image(resolved.sandbox)
        return resolved

    @staticmethod
    def _check_user(dockerfile: str, image: ImageConfig) -> None:
        """Refuse a task whose image would not run as root (every command runs as root)."""
        user = dockerfile_user(dockerfile, image.user) if dockerfile else image.user
        refusal = ImageConfig(user=user).user_refusal("the task's image")
        if refusal:
            raise SpecError([FieldViolation(FIELD, refusal)])

    async def _check_upload_build(self, spec: RolloutSpec, image: str) -> None:
        """Refuse to build an uploaded task's Dockerfile unless the operator allows it: buildah
        runs RUN steps as root on the host (docs/sandboxes.md, Images). A built one is only
        reused."""
        assert spec.harbor_task is not None
        if not spec.harbor_task.archive or self._settings.harbor_upload_builds:
            return
        if await self._store.storage.image_id(image) is None:
            why = (
                "this server builds the Dockerfiles of its task roots only, not uploaded ones "
                "(a build's RUN steps run as root on the server's host); put the task under "
                "ROLLOUT_TASK_ROOTS, name a built image in spec.sandbox.image, or have the "
                "operator set ROLLOUT_HARBOR_UPLOAD_BUILDS=true for trusted callers"
            )
            raise SpecError([FieldViolation(f"{FIELD}.archive", why)])

    def _check_upload_template(self, spec: RolloutSpec) -> None:
        """Refuse to build an uploaded task's Dockerfile as an E2B template unless the operator
        allows it: each build is paid for on the operator's E2B account."""
        assert spec.harbor_task is not None
        if not spec.harbor_task.archive or self._settings.harbor_upload_builds:
            return
        why = (
            "this server builds the Dockerfiles of its task roots only, not uploaded ones "
            "(on E2B each build is a template build on the operator's account); put the task "
            "under ROLLOUT_TASK_ROOTS, name a template in spec.sandbox.template or an image in "
            "spec.sandbox.image, or have the operator set ROLLOUT_HARBOR_UPLOAD_BUILDS=true for "
            "trusted callers"
        )
        raise SpecError([FieldViolation(f"{FIELD}.archive", why)])

    async def _starting_image(
        self, spec: RolloutSpec, dockerfile: str, *, required: bool = True
    ) -> ImageConfig:
        """The config of the image the task's starts from: the spec's image, else the FROM of
        the Dockerfile's last stage (an empty config if it is scratch or not in the store:
        the image check refuses the latter). Not `required` (E2B pulls it), a store that
        cannot answer gives an empty config too."""
        name = (dockerfile_from(dockerfile) or "") if dockerfile else spec.sandbox.image
        try:
            config = await self._store.config(name) if name else None
        except ImageError as exc:
            if not dockerfile or not required:  # another backend's: its check judges
                return ImageConfig()
            raise SpecError([FieldViolation(FIELD, f"FROM {name}: {exc.detail}")]) from exc
        return config or ImageConfig()

    @staticmethod
    def _dockerfile(tree: TaskTree) -> str:
        file = tree.get("environment/Dockerfile")
        try:
            return file.data.decode() if file is not None else ""
        except UnicodeDecodeError:
            return ""  # resolve_spec names it

    def _read(self, spec: RolloutSpec) -> TaskTree:
        assert spec.harbor_task is not None
        settings = self._settings
        task_bytes = settings.harbor_task_max_mb * _MIB
        if not (spec.harbor_task.archive or spec.harbor_task.path):
            raise SpecError([FieldViolation(FIELD, "give a path or an archive")])
        if spec.harbor_task.archive:
            archive_bytes = settings.harbor_archive_max_mb * _MIB
            return read_archive(spec.harbor_task.archive, archive_bytes, task_bytes)
        return read_rooted(spec.harbor_task.path, list(settings.task_roots), task_bytes)

    def add_users(self, users: Callable[[], Iterable[RolloutSpec]]) -> None:
        """Count the build contexts of the specs `users` returns (live rollouts' or groups')
        as in use."""
        self.contexts.add_users(
            lambda: (spec.harbor_task.digest for spec in users() if spec.harbor_task)
        )

    async def _write_context(self, tree: TaskTree, digest: str) -> None:
        """The context on disk, held until the admitting call ends (the rollout or group it
        admits is then live, and holds it), and the budgets kept."""
        self.contexts.hold_for_task(digest)
        wrote = await asyncio.to_thread(self.contexts.write, tree, digest)
        await self.contexts.maybe_sweep(wrote=wrote)

    async def _context(self, spec: RolloutSpec, report: Callable[[str], None]) -> Path:
        """The task's build context, used now; one this server does not have (another
        replica admitted the task, or it was removed before a restart resumed its group) is
        read again from its task root, or is a SandboxError for an uploaded task."""
        harbor = spec.harbor_task
        assert harbor is not None
        context = self.contexts.path(harbor.digest)
        if self.contexts.touch(harbor.digest):
            return context
        if not harbor.path:
            raise SandboxError(
                f"the build context of the uploaded task {harbor.digest[:12]} "
                "(spec.harbor_task.archive) is not on this server (another server admitted "
                "it, or it was removed while unused): submit the task again"
            )
        report(f"the task's build context is not on this server: reading {harbor.path} again")
        try:
            tree = await asyncio.to_thread(
                read_rooted,
                harbor.path,
                list(self._settings.task_roots),
                self._settings.harbor_task_max_mb * _MIB,
            )
        except SpecError as exc:
            raise SandboxError(f"reading spec.harbor_task.path again: {exc}") from exc
        if tree_digest(tree) != harbor.digest:
            raise SandboxError(
                f"spec.harbor_task.path {harbor.path!r} changed since the rollout was admitted "
                f"(digest {harbor.digest[:12]}), and its build context is not on this server"
            )
        await asyncio.to_thread(self.contexts.write, tree, harbor.digest)
        return context

    async def _check_parents(self, dockerfile: str, image: str) -> None:
        """Every FROM image must be in the store (by name or alias). Their USER is not
        checked here: the task's image may set another (`resolve` checks the one it ends
        with). `resolve_spec` has refused a Dockerfile whose FROM lines cannot be read."""
        for parent in from_images(dockerfile, {}, image=image):
            where = f"environment/Dockerfile: FROM {parent}"
            try:
                found = await self._store.resolve(parent)
            except ImageError as exc:
                raise SpecError([FieldViolation(FIELD, f"{where}: {exc.detail}")]) from exc
            if found is None:
                how = self._store.how_to_provide(parent)
                why = f"{where}: no image {parent!r} in the store; {how}"
                raise SpecError([FieldViolation(FIELD, why)])

    async def build_image(self, spec: RolloutSpec, report: Callable[[str], None]) -> None:
        """Build the task's image (or E2B template) if the spec runs on it (a hit costs one
        store query, or one E2B API call)."""
        harbor = spec.harbor_task
        if harbor is not None and spec.sandbox.template == task_template_name(harbor.digest):
            if harbor.path or self.contexts.touch(harbor.digest):
                context = await self._context(spec, report)
            else:  # an upload's template built before is reused without it; a build fails
                context = self.contexts.path(harbor.digest)
            await self._template_builds().ensure(context, spec.sandbox.template, report)
            return
        if harbor is None or spec.sandbox.image != task_image_name(harbor.digest):
            return

        def progress(event: ImageProgress) -> None:
            report(f"image {event.image}: {event.step}: {event.message}"[:500])

        try:
            await self._store.build(
                await self._context(spec, report), spec.sandbox.image, on_progress=progress
            )
        except ImageError as exc:
            raise SandboxError(f"building the task's image: {exc}") from exc

    def _template_builds(self) -> TemplateBuilds:
        """The E2B template builder, imported at first use (the e2b SDK is the e2b backend's
        dependency, loaded only when a rollout asks for that backend)."""
        if self._templates is None:
            from service.sandboxes import TemplateBuilds

            url = self._settings.database_url
            self._templates = TemplateBuilds(url.get_secret_value() if url else None)
        return self._templates
