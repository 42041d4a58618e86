"""DECOR's benchmarks, run as modules from the repository root (``python -m bench.harness``,
``python -m bench.cluster_sim``, ``python -m bench.report``; ``make help`` lists the verbs).

They use the operator's own code (``decor``) for everything the operator already does, and
:mod:`bench.plotting` for every figure.
"""
