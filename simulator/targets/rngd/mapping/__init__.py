"""Mapping: fused IR ops placed on Tensor Unit axes and scheduled as a Program of unit commands.

This package is RNGD's recipe book, part of the RNGD target (simulator/targets/rngd): its placement
(placement.py) and cost recipes (schedule.py, steps.py) charge RNGD's units and contexts through
their constants and build Programs on RNGD's `Sites`. The generic compiler reaches it only through
tcp_compiler.recipes (the entries are in book.py). A target with another hierarchy brings its own
book; the Program, engine, occupancy and trace it feeds stay as they are.
"""
