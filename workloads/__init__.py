"""Workloads: the benchmark's shapes, the bytes each one moves, and its input tensors.

Shared by ``benchmark/`` and ``timing/`` (imports run benchmark -> timing -> workloads, never back).
"""
