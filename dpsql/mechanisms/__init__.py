"""Noise mechanisms. Each exposes its privacy map and its accuracy, as in OpenDP."""

from dpsql.mechanisms.laplace import Constant, DiscreteLaplace, GridLaplace, laplace
from dpsql.mechanisms.partition import LaplaceThreshold

__all__ = ["Constant", "DiscreteLaplace", "GridLaplace", "LaplaceThreshold", "laplace"]
