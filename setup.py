"""Build hooks live here; all metadata is in pyproject.toml."""

from setuptools import setup

setup()
