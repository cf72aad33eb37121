"""How :class:`dpsql.Connection` answers an asked query after its checks: the answer
cache (an answer released before, or derived from one, free), and a charged query's
run, noise, post-processing and outcome."""

from __future__ import annotations

import dataclasses

from dpsql import stages
from dpsql.accuracy import selection_note
from dpsql.answer_avg import derive_avg, has_avg, match, same_relation
from dpsql.answer_cache import CORE_PREFIX, FRAME_PREFIX
from dpsql.answer_derive import DERIVED_NOTE, Derivation, derive, split
from dpsql.answering import asymmetry_notes, internal_error, split_table
from dpsql.asking import Ask, query_options
from dpsql.bias import bias_note
from dpsql.bias import release as release_bias
from dpsql.decimal_context import own_context
from dpsql.errors import (
    DpsqlError,
    QueryCancelled,
)
from dpsql.noise import add_noise
from dpsql.parse import parse
from dpsql.plan_cache import Prepared, plan_key, typed
from dpsql.postprocess import postprocess
from dpsql.result import Result

#: At most this many cached answers' plans are looked at (analysed, if need be) for one
#: AVG query: the free path's work stays bounded whatever the cache holds.
_ANALYSED = 2
#: Plans of cached answers kept per connection for the AVG path (analysis reads no data).
_PLANS_KEPT = 64


class Answering:
    """:class:`dpsql.Connection`'s answering steps (mixed into it; they use its
    ``_answers``, ``_ledger``, ``_backend``, ``_dataset``, ``_analyst`` and
    ``_catalog_fp``)."""

    def _answer_key(self, ask: Ask, text: str | None) -> str | None:
        """The answer cache's key of ``text`` asked with ``ask``'s options and arguments."""
        return self._answers.key(
            self._dataset, self._analyst, self._catalog_fp, ask.version,
            text and "\x00".join([text, *ask.rest, repr(typed(ask.intervals))]),
            ask.epsilon, ask.delta, ask.max_groups, ask.max_rows,
            ask.mechanism or self._mechanism, ask.alpha)

    def _cached(self, ask: Ask) -> Result | None:
        """The answer released before (or derived from one), free; None: a miss, and
        ``ask`` learns the keys its answer will be stored under."""
        if self._answers is None:
            return None
        ask.answer_key = self._answer_key(ask, ask.keyed and ask.sql)
        cached = self._answers.get(ask.answer_key, self._dataset, self._analyst)
        if cached is None and ask.keyed is not None:
            cached, ask.core_key = self._derived(ask)
        if cached is not None:  # released before: post-processing, free
            stages.mark("options")
        return cached

    def _answer_charged(self, charge, prepared: Prepared, ask: Ask) -> Result:
        """Runs, adds noise and post-processes a charged query; every failure is
        recorded as the charge's outcome and keeps the charge."""
        try:
            return self._answer(prepared, ask.alpha, ask.intervals)
        except QueryCancelled:
            self._ledger.finish(charge, "cancelled")
            raise
        except DpsqlError as exc:
            exc.charged = True  # whatever its class says: it came after the charge
            self._ledger.finish(charge, "failed", type(exc).__name__)
            raise
        except Exception as exc:  # noqa: BLE001 - may depend on the data: no text of it
            self._ledger.finish(charge, "failed", "internal")
            err = internal_error(exc, "answering", charged=True)
            raise err from None
        except KeyboardInterrupt:  # Ctrl-C after the charge: cancelled, charge kept
            self._ledger.finish(charge, "cancelled")
            raise QueryCancelled() from None
        except BaseException:
            self._ledger.finish(charge, "failed", "interrupted")
            raise

    # every DECIMAL step after the charge in dpsql's own context (dpsql.decimal_context:
    # the application's had made the noise stage raise on an exact sum only when a row
    # matched)
    @own_context
    def _answer(self, prepared: Prepared, alpha: float, intervals: bool) -> Result:
        """The released answer of a charged query (run, noise, post-processing)."""
        plan, backend = prepared.plan, self._backend
        if plan.stats or plan.selection is not None:
            columns, rows = backend.execute(prepared.expression)
            stages.mark("backend")
            rows = prepared.read(rows)
        else:  # only public keys are released: no data needed
            columns, rows = [k.name for k in plan.keys], []
        noisy = add_noise(plan, columns, rows)
        answer = postprocess(plan, noisy, alpha)
        notes = tuple(plan.notes) + asymmetry_notes(answer)
        if plan.selection is not None:
            # the number of released keys only: those below the threshold stay unsaid
            notes = (selection_note(plan, len(noisy.keys), alpha), *notes)
        measured = None
        if plan.bias is not None:
            bias_columns, bias_rows = (backend.execute(prepared.measure)
                                       if prepared.measure is not None else (None, None))
            measured = release_bias(plan, bias_columns, bias_rows, alpha)
            notes = (*notes, bias_note(plan, measured, alpha))
        return Result(columns=answer.columns, rows=answer.rows, accuracy=answer.accuracy,
                      cost=plan.cost, sql=prepared.sql, alpha=alpha,
                      split=split_table(plan, alpha), notes=notes, intervals=answer.intervals,
                      noisy=answer.noisy, interval_columns=intervals, bias=measured)

    def _settle(self, charge, ask: Ask, result: Result) -> None:
        """Records the charge's outcome ``answered``, with the answer cache's entries in
        the same transaction."""
        store = None if self._answers is None else self._answers.storer(
            ask.answer_key, self._dataset, self._analyst, result, also_as=ask.core_key,
            frame=(ask.frame_key, ask.sql))
        stages.mark("noise")
        try:
            if store is None:
                self._ledger.finish(charge, "answered")
            else:
                self._ledger.finish(charge, "answered", also=store)
        except KeyboardInterrupt:  # Ctrl-C after the answer: the charge is kept
            raise QueryCancelled() from None
        stages.mark("ledger")

    def _derived(self, ask: Ask) -> tuple[Result | None, str | None]:
        """The answer derived from a cached one (:mod:`dpsql.answer_derive`), or None;
        and the key this query's answer is also stored under (its core's), or None."""
        derivation = split(ask.sql)
        if derivation is None:
            return None, None
        core_key = self._answer_key(ask, "core:" + derivation.core)
        core_key = core_key and CORE_PREFIX + core_key
        if derivation.post:
            base = self._answers.get(core_key, self._dataset, self._analyst)
            if base is not None:
                derived = derive(base, derivation, self._catalog.limits)
                if derived is not None:
                    return derived, None
        frame_key = derivation.frame and self._answer_key(ask, "frame:" + derivation.frame)
        frame_key = frame_key and FRAME_PREFIX + frame_key
        ask.frame_key = frame_key
        if not derivation.whole:
            return None, None
        return None, core_key

    def _averaged(self, ask: Ask, found: Prepared | Result) -> Prepared | Result:
        """The AVG query answered free from a cached SUM and COUNT
        (:mod:`dpsql.answer_avg`), else ``found`` as it is.

        Asked only once the AVG query's own plan is checked (``found``): it was
        refused as a fresh query would be (limits, names, budget), and the cached
        answer's plan must have the same relation (:func:`dpsql.answer_avg.same_relation`:
        the frame's text alone misses ``GROUP BY ALL``, positions and aliases, whose
        meaning comes from the select list).
        """
        if isinstance(found, Result) or self._answers is None or ask.keyed is None \
                or ask.frame_key is None:
            return found
        derivation = split(ask.sql)
        if derivation is None or not has_avg(derivation.items):
            return found
        return self._from_sum_and_count(ask, derivation, found.plan) or found

    def _from_sum_and_count(self, ask: Ask, derivation: Derivation,
                            avg_plan) -> Result | None:
        """The AVG query answered from a cached answer's SUM and COUNT over the same
        frame (:mod:`dpsql.answer_avg`), then filtered and ordered as it says; None."""
        analysed = 0
        for sql in self._answers.pointers(ask.frame_key, self._dataset, self._analyst):
            other = split(sql)
            if other is None or other.frame != derivation.frame or not other.whole:
                continue
            # the text match first: it is cheap, and most pointers fail it
            if match(derivation.items, other.items) is None:
                continue
            core_key = self._answer_key(ask, "core:" + other.core)
            cached = self._answers.get(core_key and CORE_PREFIX + core_key, self._dataset,
                                       self._analyst)
            if cached is None:
                continue
            if analysed == _ANALYSED:  # bounded work per query, whatever the cache holds
                return None
            analysed += 1
            plan = self._plan_of(ask, sql)
            if plan is None or not same_relation(plan, avg_plan):
                continue
            derived = derive_avg(cached, plan, derivation.items, other.items)
            if derived is not None and derivation.post:
                derived = derive(derived, derivation, self._catalog.limits)
                if derived is not None:  # the AVG note says what was done
                    derived = dataclasses.replace(derived, notes=tuple(
                        n for n in derived.notes if n != DERIVED_NOTE))
            if derived is not None:
                return derived
        return None

    def _plan_of(self, ask: Ask, sql: str):
        """The plan ``sql`` was answered with, asked with ``ask``'s options and arguments
        (analysis reads no data); None when it cannot be had."""
        keyed = "\x00".join([sql, *ask.rest])
        key = plan_key(keyed, ask.epsilon, ask.delta, ask.max_groups, ask.max_rows,
                       ask.mechanism or self._mechanism, self._catalog_fp, ask.version)
        prepared = self._plans.get(key)
        if prepared is not None:
            return prepared.plan
        memo = self._averaged_plans
        if key in memo:
            memo.move_to_end(key)
            return memo[key]
        try:
            epsilon, delta, max_groups, max_rows = query_options(
                ask.options, ask.epsilon, ask.delta, ask.max_groups, ask.max_rows)
            tree = parse(sql, self._catalog.limits.max_sql_length)
            plan, _, _ = self._prepare(tree, epsilon, delta, max_groups, max_rows,
                                       ask.mechanism, ask.bias_check)
        except Exception:  # noqa: BLE001 - not derived; the query is answered afresh
            plan = None
        memo[key] = plan
        if len(memo) > _PLANS_KEPT:
            memo.popitem(last=False)
        return plan
