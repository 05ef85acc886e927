"""Test aids kept out of production modules: arming the fault points of
:mod:`onward.faults` for crash tests (:mod:`onward.testing.faults`) and a clock the test
moves (:class:`FakeTime`)."""

from onward.testing.clock import FakeTime

__all__ = ["FakeTime"]
