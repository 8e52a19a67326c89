"""The engine's limits, fixed at start: the profile's defaults with vLLM's flags over them.

Refuses the combinations vLLM refuses at start-up (a max_model_len the KV cache cannot hold,
fewer batched tokens than sequences) with a ValueError naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtop.sim.profiles import Profile


@dataclass(frozen=True)
class EngineConfig:
    """The engine's limits and its roofline constants, fixed at start."""

    profile: Profile
    kv_tokens: int
    max_num_seqs: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_queued_reqs: int | None = None

    @property
    def block_size(self) -> int:
        return self.profile.block_size

    @property
    def num_gpu_blocks(self) -> int:
        return self.kv_tokens // self.profile.block_size

    @classmethod
    def from_profile(
        cls,
        profile: Profile,
        *,
        kv_tokens: int | None = None,
        max_num_seqs: int | None = None,
        max_model_len: int | None = None,
        max_num_batched_tokens: int | None = None,
        max_num_queued_reqs: int | None = None,
    ) -> EngineConfig:
        """The profile's defaults, overridden; refuses combinations vLLM refuses at start."""
        kv = kv_tokens if kv_tokens is not None else profile.derived_kv_tokens()
        kv -= kv % profile.block_size
        if kv < profile.block_size:
            raise ValueError(f"KV cache of {kv} tokens holds no block of {profile.block_size}")
        model_len = max_model_len if max_model_len is not None else min(profile.max_model_len, kv)
        if model_len > kv:
            raise ValueError(
                f"max_model_len {model_len} does not fit the KV cache of {kv} tokens"
                " (lower --max-model-len or raise --kv-tokens)"
            )
        seqs = max_num_seqs if max_num_seqs is not None else profile.max_num_seqs
        batched = (
            max_num_batched_tokens
            if max_num_batched_tokens is not None
            else profile.max_num_batched_tokens
        )
        for name, v in (("max_num_seqs", seqs), ("max_num_batched_tokens", batched)):
            if v < 1:
                raise ValueError(f"{name} must be at least 1, got {v}")
        if model_len < 1:
            raise ValueError(f"max_model_len must be at least 1, got {model_len}")
        if batched < seqs:
            raise ValueError(
                f"max_num_batched_tokens ({batched}) must be at least max_num_seqs ({seqs})"
            )
        return cls(profile, kv, seqs, model_len, batched, max_num_queued_reqs)
