"""What the figures mean: the roofline and what bounds a piece of work, the config-only floor, what
limits a phase beyond its roofline, and op roles across layers. The report package presents them."""
