"""Splitting an SSE byte stream into whole events, however it is chunked."""

from __future__ import annotations

from service.proxy.transport.sse import SseSplitter, event_data

STREAM = b'data: {"a":1}\n\n: keep-alive\n\ndata: {"b":\ndata: 2}\r\n\r\ndata: [DONE]\n\n'


def test_events_are_the_same_for_any_chunking() -> None:
    whole = SseSplitter().feed(STREAM)
    assert [event_data(e) for e in whole] == [b'{"a":1}', None, b'{"b":\n2}', b"[DONE]"]
    for size in (1, 2, 3, 7, 16):
        splitter = SseSplitter()
        events: list[bytes] = []
        for start in range(0, len(STREAM), size):
            events += splitter.feed(STREAM[start : start + size])
        assert events == whole
        assert splitter.pending == b""


def test_an_unterminated_event_waits() -> None:
    splitter = SseSplitter()
    assert splitter.feed(b'data: {"a":') == []
    assert splitter.pending == b'data: {"a":'
    assert splitter.feed(b"1}\n\n") == [b'data: {"a":1}\n\n']


def test_an_event_of_60_kb_on_one_line_is_one_event() -> None:
    """vLLM's first event carries the prompt ids: one long line, CRLF or LF, split anywhere."""
    ids = b",".join(b"%d" % i for i in range(12000))
    for end in (b"\n\n", b"\r\n\r\n"):
        first = b'data: {"prompt_token_ids":[' + ids + b"]}" + end
        stream = first + b'data: {"a":1}' + end
        for size in (1000, 4096, 65536, len(stream)):
            splitter = SseSplitter()
            events: list[bytes] = []
            for start in range(0, len(stream), size):
                events += splitter.feed(stream[start : start + size])
            assert events == [first, b'data: {"a":1}' + end]
            assert event_data(events[0]) == first[5:].strip()
    assert event_data(b"data: {\n\n") == b"{"
    assert event_data(b"data: 1\ndata: 2\n\n") == b"1\n2"
