"""Mapping: fused IR ops placed on Tensor Unit axes and scheduled as a Program of unit commands."""
