"""Synthetic data for the demo, the tests and the benchmarks: a marketplace's monthly transactions, lease contracts,
rental applications with planted personal data, a signed district agreement, and the demo's document jobs. Never
imported by production code (test_layering.py): only by the demo (`evidence demo`, defs/demo.py), the tests and
bench/.
"""
