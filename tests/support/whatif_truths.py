"""The known engines the what-if tests calibrate against (the truth the predictor is not told)."""

from __future__ import annotations

from harness.whatif_truth import Truth
from llmtop.gateway.admission.limits import Limits
from llmtop.sim.profiles import get_profile
from llmtop.whatif.model.lengths import LengthDist

H100 = Truth(
    get_profile("h100-8b"),
    None,
    4.0,
    LengthDist(((255, 1536),), (1.0,), 1.0, 896.0),
    LengthDist.fixed(128),
    Limits(8, 128, 5.0),
)
"""h100-8b behind a gateway at cap 8, 4 req/s of 255-1,536-token prompts, 128 out."""
