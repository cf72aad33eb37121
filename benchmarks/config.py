"""Benchmark configurations: ``quick`` (CI, well under a minute) and ``full`` (~20 min)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Plan:
    """The sizes one workload runs at (people for PUMS, scale factor for TPC-H).

    Attributes:
        sizes: data sizes timed, smallest first (the scale exponent needs two or more).
        large: from this size on, only ``large_queries`` are timed, stage runs drop to
            ``Config.stage_runs_large`` and there is no untimed first run.
        large_queries: the queries timed at ``large`` and above (None: all).
        accuracy_size: the size the accuracy trials run at (one of ``sizes``).
    """

    sizes: tuple[float, ...]
    large: float
    large_queries: tuple[str, ...] | None
    accuracy_size: float


@dataclass(frozen=True)
class Config:
    name: str
    #: Workload name → its sizes (a workload without a plan is not run).
    plans: dict[str, Plan]
    #: Timed runs per query and size (medians are reported); >= 5.
    runs: int
    #: Extra runs of the instrumented pipeline per query (stage shares) at each size
    #: below the plan's ``large``, and at ``large`` and above.
    stage_runs: int
    stage_runs_large: int
    #: Accuracy: epsilons, trials per epsilon.
    epsilons: tuple[float, ...]
    trials: int
    #: Sampler throughput: vector lengths, repeats (each stops early after ``sampler_cap_s``).
    sampler_sizes: tuple[int, ...]
    sampler_repeats: int
    sampler_cap_s: float
    #: SmartNoise SQL side by side (on PUMS at its ``accuracy_size``).
    peers: bool
    peer_runs: int
    peer_trials: int
    #: Query epsilon for the latency runs, and the delta of queries that need one.
    latency_epsilon: float = 1.0
    seed: int = 0
    #: The engine's own time per stage (:mod:`benchmarks.overhead`): askings of each
    #: query of the mix per mode (0: not measured).
    overhead_runs: int = 40

    def as_dict(self) -> dict:
        return asdict(self)


QUICK = Config(
    name="quick",
    plans={
        "pums_dup": Plan(sizes=(10_000, 50_000), large=50_000, large_queries=None,
                         accuracy_size=10_000),
        # the larger size times three queries that cover the shapes (lineitem through
        # orders, a per-user subquery, a unique user key), to keep CI's run short
        "tpch": Plan(sizes=(0.01, 0.02), large=0.02,
                     large_queries=("q1", "q13", "segment_balance"), accuracy_size=0.01),
    },
    runs=5,
    stage_runs=1,
    stage_runs_large=1,
    epsilons=(0.1, 1.0, 10.0),
    trials=5,
    sampler_sizes=(10_000,),
    sampler_repeats=3,
    sampler_cap_s=1.0,
    peers=False,
    peer_runs=5,
    peer_trials=5,
    overhead_runs=3,
)

FULL = Config(
    name="full",
    plans={
        # dpsql needs 9–16 s a query at 10M people on 2 cores: time the four queries that
        # cover every shape (public keys, SUM/AVG, partition selection, COUNT DISTINCT).
        "pums_dup": Plan(sizes=(1_000_000, 10_000_000), large=10_000_000,
                         large_queries=("count_by_sex", "income_by_race", "count_by_age",
                                        "people_by_married"),
                         accuracy_size=1_000_000),
        # sf 1: 150,000 customers, 6M lineitem rows; every query, accuracy included
        "tpch": Plan(sizes=(0.1, 1), large=1, large_queries=None, accuracy_size=1),
    },
    runs=5,
    stage_runs=3,
    stage_runs_large=2,
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
