"""tcpc: lowers transformer models to IR graphs and maps them onto TCP (RNGD) hardware units."""

__version__ = "0.1.0"
