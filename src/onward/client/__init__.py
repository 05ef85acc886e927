"""The Python API: open a store, start runs, stream progress, read state, resume by thread id.

:class:`Onward` is a facade over one module per topic: ``starting`` (plans, requests),
``driving`` (the drive loop, its consistency check and loop guard), ``deciding``
(answers, inbox, deadlines), ``lifecycle`` (cancel, fork, retention), ``views`` (state and
the :class:`RunView`), ``history`` (event log, checkpoints, report) and ``leasing`` (the
lease a drive or a cancel holds). The topic modules are internal; import from here.

>>> from onward import Onward
>>> with Onward("sqlite:///.onward/onward.db") as ow:          # doctest: +SKIP
...     view = ow.run("copy every file in inbox/ to archive/")
...     print(view.thread_id, view.status)
"""

from onward.client.deciding import SweepReport, whoami
from onward.client.driving import MIN_SUPERSTEPS, superstep_limit
from onward.client.facade import Onward
from onward.client.lifecycle import CancelReport, PruneReport
from onward.client.starting import load_plan_file
from onward.client.views import RECURSION_LIMIT, RunView, StepView

__all__ = [
    "MIN_SUPERSTEPS",
    "RECURSION_LIMIT",
    "CancelReport",
    "Onward",
    "PruneReport",
    "RunView",
    "StepView",
    "SweepReport",
    "load_plan_file",
    "superstep_limit",
    "whoami",
]
