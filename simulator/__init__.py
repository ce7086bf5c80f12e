"""The modelled TCP machine: hardware spec, unit cost formulas and the cycle-counting engine."""
