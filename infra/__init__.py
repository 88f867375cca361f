"""Machinery every method shares that imports none of the trainers' modules."""
