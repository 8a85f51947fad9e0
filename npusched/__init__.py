"""npusched: a CP-SAT scheduler for Arm Ethos-U NPUs."""

__version__ = "0.1.0"
