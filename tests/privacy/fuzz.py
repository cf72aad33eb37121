"""Differential neighbour fuzzer: random schemas, data, one adversarial user, random queries.

Each hypothesis example draws a world (:func:`tests.privacy.grammar.worlds`: a catalog,
D, and the rows of one more user who obeys nothing), builds D and D′ as DuckDB files,
and checks a few random queries (:func:`tests.privacy.grammar.queries`) against the
neighbour oracle (:mod:`tests.privacy.oracle`) with the noise off. A violation is
raised as an exception whose type names the broken check and the diagnosed bug class,
so hypothesis shrinks each (check, class) to its own minimal catalog, data and query.

Run longer than CI does::

    python -m tests.privacy.fuzz --minutes 10            # random seeds, prints findings
    python -m tests.privacy.fuzz --minutes 10 --out /tmp/fuzz_findings.md
    python -m tests.privacy.fuzz --measure               # the CI slice, without raising:
                                                         # queries until each class's first hit

Findings already recorded are not raised again in one run, so the search moves on to
new ones.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.privacy.grammar import Generated, queries, query_params, worlds
from tests.privacy.oracle import KINDS, Neighbours, Outcome, Violation, World, check_world
from tests.privacy.reduce import CREATE_RE, INSERT_RE, merged, reduce, same_kind, split_top

#: Backends a world is checked on (drawn per world; DuckDB is the default engine).
BACKENDS = ("duckdb",) * 5 + ("sqlite",)
#: Queries checked per world (a world costs two DuckDB files and two connections).
QUERIES_PER_WORLD = 6
#: The CI slice (see test_neighbours.py): CI_SHARDS processes, each a fixed-seed run of
#: CI_EXAMPLES worlds (about 3.5 queries each).
CI_SHARDS = 2
CI_EXAMPLES = 75

#: Bug classes of issue 14, with the features that point at each (see :func:`diagnose`).
CLASSES = {
    1: "a derived table/CTE aliased with a catalog table's name inherits its facts",
    2: "row_privacy table joined to a public table (repeated key, ON TRUE, non-equality)",
    3: "user-key equality taken from a LEFT JOIN's ON",
    4: "keys 'determined' through LEFT JOINs with extra ON conditions",
    5: "NULL user keys (UNIQUE allows many NULLs) counted as distinct users",
    6: "per-user derived table grouped by a LEFT-joined key",
    7: "mixed-type user-key equality ('01' = 1)",
    8: "case-insensitive collation on a grouped or compared column",
    9: "restrict_domains copies an unguarded public-domain key expression into WHERE",
    10: "GROUP BY key of a derived table/CTE not guarded",
    11: "VARIANCE/STDDEV (x − m)·(x − m) in the column's own integer type, unguarded",
    12: "`%`/`//` by a fraction taken as whole-numbered (or a non-scalar key)",
    13: "correlated IN (SELECT ...) reads the outer private row unguarded",
    14: "LIKE with a non-constant pattern treated as error-free",
    0: "unclassified",
}

_SENSITIVITY = {"linf", "groups", "l1", "new-key", "public-keys"}


def family(kind: str) -> str:
    """``sensitivity`` for the checks on moved statistics; else the check itself."""
    return "sensitivity" if kind in _SENSITIVITY else kind


def world_facts(world: World) -> dict:
    """What :func:`diagnose` reads off a world: key types, collations, the added user's key."""
    tables = world.catalog["tables"]
    columns: dict[str, list[str]] = {}
    collated: set[str] = set()
    for statement in world.schema:
        m = CREATE_RE.match(statement)
        if m:
            defs = split_top(m.group(2))
            columns[m.group(1)] = [d.split()[0] for d in defs]
            collated |= {d.split()[0] for d in defs if "COLLATE" in d.upper()}
    key_types = {}
    for name, t in tables.items():
        key = t.get("user_key")
        if isinstance(key, str):
            spec = t["columns"][key]
            key_types[name] = spec if isinstance(spec, str) else spec["type"]
    attacker_keys = []
    for statement in world.attacker:
        m = INSERT_RE.match(statement)
        if m and m.group(1) in key_types and m.group(1) in columns:
            key = tables[m.group(1)]["user_key"]
            values = split_top(m.group(2))
            attacker_keys.append(values[columns[m.group(1)].index(key)])
    null_key = "NULL" in attacker_keys
    collide = any(re.fullmatch(r"'[ +]?0*1(\.0)?[ ]?'", k) and k != "'1'" for k in attacker_keys)
    return {"tables": set(tables), "key_types": key_types, "collated": collated,
            "null_key": null_key, "collide": collide}


def diagnose(world: World, sql: str, violation: Violation) -> int:
    """The issue-14 class a violation most likely belongs to (0: none matched).

    A heuristic over the query text and the world, meant for reduced examples (see
    :mod:`tests.privacy.reduce`), where little besides the culprit is left.
    """
    facts = world_facts(world)
    low = re.sub(r"\s+", " ", sql.lower())
    low = re.sub(r" as (\w+)( on| join| left| where| group|,|$|\))", r" \1\2", low)  # no AS
    text = violation.detail.lower()
    derived = set(re.findall(r"\) (\w+)", low)) | set(re.findall(r"with (\w+) as", low))
    if violation.kind in _SENSITIVITY or violation.kind in ("precharge-disagree",
                                                             "plan-differs"):
        if re.search(r"\(select \w+\.uid, count\(\*\)[^()]* from \w+ \w+ left join", low):
            return 6
        if derived & facts["tables"]:
            return 1
        if re.search(r"left join \w+ \w+ on [^()]*\band (\w+)\.uid = (\w+)\.uid", low):
            return 3
        if re.search(r"left join \w+ \w+ on \w+\.\w+ = \w+\.\w+ and", low) and \
                "events" not in low:
            return 4
        if "events" in low and re.search(r"\b(places|brackets)\b", low):
            return 2
        if facts["null_key"]:
            return 5
        used = [n for n in facts["key_types"] if re.search(rf"\b{n}\b", low)]
        if len({facts["key_types"][n] for n in used}) > 1 or (facts["collide"] and len(used) > 1):
            return 7
        if any(re.search(rf"\b{c}\b", low) for c in facts["collated"]):
            return 8
        return 0
    if "not whole" in text or re.search(r"(%|//) 2\.5", low):
        return 12
    if re.search(r"\b(variance|var_samp|stddev|stddev_samp|var_pop|stddev_pop)\(", low):
        return 11
    if re.search(r"in \(select \w+ from \w+ where", low):
        return 13
    if re.search(r"like (concat|\w+\.\w+\b(?! *'))", low):
        return 14
    inner = re.search(r"group by (\w+\.)?uid, ([^)]*)\)", low)
    if inner and re.search(r"[*%+]|//", inner.group(2)):
        return 10
    if re.search(r"case when [^)]*\* 10{14,} > 5 then 'a'", low):
        return 9
    return 0


@dataclass
class Finding:
    kind: str
    klass: int
    violation: Violation
    world: World
    sql: str
    params: dict
    query_number: int  # queries checked in this run before and including this one
    reduced: bool = False

    @property
    def signature(self) -> tuple[str, int]:
        """(family of the check, class): one report per class for the sensitivity checks."""
        return (family(self.kind), self.klass)

    def markdown(self, label: str = "") -> str:
        readable = World(self.world.catalog, self.world.schema, merged(self.world.data),
                         merged(self.world.attacker), self.world.attacker_first,
                         self.world.backend)
        return (f"### {label}[{self.kind}] class {self.klass}: {CLASSES[self.klass]}\n\n"
                f"- check: {KINDS.get(self.kind, self.kind)}\n"
                f"- diagnosis: {self.violation.detail.splitlines()[0][:400]}\n"
                f"- found after {self.query_number} generated queries"
                f"{' (example reduced)' if self.reduced else ''}\n"
                f"- params: {self.params}\n\n"
                f"```sql\n{self.sql}\n```\n\n```python\n{readable.source(self.sql)}\n```\n")


class Counterexample(AssertionError):
    """A violated neighbour property; the subclass names (check, class) for hypothesis."""

    finding: Finding


_TYPES: dict[tuple[str, int], type] = {}


def _exception_type(signature: tuple[str, int]) -> type:
    if signature not in _TYPES:
        kind, klass = signature
        name = "Violation_" + kind.replace("-", "_") + f"_class{klass}"
        _TYPES[signature] = type(name, (Counterexample,), {})
    return _TYPES[signature]


@dataclass
class Recorder:
    """Counts queries and outcomes; collects, reduces or raises violations.

    Modes: collect only (the CI slice: ``first`` keeps each signature's first example);
    ``reduce_seconds`` > 0 also reduces each new signature's first example and reports
    it through ``on_finding`` (the CLI); ``raise_violations`` raises it for hypothesis to
    shrink (``--hypothesis-shrink``).
    """

    raise_violations: bool = False
    reduce_seconds: float = 0.0
    on_finding: object = None  # Callable[[Finding], None]
    #: signatures already reported (not raised or reduced again)
    known: set = field(default_factory=set)
    queries: int = 0
    answered: int = 0
    refusals: collections.Counter = field(default_factory=collections.Counter)
    first: dict = field(default_factory=dict)  # signature -> Finding (first occurrence)
    #: queries per signature (several violations of one query count once)
    hits: collections.Counter = field(default_factory=collections.Counter)

    def record(self, world: World, sql: str, params: dict, outcome: Outcome) -> None:
        self.queries += 1
        if outcome.answered:
            self.answered += 1
        elif outcome.refusal:
            self.refusals[_reason(outcome.refusal)] += 1
        seen = set()
        for violation in outcome.violations:
            finding = Finding(violation.kind, diagnose(world, sql, violation), violation,
                              world, sql, params, self.queries)
            if finding.signature in seen:
                continue
            seen.add(finding.signature)
            self.hits[finding.signature] += 1
            self.first.setdefault(finding.signature, finding)
            if finding.signature in self.known:
                continue
            if self.raise_violations:
                exc = _exception_type(finding.signature)(
                    f"{violation}\n\nquery: {sql}\nparams: {params}\n\nworld:\n"
                    f"{world.source(sql)}")
                exc.finding = finding
                raise exc
            if self.reduce_seconds > 0:
                self.known.add(finding.signature)  # the unreduced one: not again
                finding = reduce_finding(finding, self.reduce_seconds)
                if finding.signature in self.known and finding.signature != (
                        family(violation.kind), diagnose(world, sql, violation)):
                    continue
                self.known.add(finding.signature)
                if self.on_finding is not None:
                    self.on_finding(finding)

    def summary(self) -> str:
        return slice_report([self])[0]


def reduce_finding(finding: Finding, seconds: float) -> Finding:
    """The finding on the smallest world and query that still break the same check."""
    check = same_kind(finding.kind, finding.params)
    world, sql = reduce(finding.world, finding.sql, check, seconds)
    outcome = check_world(world, sql, **finding.params)
    violation = next((v for v in outcome.violations if v.kind == finding.kind), None)
    if violation is None:  # flaky: keep the original
        return finding
    return Finding(finding.kind, diagnose(world, sql, violation), violation, world, sql,
                   finding.params, finding.query_number, reduced=True)


def _reason(refusal: str) -> str:
    """A refusal message without its specifics, to count refusals by kind."""
    return re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "…", refusal)[:110]


def scenario(data, recorder: Recorder, queries_per_world: int = QUERIES_PER_WORLD) -> None:
    """One hypothesis example: a world and a few queries checked on D and D′."""
    gen: Generated = data.draw(worlds(), label="world")
    gen.world.backend = data.draw(st.sampled_from(BACKENDS), label="backend")
    with Neighbours(gen.world) as pair:
        for i in range(data.draw(st.integers(1, queries_per_world), label="queries")):
            sql = data.draw(queries(gen.meta), label=f"query {i}")
            params = data.draw(query_params(), label=f"params {i}")
            recorder.record(gen.world, sql, params, pair.check(sql, **params))


def fuzz_settings(max_examples: int, *, derandomize: bool, shrink: bool) -> settings:
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    return settings(max_examples=max_examples, derandomize=derandomize, database=None,
                    deadline=None, phases=phases, print_blob=False,
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=True)


def run(recorder: Recorder, max_examples: int, *, seed: int | None = None,
        derandomize: bool = False, shrink: bool = False) -> list[Finding]:
    """Runs one hypothesis search; returns the findings it raised (raise mode only)."""

    @fuzz_settings(max_examples, derandomize=derandomize, shrink=shrink)
    @given(st.data())
    def search(data):
        scenario(data, recorder)

    if seed is not None and not derandomize:
        from hypothesis import seed as hseed

        search = hseed(seed)(search)
    try:
        search()
    except BaseException as exc:  # noqa: BLE001 - ExceptionGroup or one Counterexample
        found = list(_counterexamples(exc))
        if not found:
            raise
        return found
    return []


def _shard(seed: int, examples: int) -> Recorder:
    recorder = Recorder()
    run(recorder, examples, seed=seed)
    return recorder


def ci_slice(shards: int = CI_SHARDS, examples: int = CI_EXAMPLES,
             first_seed: int = 0) -> list[Recorder]:
    """The fixed CI slice: shard ``i`` is the hypothesis run seeded with ``first_seed + i``.

    The shards run in parallel processes (the engine's Python work is the bottleneck),
    and each collects every violation without raising, so the slice takes the same time
    whether or not the engine is broken.
    """
    seeds = [first_seed + i for i in range(shards)]
    if shards == 1:
        return [_shard(seeds[0], examples)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(shards, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_shard, seeds, [examples] * shards))


def slice_report(recorders: list[Recorder]) -> tuple[str, dict]:
    """A summary of the shards, and the first finding of each (check, class)."""
    queries = sum(r.queries for r in recorders)
    answered = sum(r.answered for r in recorders)
    refusals = sum((r.refusals for r in recorders), collections.Counter())
    lines = [f"queries: {queries}, answered: {answered} "
             f"({100 * answered / max(queries, 1):.1f}%)"]
    for reason, n in refusals.most_common(12):
        lines.append(f"  refused {n:5d}  {reason}")
    first: dict = {}
    for shard, r in enumerate(recorders):
        for sig, f in r.first.items():
            if sig not in first or f.query_number < first[sig][1].query_number:
                first[sig] = (shard, f)
    hits = sum((r.hits for r in recorders), collections.Counter())
    for sig, (shard, f) in sorted(first.items(), key=lambda kv: kv[1][1].query_number):
        lines.append(f"  first {sig[0]:20s} class {sig[1]:2d}: shard {shard} query "
                     f"{f.query_number:4d} (~{len(recorders) * f.query_number} in all; "
                     f"{hits[sig]} queries hit): {f.violation.detail.splitlines()[0][:100]}")
    return "\n".join(lines), {sig: f for sig, (_, f) in first.items()}


def _counterexamples(exc: BaseException):
    if isinstance(exc, Counterexample):
        yield exc.finding
    elif isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            yield from _counterexamples(e)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.privacy.fuzz",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--examples", type=int, default=100,
                        help="worlds per hypothesis search (a new seed each search)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", default=None, help="append findings (markdown) to this file")
    parser.add_argument("--label", default="", help="prefix of each finding's title in --out")
    parser.add_argument("--reduce-seconds", type=float, default=120.0,
                        help="time to reduce each new finding (0: report it as found)")
    parser.add_argument("--hypothesis-shrink", action="store_true",
                        help="raise findings for hypothesis to shrink (slow: about a second "
                             "per replay), then reduce the result")
    parser.add_argument("--measure", action="store_true",
                        help="run the CI slice and report, for each (check, class), how "
                             "many queries it took to find the first")
    parser.add_argument("--collect", type=int, default=None, metavar="N",
                        help="like --measure, with N worlds per shard from --seed")
    args = parser.parse_args(argv)

    def write(f: Finding) -> None:
        if args.out:
            with open(args.out, "a", encoding="utf-8") as fh:
                fh.write(f.markdown(args.label) + "\n")

    if args.measure or args.collect:
        start = time.time()
        recorders = (ci_slice() if args.measure
                     else ci_slice(CI_SHARDS, args.collect, first_seed=args.seed or 0))
        print(f"{'CI slice' if args.measure else 'run'}: {time.time() - start:.0f} s")
        report, first = slice_report(recorders)
        print(report)
        for f in sorted(first.values(), key=lambda f: f.query_number):
            write(f)
        return 0

    findings: list[Finding] = []

    def report(f: Finding) -> None:
        findings.append(f)
        print(f"\n=== finding {len(findings)}: [{f.kind}] class {f.klass} "
              f"({CLASSES[f.klass]})\n{f.violation}\n{f.sql}\n", flush=True)
        write(f)

    recorder = Recorder(raise_violations=args.hypothesis_shrink,
                        reduce_seconds=args.reduce_seconds, on_finding=report)
    deadline = time.time() + 60 * args.minutes
    searches = 0
    import random

    rng = random.Random(args.seed)
    while time.time() < deadline:
        searches += 1
        for f in run(recorder, args.examples, seed=rng.randrange(2**32),
                     shrink=args.hypothesis_shrink):
            if f.signature in recorder.known:
                continue
            recorder.known.add(f.signature)
            if args.reduce_seconds > 0:
                f = reduce_finding(f, args.reduce_seconds)
            report(f)
    print(f"\n{searches} searches; {recorder.summary()}")
    print(f"{len(findings)} distinct findings:")
    for f in findings:
        print(f"  [{f.kind}] class {f.klass}: {f.violation.detail.splitlines()[0][:140]}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
