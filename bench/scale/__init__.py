"""The scale benchmark: the operator at hundreds of jobs on the scale test bed
(``python -m bench.scale.bench_scale``; :mod:`bench.scale.simulator` is its trainer fleet).
"""
