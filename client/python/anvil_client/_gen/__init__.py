"""Stubs generated from proto/anvil/v1/anvil.proto when the package is built (setup.py)."""
