"""Machinery the judge (sandbox.py) calls and a learner may skip: worker processes, isolation."""
