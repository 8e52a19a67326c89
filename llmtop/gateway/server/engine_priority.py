"""Stamp vLLM's `priority` field from the priority a request runs at in the gateway. vLLM with
`--scheduling-policy priority` orders its waiting queue (and preempts) by the body's integer
`priority`, lower first (fcfs ignores it). With `engine_priority` on, the field is overwritten on
every admitted generation request (else a client could jump the engine's queue past its key's
highest), so the gateway's order also holds inside the engine."""

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
