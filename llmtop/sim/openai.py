"""The sim's OpenAI API as pure functions: parse, count tokens, build vLLM 0.32's JSON and SSE.

No tokenizer: a token-id list counts its length, text ceil(chars / 4) (at least 1), plus 4 a chat
message and 3 a chat; the output is filler, one word a token. The HTTP side: server.py.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass
from typing import Any

FILLER = tuple(
    re.findall(
        r" \w+|[,.;]",
        " The engine is simulated, but the queue is real."
        " Each token costs a step of the roofline; every step reads the weights and the cache.",
    )
)
"""The sim's answer, one token a word or mark, repeated as long as it must be."""
_FILLER_JSON = tuple(json.dumps(w) for w in FILLER)
SYSTEM_FINGERPRINT = "vllm-0.32.0-llmtop-sim"
DEFAULT_COMPLETION_MAX_TOKENS = 16
"""OpenAI's and vLLM's default max_tokens for /v1/completions; chat defaults to the context."""


class BadRequest(Exception):
    """A request vLLM answers with a 4xx; `kind` is its error type."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        kind: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind
        self.param = param


def error_body(message: str, kind: str, status: int, param: str | None = None) -> dict[str, Any]:
    """vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def text_tokens(text: str) -> int:
    """Tokens of a text: ceil(characters / 4), at least 1."""
    return max(1, math.ceil(len(text) / 4))


def _completion_prompt_tokens(prompt: Any) -> int:
    if isinstance(prompt, str):
        return text_tokens(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)
        if len(prompt) == 1:
            return _completion_prompt_tokens(prompt[0])
        raise BadRequest("llmtop sim serves one prompt per request; send them separately")
    raise BadRequest("'prompt' must be a string or a list of token ids", kind="BadRequestError")


def _chat_prompt_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    total = 3
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise BadRequest("each message needs a 'role' and 'content'")
        content = m.get("content") or ""
        if isinstance(content, list):  # content parts: count their text
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += 4 + (text_tokens(str(content)) if content else 0)
    return total


@dataclass(frozen=True)
class ParsedRequest:
    """What the engine needs from a completion or chat request."""

    chat: bool
    model: str
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool


def parse_request(raw: bytes, *, chat: bool, served_model: str) -> ParsedRequest:
    """Parse a request body, or raise BadRequest with vLLM's message and status."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"JSON decode error: {e}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model") or served_model
    if model != served_model:
        raise BadRequest(
            f"The model `{model}` does not exist.", status=404, kind="NotFoundError", param="model"
        )
    if chat:
        prompt_tokens = _chat_prompt_tokens(body.get("messages"))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    else:
        if "prompt" not in body:
            raise BadRequest("'prompt' is required")
        prompt_tokens = _completion_prompt_tokens(body["prompt"])
        max_tokens = body.get("max_tokens", DEFAULT_COMPLETION_MAX_TOKENS)
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        raise BadRequest(f"max_tokens must be at least 1, got {max_tokens}.")
    options = body.get("stream_options") or {}
    return ParsedRequest(
        chat=chat,
        model=served_model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
    )


def filler_text(start: int, end: int) -> str:
    """The output text of tokens start..end-1."""
    n = len(FILLER)
    return "".join(FILLER[i % n] for i in range(start, end))


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """OpenAI usage block."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


class ChunkWriter:
    """SSE chunks of one response in vLLM's shape, built from string templates (it is hot)."""

    def __init__(self, req: ParsedRequest, created: int) -> None:
        self.req = req
        self.id = ("chatcmpl-" if req.chat else "cmpl-") + secrets.token_hex(16)
        model = json.dumps(req.model)
        if req.chat:
            self._head = (
                f'data: {{"id":"{self.id}","object":"chat.completion.chunk","created":{created},'
                f'"model":{model},"choices":[{{"index":0,"delta":'
            )
        else:
            self._head = (
                f'data: {{"id":"{self.id}","object":"text_completion","created":{created},'
                f'"model":{model},"choices":[{{"index":0,"text":'
            )
        self._created = created

    def token(self, index: int, finish_reason: str | None) -> str:
        """The chunk of output token `index` (0-based); the last one carries finish_reason."""
        word = _FILLER_JSON[index % len(_FILLER_JSON)]
        reason = "null" if finish_reason is None else f'"{finish_reason}"'
        if self.req.chat:
            role = '"role":"assistant",' if index == 0 else ""
            return (
                f'{self._head}{{{role}"content":{word}}},"logprobs":null,'
                f'"finish_reason":{reason},"stop_reason":null}}]}}\n\n'
            )
        return (
            f'{self._head}{word},"logprobs":null,"finish_reason":{reason},"stop_reason":null,'
            f'"prompt_token_ids":null,"token_ids":null}}]}}\n\n'
        )

    def usage(self, completion_tokens: int) -> str:
        """The final usage chunk (stream_options.include_usage)."""
        obj = "chat.completion.chunk" if self.req.chat else "text_completion"
        body = {
            "id": self.id,
            "object": obj,
            "created": self._created,
            "model": self.req.model,
            "choices": [],
            "usage": usage(self.req.prompt_tokens, completion_tokens),
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
        return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"

    def full(self, completion_tokens: int, finish_reason: str) -> dict[str, Any]:
        """The whole non-streaming response."""
        text = filler_text(0, completion_tokens)
        if self.req.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "tool_calls": [],
                    "reasoning_content": None,
                },
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
        return {
            "id": self.id,
            "object": "chat.completion" if self.req.chat else "text_completion",
            "created": self._created,
            "model": self.req.model,
            "choices": [choice],
            "usage": usage(self.req.prompt_tokens, completion_tokens),
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
