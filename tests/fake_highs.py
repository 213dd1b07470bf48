"""A stand-in for highspy.Highs that keeps the callback ilp.solve._Callbacks registers, so a
test can call it with made-up callback data."""
from __future__ import annotations


class FakeHighs:
    def setCallback(self, fn, data):
        self.fn = fn

    def startCallback(self, kind):
        pass

    def stopCallback(self, kind):
        pass
