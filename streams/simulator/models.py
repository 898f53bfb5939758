"""Model catalogue and latency profiles of the simulated upstream.

Every concrete model has a time-to-first-token (TTFT) distribution and a token rate. TTFT is
lognormal around its median (a long right tail, clamped to ``[ttft_min_s, ttft_max_s]``); the gap
between tokens is ``1 / tokens_per_s`` scaled by lognormal jitter, with an occasional hiccup
(``hiccup_p``, ``hiccup_factor``) as real servers show. All sampling takes an explicit
``random.Random`` so a seed reproduces the schedule exactly.

Every model also has an example price (EUR per million input and output tokens): made up for
the simulator, in the range such models are sold at, so that costs work out of the box. They
are nobody's real price: streams the built-in simulator answered are priced with them, said to
be examples wherever a price is named (streams/store/prices.py).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from decimal import Decimal

AUTO_MODEL = "auto"
EXAMPLE_CURRENCY = "EUR"  # the example prices'


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
    # example prices per million tokens, in EXAMPLE_CURRENCY (see the module's docstring)
    input_per_million: Decimal = Decimal("0")
    output_per_million: Decimal = Decimal("0")

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


# fmt: off
# (a table: one model a row; its example prices in EXAMPLE_CURRENCY per million tokens)
MODELS: dict[str, ModelProfile] = {
    p.id: p
    for p in (
        ModelProfile("gpt-oss-120b", 0.30, 40.0, description="large general model",
                     input_per_million=Decimal("0.15"), output_per_million=Decimal("0.60")),
        ModelProfile("gpt-oss-20b", 0.20, 90.0, description="small fast general model",
                     input_per_million=Decimal("0.05"), output_per_million=Decimal("0.20")),
        ModelProfile("mistral-small-3.2", 0.25, 70.0, description="multilingual chat model",
                     input_per_million=Decimal("0.10"), output_per_million=Decimal("0.30")),
        ModelProfile("qwen3-coder", 0.28, 60.0, description="code model",
                     input_per_million=Decimal("0.30"), output_per_million=Decimal("1.20")),
        ModelProfile("eu-reasoner", 0.90, 30.0, ttft_sigma=0.45, description="slow reasoning model",
                     input_per_million=Decimal("1.00"), output_per_million=Decimal("4.00")),
    )
}
# fmt: on


def get_profile(model_id: str) -> ModelProfile | None:
    return MODELS.get(model_id)
