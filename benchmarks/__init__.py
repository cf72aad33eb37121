"""dpsql benchmark suite (issue 9): `python -m benchmarks [--quick]`; see README.md here."""
