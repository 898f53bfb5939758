"""Model catalogue and latency profiles of the simulated upstream.

Every concrete model has a time-to-first-token (TTFT) distribution and a token rate. TTFT is
lognormal around its median (a long right tail, clamped to ``[ttft_min_s, ttft_max_s]``); the gap
between tokens is ``1 / tokens_per_s`` scaled by lognormal jitter, with an occasional hiccup
(``hiccup_p``, ``hiccup_factor``) as real servers show. All sampling takes an explicit
``random.Random`` so a seed reproduces the schedule exactly.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

AUTO_MODEL = "auto"


@dataclass(frozen=True)
class ModelProfile:
    id: str
    ttft_median_s: float
    tokens_per_s: float
    ttft_sigma: float = 0.35
    jitter_sigma: float = 0.30
    hiccup_p: float = 0.02
    hiccup_factor: float = 5.0
    description: str = ""

    @property
    def ttft_min_s(self) -> float:
        return self.ttft_median_s * 0.6

    @property
    def ttft_max_s(self) -> float:
        return self.ttft_median_s * 5.0

    def sample_ttft(self, rng: random.Random) -> float:
        """Seconds from the request to the first output delta."""
        value = self.ttft_median_s * math.exp(rng.gauss(0.0, self.ttft_sigma))
        return min(max(value, self.ttft_min_s), self.ttft_max_s)

    def sample_token_gap(self, rng: random.Random) -> float:
        """Seconds between two consecutive tokens."""
        gap = math.exp(rng.gauss(0.0, self.jitter_sigma)) / self.tokens_per_s
        if rng.random() < self.hiccup_p:
            gap *= self.hiccup_factor
        return min(gap, 20.0 / self.tokens_per_s)


MODELS: dict[str, ModelProfile] = {
    p.id: p
    for p in (
        ModelProfile("gpt-oss-120b", 0.30, 40.0, description="large general model"),
        ModelProfile("gpt-oss-20b", 0.20, 90.0, description="small fast general model"),
        ModelProfile("mistral-small-3.2", 0.25, 70.0, description="multilingual chat model"),
        ModelProfile("qwen3-coder", 0.28, 60.0, description="code model"),
        ModelProfile(
            "eu-reasoner", 0.90, 30.0, ttft_sigma=0.45, description="slow reasoning model"
        ),
    )
}


def get_profile(model_id: str) -> ModelProfile | None:
    return MODELS.get(model_id)
