"""Benchmark configurations: ``quick`` (CI, well under a minute) and ``full`` (~15 min)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Config:
    name: str
    #: PUMS sizes in people (1–4 rows each, 1.95 on average), smallest first.
    sizes: tuple[int, ...]
    #: Timed runs per query and size (medians are reported); >= 5.
    runs: int
    #: Extra runs of the instrumented pipeline per query (stage shares) at each size
    #: below ``large``, and at ``large`` and above.
    stage_runs: int
    stage_runs_large: int
    #: From this many people on, only ``large_queries`` are timed (None: all).
    large: int
    large_queries: tuple[str, ...] | None
    #: Accuracy: people in the data set, epsilons, trials per epsilon.
    accuracy_size: int
    epsilons: tuple[float, ...]
    trials: int
    #: Sampler throughput: vector lengths, repeats (each stops early after ``sampler_cap_s``).
    sampler_sizes: tuple[int, ...]
    sampler_repeats: int
    sampler_cap_s: float
    #: SmartNoise SQL side by side (on ``accuracy_size`` people).
    peers: bool
    peer_runs: int
    peer_trials: int
    #: Query epsilon for the latency runs, and the delta of queries that need one.
    latency_epsilon: float = 1.0
    seed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


QUICK = Config(
    name="quick",
    sizes=(10_000, 50_000),
    runs=5,
    stage_runs=2,
    stage_runs_large=2,
    large=50_000,
    large_queries=None,
    accuracy_size=10_000,
    epsilons=(0.1, 1.0, 10.0),
    trials=5,
    sampler_sizes=(10_000,),
    sampler_repeats=3,
    sampler_cap_s=1.0,
    peers=False,
    peer_runs=5,
    peer_trials=5,
)

FULL = Config(
    name="full",
    sizes=(1_000_000, 10_000_000),
    runs=5,
    stage_runs=3,
    stage_runs_large=2,
    large=10_000_000,
    # dpsql needs 9–16 s a query at 10M people on 2 cores: time the four queries that
    # cover every shape (public keys, SUM/AVG, partition selection, COUNT DISTINCT).
    large_queries=("count_by_sex", "income_by_race", "count_by_age", "people_by_married"),
    accuracy_size=1_000_000,
    epsilons=(0.1, 1.0, 10.0),
    trials=20,
    sampler_sizes=(100_000, 1_000_000),
    sampler_repeats=3,
    sampler_cap_s=8.0,
    peers=True,
    peer_runs=5,
    peer_trials=20,
)

CONFIGS = {c.name: c for c in (QUICK, FULL)}


def get(name: str) -> Config:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown configuration {name!r}; known: {', '.join(CONFIGS)}") from None
