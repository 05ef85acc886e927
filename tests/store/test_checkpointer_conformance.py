"""LangGraph's own checkpointer conformance suite (``langgraph-checkpoint-conformance``) on
onward's savers, plain and encrypted, on SQLite and Postgres, beside LangGraph's own
``SqliteSaver`` / ``PostgresSaver`` on the same database in the same run.

The suite calls the async methods; onward's savers (like the sync savers they extend) are
synchronous, so both sides run through the same adapter: each async method the suite
detects is the saver's sync method in a worker thread (``asyncio.to_thread``), and only
the methods the saver implements are offered. onward must pass every capability it
offers and everything LangGraph's own saver passes."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.report import CapabilityReport

from tests.support.conformance import onward_saver, own_saver, report


def passed(r: CapabilityReport) -> set[str]:
    return {cap for cap, res in r.results.items() if res.detected and res.passed is True}


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_onward_savers_pass_langgraphs_conformance_suite_as_its_own_savers_do(
    db_url: str, encrypted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if encrypted:
        monkeypatch.setenv("ONWARD_AES_KEY", "k" * 32)
    ours = report("onward", lambda: onward_saver(db_url))
    theirs = report("langgraph", lambda: own_saver(db_url))
    failures = {cap: res.failures for cap, res in ours.results.items() if res.failures}
    assert ours.passed_all(), failures
    assert passed(theirs) <= passed(ours), (passed(theirs), passed(ours))
    assert {"put", "put_writes", "get_tuple", "list", "delete_thread"} <= passed(ours)
    total = sum(r.tests_passed for r in ours.results.values())
    assert total >= sum(r.tests_passed for r in theirs.results.values())
