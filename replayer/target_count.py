"""How a target counts the prompts a replay sends, learnt from its answers' usage.

A synthetic prompt is made to count ``input_tokens`` by this project's tokenizer; the
target counts it with its own tokenizer (tens of percent apart) and after its own chat
template (tens of tokens: llama.cpp's server with gemma 3 adds 22 to every prompt). So
the target's count is modelled as ``ratio * ours + offset``, fitted by least squares
over the (ours, reported) pairs seen, and a prompt that must count N tokens to the
target is made ``(N - offset) / ratio`` tokens to us.

Until the prompts seen differ enough in size to tell a ratio from an offset, and
whenever the line is not one a tokenizer and a template make, a shift alone (and for a
mock that reports one count whatever it gets, seen once the prompts differ in size,
none: prompts the size asked): the mean of reported - ours, bounded so that a
prompt is made between half and twice what it should count. A shift rather than a
ratio because every chat target adds a template, and a template's tokens read as a
ratio on the short first prompts (31 tokens counted 53: a ratio of 1.7) would cut the
long prompts after them by a third, where a shift read off a ratio target is wrong
only by that ratio's distance from 1.
"""

from __future__ import annotations

__all__ = ["TargetCount"]

_STEADY = 100
"""Observations averaged alike; past them each new one weighs 1/_STEADY (recent ones
count more, so a target that changes is followed)."""
_RATIO = (0.5, 2.0)
"""Tokenizers differ by tens of percent, not by factors: a fitted slope, and what the
shift alone may make of a prompt (between half and twice its count)."""
_SPREAD = 0.1
"""The prompts seen must vary in size by this share of their mean (a coefficient of
variation) before a line is fitted through them."""
_MOST_OFFSET = 4096
"""A template or system prompt the target adds: at most this many tokens."""
_LINE_AFTER = 10
"""Observations needed before the line is used."""


class TargetCount:
    """The target's count of a prompt of ``ours`` tokens, as its answers reported.

    >>> c = TargetCount()
    >>> for ours in (50, 100, 200, 400, 800, 100, 60, 300, 500, 700):
    ...     c.observe(ours, round(1.1 * ours) + 22)
    >>> c.ours_for(1000)
    889
    >>> c = TargetCount()
    >>> c.observe(31, 53)
    >>> c.ours_for(428)
    406
    """

    def __init__(self) -> None:
        self.samples = 0
        self._x = self._y = self._xx = self._yy = self._xy = 0.0  # running means
        self.shift = 0.0
        """The mean of reported - ours (the model when no line is fitted)."""
        self.line: tuple[float, float] | None = None
        """(ratio, offset) once fitted."""
        self.deaf = False
        """The prompts seen differ in size but every count reported is the same (a mock
        that answers one usage whatever it gets): the counts say nothing of its
        tokenizer, so prompts are made the size asked."""

    def observe(self, ours: int, reported: int) -> None:
        """Fold in a target's prompt_tokens for a prompt that is ``ours`` tokens to us."""
        if ours <= 0 or reported <= 0:
            return
        self.samples += 1
        w = 1.0 / min(self.samples, _STEADY)
        self._x += w * (ours - self._x)
        self._y += w * (reported - self._y)
        self._xx += w * (ours * ours - self._xx)
        self._yy += w * (reported * reported - self._yy)
        self._xy += w * (ours * reported - self._xy)
        self.shift += w * (reported - ours - self.shift)
        self.line = self._fitted()

    def _fitted(self) -> tuple[float, float] | None:
        var = self._xx - self._x * self._x
        # Reported counts that stay put (within half a token) while the prompts move by
        # a token or more: a mock's one usage. It stays so (the prompts then stop moving)
        # until a count moves.
        still = self._yy - self._y * self._y < 0.25
        self.deaf = still and (self.deaf or var >= 1.0)
        if self.deaf or self.samples < _LINE_AFTER or var < (_SPREAD * self._x) ** 2:
            return None
        slope = (self._xy - self._x * self._y) / var
        offset = self._y - slope * self._x
        if not _RATIO[0] <= slope <= _RATIO[1] or abs(offset) > _MOST_OFFSET:
            return None
        return slope, offset

    def ours_for(self, wanted: int) -> int:
        """The tokens, to us, of a prompt the target should count ``wanted``; at least 1."""
        if self.deaf:
            return max(1, wanted)
        if self.line is None:
            # A target whose usage does not follow what we send (a fixed mock) must not
            # blow prompts up, nor shrink them to nothing.
            shifted = min(max(wanted - self.shift, wanted / _RATIO[1]), wanted / _RATIO[0])
            return max(1, round(shifted))
        slope, offset = self.line
        return max(1, round((wanted - offset) / slope))
