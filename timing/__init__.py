"""Predicted NPU time per launch: the simulation's instruction trace replayed on a model of an A2.

``trace`` captures what each core role issues, in program order; ``replay`` prices it with in-order pipe queues,
flags and cross-core signals as dependencies, HBM shared by all cores, and DMA efficiency by burst; ``model`` holds
the constants and their sources.  Every figure it produces is a prediction, labelled as one.
"""
