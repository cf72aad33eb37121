"""Bundled data sets (see pums/README.md)."""
