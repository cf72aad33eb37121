"""Privacy tests: the ε audit and the differential neighbour fuzzer (see ``fuzz.py``)."""
