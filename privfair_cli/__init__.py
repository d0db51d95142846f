"""privfair: a command-line experiment runner for private and fair machine learning."""

__version__ = "0.1.0"
