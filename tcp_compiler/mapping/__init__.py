"""Mapping: fused IR ops placed on Tensor Unit axes and scheduled as a Program of unit commands.

This package is the compiler-side half of the RNGD target (simulator/targets/rngd is the other):
its placement (placement.py) and cost recipes (schedule.py, steps.py) charge RNGD's units and
contexts through their constants and build Programs on RNGD's `Sites`. A target with another
hierarchy brings its own recipes; the Program, engine, occupancy and trace it feeds stay as they are.
"""
