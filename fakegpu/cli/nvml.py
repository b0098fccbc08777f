"""CLI commands for the nvml concern (filled in by its issue)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this concern's commands to the top-level parser."""
