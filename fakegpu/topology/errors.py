"""TopologyError: every problem found in a topology file, one line each."""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu.errors import InvalidInput


@dataclass(frozen=True)
class Problem:
    path: str  # dotted field path, e.g. "nodes[2].gpus[1].mig.instances[0].profile"; "" = file
    message: str  # what is wrong, what was expected

    def line(self, source: str) -> str:
        # Newlines in user data must not break the one-line-per-problem contract.
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{source}: {' '.join(text.split())}"


class TopologyError(InvalidInput):
    """A topology that cannot be loaded; ``lines()`` gives one line per problem."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems) or (Problem("", "invalid topology"),)
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [p.line(self.source) for p in self.problems]
