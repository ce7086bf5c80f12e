"""Measured serving runs against the simulation: read a real server's benchmark results
(measured.py), replay the same requests through `tcpc serve`'s simulation (replay.py) and compare
the two (compare.py; `tcpc validate`). docs/validation.md."""
