"""The secrets an agent was handed never reach published output, however it is chunked."""

from __future__ import annotations

import pytest

from service.engine.output_scrub import REDACTED, OutputScrubber
from service.models import AgentOutput, AgentOutputKind

TOKEN = "tok-4f9a2c1be07d"
STDOUT = AgentOutputKind.STDOUT


def published(chunks: list[AgentOutput], secrets: tuple[str, ...] = (TOKEN,)) -> list[AgentOutput]:
    out: list[AgentOutput] = []
    scrubber = OutputScrubber(out.append, secrets)
    for chunk in chunks:
        scrubber(chunk)
    scrubber.flush()
    return out


def text_of(outputs: list[AgentOutput], kind: AgentOutputKind = STDOUT) -> str:
    return "".join(o.text for o in outputs if o.kind is kind)


@pytest.mark.parametrize("cut", range(1, len(TOKEN)))
def test_a_secret_split_across_chunks_is_redacted(cut: int) -> None:
    line = f"OPENAI_API_KEY={TOKEN}\n"
    at = line.index(TOKEN) + cut
    outputs = published(
        [AgentOutput(kind=STDOUT, text=line[:at]), AgentOutput(kind=STDOUT, text=line[at:])]
    )
    assert text_of(outputs) == f"OPENAI_API_KEY={REDACTED}\n"


def test_streams_are_scrubbed_apart_and_held_text_is_flushed() -> None:
    outputs = published(
        [
            AgentOutput(kind=STDOUT, text="ends with tok-4f"),
            AgentOutput(kind=AgentOutputKind.STDERR, text=f"err {TOKEN}"),
            AgentOutput(kind=AgentOutputKind.TEXT, text=f"said {TOKEN}"),
        ]
    )
    assert text_of(outputs) == "ends with tok-4f"  # no secret after all: flushed at the end
    assert text_of(outputs, AgentOutputKind.STDERR) == f"err {REDACTED}"
    assert text_of(outputs, AgentOutputKind.TEXT) == f"said {REDACTED}"


def test_a_short_placeholder_key_is_left_alone() -> None:
    outputs = published([AgentOutput(kind=STDOUT, text="key is x")], secrets=("x",))
    assert text_of(outputs) == "key is x"
