"""Mnemoflow domain code shared by the gateway and the workers."""

__version__ = "0.1.0"
