"""The simulated vLLM engine: V1 scheduler semantics and a roofline step time, on a virtual clock.

Pure (no IO, no wall clock): `Engine.step()` runs one iteration at `engine.now` and advances the
clock by its modelled duration. Scheduler, preemption, step time, calibration: docs/sim.md.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import count

from llmtop.sim.config import EngineConfig
from llmtop.sim.stats import EngineStats

__all__ = [
    "FINISHED",
    "RUNNING",
    "WAITING",
    "Engine",
    "EngineConfig",
    "RequestRejected",
    "Sequence",
    "StepResult",
]

WAITING = 0
RUNNING = 1
FINISHED = 2


class RequestRejected(Exception):
    """A request the engine refuses at the door; `status` is the HTTP status vLLM answers."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind


_ids = count(1)


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the engine; times are on the engine's clock (seconds)."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    num_output: int = 0
    num_computed: int = 0
    num_blocks: int = 0
    status: int = WAITING
    first_scheduled_s: float = -1.0
    first_token_s: float = -1.0
    last_token_s: float = -1.0
    finished_s: float = -1.0
    finish_reason: str | None = None
    num_preemptions: int = 0
    waker: object = None
    """Whatever the server hangs here to be woken (an asyncio.Event); the engine never reads it."""

    @property
    def ttft_s(self) -> float | None:
        """Arrival to first token, or None before it."""
        return self.first_token_s - self.arrival_s if self.first_token_s >= 0 else None


@dataclass(slots=True)
class StepResult:
    """What one step did: who got a token, who finished, who was preempted."""

    start_s: float
    end_s: float
    num_tokens: int
    emitted: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)


class Engine:
    """A vLLM V1 engine in virtual time: add requests, call step(), read the state."""

    def __init__(self, config: EngineConfig, now: float = 0.0) -> None:
        self.config = config
        self.now = now
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()
        self.free_blocks = config.num_gpu_blocks
        self.stats = EngineStats(max_model_len=config.max_model_len)
        self.last_step: StepResult | None = None
        p = config.profile
        self._flop_per_token_s = 2.0 * p.params / p.effective_flops
        # QK^T and AV: 4 x layers x hidden FLOPs per (token, context token) pair.
        self._attn_flop_s = 4.0 * p.layers * p.hidden_size / p.effective_flops
        self._weight_s = p.weight_bytes / p.effective_bandwidth
        self._kv_token_s = p.kv_bytes_per_token / p.effective_bandwidth
        self._overhead_s = p.step_overhead_s
        self.last_compute_s = 0.0
        self.last_memory_s = 0.0
        self.stuck_from_s: float | None = None
        """A stuck scheduler (`sim.faults`): from this engine time on, nothing is admitted."""

    # -- the door ---------------------------------------------------------------------------

    def add_request(
        self,
        prompt_tokens: int,
        max_tokens: int | None = None,
        *,
        request_id: str | None = None,
        arrival_s: float | None = None,
    ) -> Sequence:
        """Queue a request (FCFS), or raise RequestRejected as vLLM's API server would."""
        limit = self.config.max_model_len
        if prompt_tokens < 1:
            raise RequestRejected("The prompt must not be empty.")
        if prompt_tokens > limit:
            raise RequestRejected(
                f"This model's maximum context length is {limit} tokens. However, your request"
                f" has {prompt_tokens} input tokens. Please reduce the length of the input."
            )
        if max_tokens is None:
            max_tokens = limit - prompt_tokens
            if max_tokens < 1:
                raise RequestRejected(
                    f"This model's maximum context length is {limit} tokens and your request"
                    f" has {prompt_tokens} input tokens: no room is left for output."
                )
        elif max_tokens < 1:
            raise RequestRejected(f"max_tokens must be at least 1, got {max_tokens}.")
        if prompt_tokens + max_tokens > limit:
            raise RequestRejected(
                f"'max_tokens' is too large: {max_tokens}. This model's maximum context length"
                f" is {limit} tokens and your request has {prompt_tokens} input tokens"
                f" ({max_tokens} > {limit} - {prompt_tokens})."
            )
        queued_limit = self.config.max_num_queued_reqs
        if queued_limit is not None and len(self.waiting) >= queued_limit:
            self.stats.admission_rejections += 1
            raise RequestRejected(
                f"Server is overloaded: {len(self.waiting)} requests waiting"
                f" (max_num_queued_reqs={queued_limit}). Retry later.",
                status=503,
                kind="ServiceUnavailableError",
            )
        seq = Sequence(
            request_id=request_id or f"sim-{next(_ids)}",
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            arrival_s=self.now if arrival_s is None else arrival_s,
        )
        self.waiting.append(seq)
        st = self.stats
        st.params_max_tokens.observe(seq.max_tokens)
        st.params_n.observe(1)
        return seq

    def resume(
        self, prompt_tokens: int, max_tokens: int, generated: int, *, arrival_s: float
    ) -> Sequence:
        """A request caught mid-decode, for a model seeded from a live engine's state (the
        what-if starts from what runs now): its prompt and `generated` tokens are already in
        the KV cache and its first token came before. It waits for a prefill instead, as
        `add_request` queues it, when there is no room to hold it running."""
        seq = self.add_request(prompt_tokens, max_tokens, arrival_s=arrival_s)
        done = min(generated, seq.max_tokens - 1)
        computed = prompt_tokens + done - 1  # the last token out is computed by its next step
        blocks = -(-computed // self.config.block_size)
        if done < 1 or blocks > self.free_blocks or len(self.running) >= self.config.max_num_seqs:
            return seq
        self.waiting.remove(seq)
        seq.status = RUNNING
        seq.num_output = done
        seq.num_computed = computed
        seq.num_blocks = blocks
        seq.first_scheduled_s = seq.first_token_s = seq.last_token_s = arrival_s
        self.free_blocks -= blocks
        self.running.append(seq)
        return seq

    def abort(self, seq: Sequence) -> None:
        """Drop a request (client gone): free its blocks, count it as finished_reason=abort."""
        if seq.status == FINISHED:
            return
        if seq.status == RUNNING:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self.free_blocks += seq.num_blocks
        seq.num_blocks = 0
        seq.status = FINISHED
        seq.finish_reason = "abort"
        seq.finished_s = self.now
        self.stats.finished["abort"] += 1

    # -- state ------------------------------------------------------------------------------

    def has_work(self) -> bool:
        """True while any request is running or waiting (and could be admitted)."""
        return bool(self.running or (self.waiting and not self.admits_nothing()))

    def admits_nothing(self) -> bool:
        """The scheduler is stuck (`sim.faults`: scheduler-stuck) from its start on."""
        return self.stuck_from_s is not None and self.now >= self.stuck_from_s

    def advance_to(self, t: float) -> None:
        """Let idle time pass (the clock never goes back)."""
        if t > self.now:
            self.now = t

    @property
    def kv_cache_usage(self) -> float:
        """Share of the KV blocks held by requests, 0..1."""
        total = self.config.num_gpu_blocks
        return (total - self.free_blocks) / total

    # -- one iteration ----------------------------------------------------------------------

    def step(self) -> StepResult:
        """Schedule, 'run' and retire one iteration; the clock advances by its duration."""
        cfg = self.config
        bs = cfg.block_size
        budget = cfg.max_num_batched_tokens
        free = self.free_blocks
        running = self.running
        emitted: list[Sequence] = []
        preempted: list[Sequence] = []
        decode_ctx = 0
        attn = 0.0
        t0 = self.now

        # Running sequences first: a decode token each, or the next chunk of their prefill.
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            computed = seq.num_computed
            total = seq.prompt_tokens + seq.num_output
            n = total - computed
            if n == 1 and computed < seq.num_blocks * bs:
                # The hot path: a decode token that fits in the blocks already held.
                budget -= 1
                decode_ctx += computed
                seq.num_computed = total
                emitted.append(seq)
                i += 1
                continue
            if n > budget:
                n = budget
            need = (computed + n + bs - 1) // bs
            extra = need - seq.num_blocks
            if extra > free:
                while extra > free:
                    victim = running.pop()
                    free += victim.num_blocks
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is seq:
                        break
                if seq.status != RUNNING:
                    break
            free -= extra
            seq.num_blocks = need
            budget -= n
            if n == 1 and computed >= seq.prompt_tokens:
                decode_ctx += computed
            else:
                attn += n * (computed + 0.5 * n)
            computed += n
            seq.num_computed = computed
            if computed == total:
                emitted.append(seq)
            i += 1

        # Then waiting sequences, FCFS, unless this step had to preempt (or the scheduler is stuck).
        if not preempted and not self.admits_nothing():
            waiting = self.waiting
            max_seqs = cfg.max_num_seqs
            st = self.stats
            while waiting and budget > 0 and len(running) < max_seqs:
                seq = waiting[0]
                total = seq.prompt_tokens + seq.num_output
                n = total if total < budget else budget
                need = (n + bs - 1) // bs
                if need > free:
                    break
                waiting.popleft()
                running.append(seq)
                seq.status = RUNNING
                if seq.first_scheduled_s < 0:
                    seq.first_scheduled_s = t0
                    st.prefix_cache_queries += seq.prompt_tokens
                free -= need
                seq.num_blocks = need
                seq.num_computed = n
                budget -= n
                attn += 0.5 * n * n
                if n == total:
                    emitted.append(seq)

        self.free_blocks = free
        tokens = cfg.max_num_batched_tokens - budget
        compute = tokens * self._flop_per_token_s + (attn + decode_ctx) * self._attn_flop_s
        memory = self._weight_s + decode_ctx * self._kv_token_s
        duration = self._overhead_s + (compute if compute > memory else memory)
        t1 = t0 + duration
        self.now = t1
        self.last_compute_s = compute
        self.last_memory_s = memory
        result = StepResult(t0, t1, tokens, emitted=emitted, preempted=preempted)
        self._retire(result)
        self.last_step = result
        return result

    def _preempt(self, seq: Sequence) -> None:
        seq.status = WAITING
        seq.num_computed = 0
        seq.num_blocks = 0
        seq.num_preemptions += 1
        self.stats.num_preemptions += 1
        self.waiting.appendleft(seq)

    def _retire(self, result: StepResult) -> None:
        """Stamp the new tokens; finish the sequences that are done."""
        st = self.stats
        t1 = result.end_s
        prev_end = self.last_step.end_s if self.last_step is not None else -1.0
        itl_hist = st.itl
        finished = result.finished
        limit = self.config.max_model_len
        steady = 0
        for seq in result.emitted:
            out = seq.num_output + 1
            seq.num_output = out
            if out == 1:
                seq.first_token_s = t1
                st.ttft.observe(t1 - seq.arrival_s)
                st.prompt_tokens += seq.prompt_tokens
            elif seq.last_token_s == prev_end:
                steady += 1
            else:
                itl_hist.observe(t1 - seq.last_token_s)
            seq.last_token_s = t1
            if out >= seq.max_tokens or seq.prompt_tokens + out >= limit:
                finished.append(seq)
        if steady:
            itl_hist.observe(t1 - prev_end, steady)
        st.generation_tokens += len(result.emitted)
        st.iteration_tokens.observe(result.num_tokens)
        st.steps += 1
        st.busy_s += t1 - result.start_s
        st.memory_s += self.last_memory_s
        st.compute_s += self.last_compute_s
        if finished:
            for seq in finished:
                self._finish(seq, t1)
            self.running = [s for s in self.running if s.status == RUNNING]

    def _finish(self, seq: Sequence, t1: float) -> None:
        seq.status = FINISHED
        seq.finish_reason = "length"
        seq.finished_s = t1
        self.free_blocks += seq.num_blocks
        seq.num_blocks = 0
        st = self.stats
        st.finished["length"] += 1
        st.e2e.observe(t1 - seq.arrival_s)
        st.queue_time.observe(seq.first_scheduled_s - seq.arrival_s)
        st.inference_time.observe(t1 - seq.first_scheduled_s)
        st.prefill_time.observe(seq.first_token_s - seq.first_scheduled_s)
        decode_s = t1 - seq.first_token_s
        st.decode_time.observe(decode_s)
        if seq.num_output > 1:
            st.tpot.observe(decode_s / (seq.num_output - 1))
        st.request_prompt_tokens.observe(seq.prompt_tokens)
        st.request_generation_tokens.observe(seq.num_output)
        st.longest_seq_tokens = max(st.longest_seq_tokens, seq.prompt_tokens + seq.num_output)
        st.request_max_tokens.observe(seq.max_tokens)
        st.request_prefill_kv_computed.observe(seq.prompt_tokens)
        st.request_preemptions.observe(seq.num_preemptions)
