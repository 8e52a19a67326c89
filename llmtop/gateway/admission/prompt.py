"""Prompt size for the token budget, read from an OpenAI request body without a tokenizer: exact for
token-id prompts (`"prompt": [1, 2, 3]`), about one token per four characters for text (completions
`prompt`, chat `messages` content, responses `input`). The body is parsed only when the token
budget is on; a body that is not JSON counts as 0 (the engine will refuse it)."""

from __future__ import annotations

import json
from typing import Any

CHARS_PER_TOKEN = 4


def _text_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def value_tokens(value: Any) -> int:
    """Tokens of a prompt-like value: a string, token ids, or lists of either."""
    if isinstance(value, str):
        return _text_tokens(value)
    if isinstance(value, list):
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return len(value)
        return sum(value_tokens(v) for v in value)
    if isinstance(value, dict):
        # chat content parts ({"type": "text", "text": ...}) and responses input items
        return value_tokens(value.get("text")) + value_tokens(value.get("content"))
    return 0


def prompt_tokens(body: bytes) -> int:
    """Estimated prompt tokens of a completions, chat or responses request body."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return 0
    if not isinstance(obj, dict):
        return 0
    if "prompt" in obj:
        return value_tokens(obj["prompt"])
    if "messages" in obj:
        return value_tokens(obj["messages"])
    return value_tokens(obj.get("input"))
