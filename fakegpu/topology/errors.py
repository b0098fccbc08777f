"""TopologyError: every problem found in a topology file, one line each."""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu.errors import InvalidInput, printable

# A hostile file can hold tens of thousands of mistakes: print the first ones and a count.
MAX_LINES = 20
# Characters of one problem: a value echoed from a 1 MiB file must not make a 1 MiB line.
MAX_MESSAGE = 400


@dataclass(frozen=True)
class Problem:
    path: str  # dotted field path, e.g. "nodes[2].gpus[1].mig.instances[0].profile"; "" = file
    message: str  # what is wrong, what was expected

    def line(self, source: str) -> str:
        # Newlines and control characters in user data (values, keys, the file name) must
        # not break the one-line-per-problem contract: whitespace runs become one space,
        # anything else unprintable is escaped.
        text = f"{self.path}: {self.message}" if self.path else self.message
        text = printable(" ".join(text.split()))
        if len(text) > MAX_MESSAGE:
            text = f"{text[:MAX_MESSAGE]}... ({len(text) - MAX_MESSAGE} more characters)"
        return f"{printable(source)}: {text}"


class TopologyError(InvalidInput):
    """A topology that cannot be loaded; ``lines()`` gives one line per problem."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems) or (Problem("", "invalid topology"),)
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """One line per problem, at most MAX_LINES, then one saying how many more."""
        shown = [p.line(self.source) for p in self.problems[:MAX_LINES]]
        more = len(self.problems) - len(shown)
        if more:
            shown.append(f"{printable(self.source)}: ... and {more} more "
                         f"problem{'s' if more > 1 else ''}")
        return shown
