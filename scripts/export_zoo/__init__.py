"""Builds the zoo of real converter exports kept in ``tests/data/exports`` (entry point: ``scripts/export_zoo.py``).

The modules here are imported both by the entry point (any Python with numpy) and by the workers that run inside
the converters' own venvs; only the workers import TensorFlow or PyTorch, and only inside functions.
"""
