"""pa-kit's benchmark: shapes, the bytes/FLOPs model, timers, baselines, device table, report, gate, plot.

``bench_pa_performance.py`` at the top of the repository parses arguments and runs these pieces in order.
"""
