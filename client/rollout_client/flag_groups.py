"""Flag groups: options declared once, as the parameters of a builder, shared by commands.

Typer has no parent parsers; this is its equivalent. A builder is a function whose
parameters are typer options and whose result is what a command wants:

    def endpoint_flags(model: Annotated[str | None, typer.Option()] = None) -> Endpoint: ...

    @app.command()
    @with_flags(endpoint_flags, into="endpoint")
    def run(spec_file: ..., endpoint: Endpoint) -> None: ...

The command's `endpoint` parameter leaves its command line, the builder's options join it
(in `--help` too), and the command is called with what the builder made of them. A builder
raises `typer.BadParameter` naming the flag for a bad value. `leave_out` names options a
command does not take: they are neither parsed nor listed, and the builder gets their default.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["with_flags"]

R = TypeVar("R")


def with_flags(
    builder: Callable[..., object], *, into: str, leave_out: frozenset[str] = frozenset()
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A decorator giving a command the options of `builder`, built into its `into` argument."""
    every = inspect.signature(builder, eval_str=True).parameters
    if not leave_out <= set(every):
        raise TypeError(f"{builder.__name__} has no flags {sorted(leave_out - set(every))}")
    flags = {name: p for name, p in every.items() if name not in leave_out}

    def decorate(command: Callable[..., R]) -> Callable[..., R]:
        own = inspect.signature(command, eval_str=True)
        if into not in own.parameters:
            raise TypeError(f"{command.__name__} has no parameter {into!r} to build")
        kept = [p for name, p in own.parameters.items() if name != into]
        clash = {p.name for p in kept} & set(flags)
        if clash:
            raise TypeError(f"{command.__name__}: {sorted(clash)} are flags of {builder.__name__}")

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> R:
            given = {name: kwargs.pop(name) for name in flags}
            return command(*args, **kwargs, **{into: builder(**given)})

        # Keyword-only: typer passes everything by name, and the order of defaults is free.
        parameters = [p.replace(kind=p.KEYWORD_ONLY) for p in (*kept, *flags.values())]
        # typer reads a command's options from its signature and annotations.
        wrapper.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        return wrapper

    return decorate
