"""Request parsing and response shapes of the sim's OpenAI API (no HTTP)."""

from __future__ import annotations

import json

import pytest

from llmtop.sim.openai import BadRequest, ChunkWriter, ParsedRequest, parse_request, text_tokens


def parse(body: object, chat: bool = False) -> ParsedRequest:
    return parse_request(json.dumps(body).encode(), chat=chat, served_model="m")


def test_token_ids_count_exactly_and_text_by_characters() -> None:
    assert parse({"prompt": list(range(4000))}).prompt_tokens == 4000
    assert parse({"prompt": [list(range(7))]}).prompt_tokens == 7
    assert parse({"prompt": "abcdefghi"}).prompt_tokens == 3
    assert text_tokens("") == 1
    chat = parse({"messages": [{"role": "user", "content": "abcd" * 10}]}, chat=True)
    assert chat.prompt_tokens == 3 + 4 + 10


def test_defaults_and_options() -> None:
    req = parse({"model": "m", "prompt": "x"})
    assert req.max_tokens == 16
    assert not req.stream
    chat = parse(
        {
            "messages": [{"role": "user", "content": "x"}],
            "max_completion_tokens": 9,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        chat=True,
    )
    assert chat.max_tokens == 9
    assert chat.stream
    assert chat.include_usage
    assert parse({"messages": [{"role": "user"}]}, chat=True).max_tokens is None


@pytest.mark.parametrize(
    ("raw", "status", "needle"),
    [
        (b"{not json", 400, "JSON decode error"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"model": "other", "prompt": "x"}', 404, "does not exist"),
        (b'{"model": "m"}', 400, "'prompt' is required"),
        (b'{"prompt": ["a", "b"]}', 400, "one prompt"),
        (b'{"prompt": "x", "max_tokens": 0}', 400, "at least 1"),
        (b'{"prompt": "x", "max_tokens": "9"}', 400, "at least 1"),
    ],
)
def test_bad_requests(raw: bytes, status: int, needle: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_request(raw, chat=False, served_model="m")
    assert info.value.status == status
    assert needle in info.value.message


def test_chunks_are_vllm_json() -> None:
    req = parse_request(b'{"prompt": "x", "stream": true}', chat=False, served_model='m"q')
    w = ChunkWriter(req, 123)
    first = json.loads(w.token(0, None).removeprefix("data: "))
    assert first["model"] == 'm"q'
    assert first["choices"][0]["finish_reason"] is None
    last = json.loads(w.token(5, "length").removeprefix("data: "))
    assert last["choices"][0]["finish_reason"] == "length"
    assert json.loads(w.usage(6).removeprefix("data: "))["usage"]["completion_tokens"] == 6
    chat = parse_request(
        b'{"messages": [{"role": "user", "content": "x"}]}', chat=True, served_model="m"
    )
    cw = ChunkWriter(chat, 1)
    c0 = json.loads(cw.token(0, None).removeprefix("data: "))
    c1 = json.loads(cw.token(1, None).removeprefix("data: "))
    assert c0["choices"][0]["delta"]["role"] == "assistant"
    assert "role" not in c1["choices"][0]["delta"]
    full = cw.full(3, "length")
    assert full["choices"][0]["message"]["content"] == " The engine is"
    assert full["usage"]["total_tokens"] == chat.prompt_tokens + 3
