"""Stamp vLLM's `priority` field from the priority a request runs at in the gateway.

vLLM started with `--scheduling-policy priority` orders its own waiting queue (and preempts) by
the request body's integer `priority`, lower first; with the default fcfs policy it ignores it.
With `engine_priority` on, the gateway writes the field on every admitted generation request,
overwriting what the client sent (a client could otherwise jump the engine's queue past its
key's highest priority), so the order the gateway keeps also holds inside the engine.
"""

from __future__ import annotations

import json

VLLM_PRIORITY = {"high": -1, "normal": 0, "low": 1}
"""The gateway's priority -> vLLM's; normal is vLLM's default 0, so traffic sent to vLLM
directly sits with the gateway's normal requests."""


def stamp(body: bytes, priority: str) -> bytes:
    """The body with `priority` set; a body that is not a JSON object goes as it came."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body
    if not isinstance(data, dict):
        return body
    data["priority"] = VLLM_PRIORITY[priority]
    return json.dumps(data, separators=(",", ":")).encode()
