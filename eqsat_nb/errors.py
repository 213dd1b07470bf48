"""User-facing errors: one line `file:line:col: error: message` plus the source line and a caret.

Every error a user can provoke with their own input is a `TirError`; the CLI prints `str(err)` and
exits 1, so no traceback reaches the user.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in a source text (1-based line and column)."""

    line: int
    col: int


class TirError(Exception):
    """An error in user input, located in a file when the location is known."""

    def __init__(self, message: str, loc: Loc | None = None, file: str | None = None,
                 source: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.file = file
        self.source = source

    def located(self, file: str | None, source: str | None) -> "TirError":
        """The same error, attached to a file name and its text (keeps what is already set)."""
        err = TirError(self.message, self.loc, self.file or file, self.source or source)
        err.__class__ = type(self)
        return err

    def __str__(self) -> str:
        where = self.file or "<input>"
        if self.loc is None:
            return f"{where}: error: {self.message}"
        head = f"{where}:{self.loc.line}:{self.loc.col}: error: {self.message}"
        if self.source is None:
            return head
        # split on "\n" only, as the lexer counts lines (str.splitlines also splits on \f, \x1c,
        # \u2028...); the empty last piece is the end of a file that ends with a newline
        lines = self.source.split("\n")
        if not 1 <= self.loc.line <= len(lines):
            return head
        text = lines[self.loc.line - 1].rstrip("\r").expandtabs(1)
        return f"{head}\n  {text}\n  {' ' * (self.loc.col - 1)}^"


class ShapeError(TirError):
    """An operator was given inputs or attributes its shape function rejects."""


class VerificationError(TirError):
    """The optimized graph computes something else: a bug in a rule or in the optimizer."""


class RunStopped(Exception):
    """An onnxruntime run of a user's graph was stopped at its deadline (stopping.run_until).

    Not a TirError: it says that a run took too long, not what is wrong with the input; each
    caller turns it into its own outcome (a located error, "not verified", the input written
    unchanged) and names the option that raises the limit."""

    def __init__(self, what: str, seconds: float,
                 node: tuple[str, str] | None = None, started: bool = True) -> None:
        self.what = what
        self.seconds = seconds
        self.node = node            # (name, op type) onnxruntime was running, when it said
        self.started = started      # False: the deadline had passed before the run began
        super().__init__(str(self))

    def __str__(self) -> str:
        if not self.started:
            return f"{self.what} was not started: the time limit had been reached"
        where = ""
        if self.node is not None:
            name, op = self.node
            where = f" (in node '{name}' ({op}))" if name else f" (in a {op} node)"
        return f"{self.what} was stopped at the time limit after {self.seconds:.1f} s{where}"
