"""A request's predicted KV footprint in blocks: prompt tokens plus the output it will likely make.
Pure. Prompts are exact for token ids; text is prompt.py's chars/4 times a correction learned from
vLLM's `prompt_tokens_total` (no tokenizer on the hot path: the autopilot's budget absorbs errors).
Output is min(max_tokens, a high quantile of recent `request_generation_tokens`): max_tokens before
any is seen, else a default. Both learn from the autopilot's signals, not from unknown intervals."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from llmtop.core.derive.histogram import histogram_quantile
from llmtop.core.derive.signals import add_histograms
from llmtop.core.vllm.scrape import Histogram
from llmtop.gateway.admission.limits import Limits
from llmtop.gateway.admission.prompt import value_tokens

DEFAULT_OUTPUT_TOKENS = 512
"""Expected output of a request without max_tokens, before the engine has finished any."""
OUTPUT_QUANTILE = 0.9
WINDOW_TICKS = 60
"""How many scrapes (about a second each) the learned figures cover."""
MIN_RATIO, MAX_RATIO = 0.25, 4.0


@dataclass(frozen=True)
class PromptShape:
    """What the gateway reads from a body: prompt tokens (exact or estimated) and max_tokens."""

    tokens: int
    exact: bool
    max_tokens: int | None
    stream: bool = True
    """Streamed: the first byte is the first token (else it is the whole answer)."""


def _is_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


def read_shape(body: bytes) -> PromptShape:
    """The prompt shape of a completions, chat or responses body; empty for a body that is not
    a JSON object (the engine will refuse it)."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return PromptShape(0, True, None)
    if not isinstance(obj, dict):
        return PromptShape(0, True, None)
    mt = obj.get("max_completion_tokens", obj.get("max_tokens", obj.get("max_output_tokens")))
    max_tokens = mt if isinstance(mt, int) and not isinstance(mt, bool) and mt > 0 else None
    stream = obj.get("stream") is True
    if "prompt" in obj:
        p = obj["prompt"]
        exact = _is_ids(p) or (isinstance(p, list) and bool(p) and all(_is_ids(x) for x in p))
        return PromptShape(value_tokens(p), exact, max_tokens, stream)
    if "messages" in obj:
        return PromptShape(value_tokens(obj["messages"]), False, max_tokens, stream)
    return PromptShape(value_tokens(obj.get("input")), False, max_tokens, stream)


class FootprintModel:
    """Predicts blocks per request and learns its two unknowns from the engine's counters."""

    def __init__(self, block_size: int = 16) -> None:
        self.block_size = block_size
        self._pairs: deque[tuple[float, float]] = deque(maxlen=WINDOW_TICKS)
        self._gen: deque[Histogram] = deque(maxlen=WINDOW_TICKS)
        self._est_text = 0.0
        self._exact = 0.0
        self.ratio = 1.0
        """Engine tokens per estimated text token (1.0 until measured)."""
        self.output_quantile: float | None = None

    def prompt_tokens(self, shape: PromptShape) -> int:
        """Prompt tokens as the engine will count them (text corrected by the learned ratio)."""
        if shape.exact:
            return shape.tokens
        return max(1, round(shape.tokens * self.ratio))

    def expected_output(self, max_tokens: int | None) -> int:
        q = self.output_quantile
        if q is None:
            return max_tokens if max_tokens is not None else DEFAULT_OUTPUT_TOKENS
        learned = max(1, round(q))
        return learned if max_tokens is None else min(max_tokens, learned)

    def blocks(self, shape: PromptShape) -> int:
        """Predicted KV blocks at the request's end: prompt + expected output, whole blocks."""
        tokens = self.prompt_tokens(shape) + self.expected_output(shape.max_tokens)
        return max(1, -(-tokens // self.block_size))

    def admitted(self, shape: PromptShape) -> None:
        """Count an admitted request's prompt towards the next correction."""
        if shape.exact:
            self._exact += shape.tokens
        else:
            self._est_text += shape.tokens

    def learn(
        self,
        engine_prompt_tokens: float | None,
        output_tokens: Histogram | None,
        block_size: int | None,
    ) -> None:
        """One scrape interval: the engine's prompt tokens counted and the output lengths of
        the requests finished (None: unknown, so the interval is not learnt from)."""
        if block_size:
            self.block_size = block_size
        if engine_prompt_tokens is not None:
            self._pairs.append((self._est_text, max(0.0, engine_prompt_tokens - self._exact)))
        self._est_text = self._exact = 0.0
        est = sum(e for e, _ in self._pairs)
        got = sum(g for _, g in self._pairs)
        if est >= 1000:  # enough text seen to trust a ratio
            self.ratio = min(MAX_RATIO, max(MIN_RATIO, got / est))
        if output_tokens is not None and output_tokens.buckets and output_tokens.count > 0:
            self._gen.append(output_tokens)
        merged = add_histograms(list(self._gen)) if self._gen else None
        if merged is not None:
            self.output_quantile = histogram_quantile(OUTPUT_QUANTILE, merged.buckets)


class _HasFootprint(Protocol):
    footprint: FootprintModel | None

    @property
    def limits(self) -> Limits: ...


def footprint_of(ctl: _HasFootprint, body: bytes) -> tuple[int, PromptShape | None]:
    """A request's predicted blocks and shape when a KV budget is on; (0, None) otherwise, so a
    gateway without one never parses the body for it."""
    model = ctl.footprint
    lim = ctl.limits
    if model is None or (lim.max_inflight_kv_blocks is None and lim.mode != "advise"):
        return 0, None
    shape = read_shape(body)
    return model.blocks(shape), shape


__all__ = ["DEFAULT_OUTPUT_TOKENS", "FootprintModel", "PromptShape", "footprint_of", "read_shape"]
