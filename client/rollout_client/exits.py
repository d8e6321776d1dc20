"""How the `rollout` command ends: its exit codes, and client errors as one line on stderr.

0    done; for `run` and `watch`: the rollout SUCCEEDED (and, with --require-reward,
     its reward reached the bar)
1    error: bad spec file, request rejected (INVALID_ARGUMENT), unknown id, server
     unreachable or at capacity; one line on stderr says which
2    bad usage (unknown option, missing argument or instruction, label not key=value)
3    the rollout FAILED (the error kind tells infrastructure from task failure)
4    the rollout TIMED_OUT
5    the rollout was CANCELLED
6    the rollout SUCCEEDED but its reward is unset or below --require-reward
130  interrupted (Ctrl-C); `run` cancels its rollout first
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text
from rollout.v1 import rollout_pb2 as pb

from rollout_client.errors import (
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    SpecError,
    StatusError,
    UnauthenticatedError,
    UnavailableError,
)
from rollout_client.inert import inert
from rollout_client.render import figure, seconds
from rollout_client.results import reward_of
from rollout_client.unreachable import Sent, why_unreachable

__all__ = [
    "EXIT_CODES",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_REWARD_TOO_LOW",
    "EXIT_SUMMARY",
    "client_errors",
    "exit_for",
    "fail",
]

EXIT_ERROR = 1
EXIT_REWARD_TOO_LOW = 6
EXIT_INTERRUPTED = 130
EXIT_CODES = {
    pb.ROLLOUT_STATUS_SUCCEEDED: 0,
    pb.ROLLOUT_STATUS_FAILED: 3,
    pb.ROLLOUT_STATUS_TIMED_OUT: 4,
    pb.ROLLOUT_STATUS_CANCELLED: 5,
}
EXIT_SUMMARY = (
    "Exit codes: 0 done (run/watch: SUCCEEDED), 1 error, 2 bad usage, 3 FAILED, 4 TIMED_OUT,"
    " 5 CANCELLED, 6 reward unset or below --require-reward, 130 interrupted."
)


def fail(message: str) -> NoReturn:
    """Print `error: message` on stderr and exit 1."""
    Console(stderr=True, soft_wrap=True, highlight=False).print(
        Text(f"error: {inert(message)}", style="red")
    )
    raise typer.Exit(EXIT_ERROR)


@contextmanager
def client_errors(target: str, sent: Sent = Sent.PLAINTEXT) -> Iterator[None]:
    """Turn client errors into one line on stderr and exit code 1; `sent` is what the
    client offered in a TLS handshake (`unreachable.Sent`)."""
    try:
        yield
    except InvalidArgumentError as exc:  # before SpecError, which it also is
        fields = "; ".join(map(str, exc.field_violations)) or exc.details
        fail(f"invalid request: {fields}")
    except SpecError as exc:
        fail(str(exc))
    except NotFoundError as exc:
        fail(f"not found: {exc.details}")
    except ResourceExhaustedError as exc:
        wait = seconds(exc.retry_delay_s) if exc.retry_delay_s is not None else "a while"
        fail(f"server at capacity ({exc.details}): retry in {wait}")
    except UnauthenticatedError as exc:
        fail(f"not authenticated ({exc.details}): pass --token-file or set ROLLOUT_TOKEN")
    except UnavailableError as exc:
        fail(why_unreachable(exc.details, target, sent))
    except StatusError as exc:
        fail(str(exc))


def exit_for(rollout: pb.Rollout, require_reward: float | None = None) -> NoReturn:
    """Exit with the code of the rollout's status (and, if asked, of its reward)."""
    code = EXIT_CODES.get(rollout.status, EXIT_ERROR)
    reward = reward_of(rollout)
    if code == 0 and require_reward is not None and (reward is None or reward < require_reward):
        got = "no reward" if reward is None else f"reward {figure(reward)}"
        Console(stderr=True, highlight=False).print(
            f"{got}: below --require-reward {figure(require_reward)}", style="yellow"
        )
        code = EXIT_REWARD_TOO_LOW
    raise typer.Exit(code)
