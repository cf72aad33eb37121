"""Analyze stage: catalog + validated SELECT → :class:`Plan`."""

from dpsql.analyze.analyze import analyze
from dpsql.analyze.bounds import Interval, bounds
from dpsql.analyze.plan import Cell, GroupKey, Output, Plan, Statistic

__all__ = ["Cell", "GroupKey", "Interval", "Output", "Plan", "Statistic", "analyze", "bounds"]
