"""The order template on a CSV of many rows: its rows are stored in chunks, streamed by
the steps that read them, and the report is the one the plain in-memory tools write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from onward import ArtifactError, Onward, RunStatus
from onward.demo import DEMO_GOAL, write_sample_orders
from onward.store import chunks
from onward.store.artifacts import ArtifactStore
from onward.tools.orders import aggregate, find_anomalies, read_csv, render_report, validate_fields
from onward.tools.registry import ToolContext

ROWS = 2 * chunks.CHUNK_ROWS + 345  # three chunks, the last one partial


def plain_report(workdir: Path, csv_name: str) -> bytes:
    """The report the tools write when called directly: rows as one list in memory."""
    ctx = ToolContext(thread_id="t", step_id="s", attempt=1, workdir=workdir)
    table = read_csv.fn(csv_name, ctx=ctx)
    assert isinstance(table["rows"], list)
    validation = validate_fields.fn(table)
    anomalies = find_anomalies.fn(table, validation)
    summary = aggregate.fn(table, validation, anomalies)
    out = "plain-report.md"
    render_report.fn(out, csv_name, validation, anomalies, summary, ctx=ctx)
    return (workdir / out).read_bytes()


def test_many_rows_are_chunked_and_report_the_same(ow: Onward, workdir: Path) -> None:
    expected = write_sample_orders(workdir / "orders.csv", rows=ROWS)
    view = ow.run(DEMO_GOAL, inputs=["orders.csv"], workdir=workdir)
    assert view.status is RunStatus.DONE
    table = view.artifact_value(ow, "table")
    rows = table["rows"]
    assert chunks.is_manifest(rows)
    assert rows["count"] == ROWS
    assert [c["rows"] for c in rows["chunks"]] == [chunks.CHUNK_ROWS] * 2 + [345]
    summary = view.artifact_value(ow, "summary")
    assert summary["total_rows"] == ROWS
    assert summary["malformed_rows"] == expected["malformed"]
    by_rule = summary["by_rule"]
    for rule in ("non_positive_amount", "ship_before_order", "duplicate_order_id"):
        assert by_rule[rule] == expected[rule]
    report = (workdir / "orders-report.md").read_bytes()
    assert report == plain_report(workdir, "orders.csv")
    streamed = list(ow.store.artifacts.rows(rows))
    assert len(streamed) == ROWS
    assert streamed[0][1:] == (workdir / "orders.csv").read_text().splitlines()[1].split(",")


def test_rows_written_in_chunks_stream_back_in_order(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    values: list[Any] = [[i, f"v{i}", "a\u2028b"] for i in range(25)]  # U+2028 is no newline
    manifest = store.put_rows(iter(values), per_chunk=10)
    assert chunks.row_count(manifest) == 25
    assert [c["rows"] for c in manifest["chunks"]] == [10, 10, 5]
    assert list(store.rows(manifest)) == values
    assert list(store.rows(values)) == values  # a plain list reads the same
    assert store.put_rows(iter(values), per_chunk=10) == manifest  # stored once per content


@pytest.mark.parametrize("how", ["edit", "delete"])
def test_a_damaged_chunk_is_reported_when_the_artifact_is_read(tmp_path: Path, how: str) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    manifest = store.put_rows(iter([[i] for i in range(30)]), per_chunk=10)
    ref = store.put("table", {"columns": ["x"], "rows": manifest})
    sha = manifest["chunks"][1]["sha256"]
    path = tmp_path / "artifacts" / sha[:2] / sha[2:]
    if how == "edit":
        path.write_bytes(path.read_bytes().replace(b"1", b"7"))
    else:
        path.unlink()
    with pytest.raises(ArtifactError, match="a chunk of artifact 'table'"):
        store.get(ref)
    with pytest.raises(ArtifactError, match="a chunk of artifact 'rows'"):
        list(store.rows(manifest))


def test_a_plain_table_from_an_older_run_still_reads(workdir: Path) -> None:
    """Runs stored before chunks hold ``rows`` as a list: the steps after read_csv take it."""
    write_sample_orders(workdir / "orders.csv", rows=60)
    ctx = ToolContext(thread_id="t", step_id="s", attempt=1, workdir=workdir)
    table = read_csv.fn("orders.csv", ctx=ctx)
    store = ArtifactStore(workdir / "artifacts")
    chunked_ctx = ToolContext(
        thread_id="t", step_id="s", attempt=1, workdir=workdir, artifacts=store
    )
    chunked = read_csv.fn("orders.csv", ctx=chunked_ctx)
    validation = validate_fields.fn(table)
    assert validate_fields.fn(chunked) == validation
    old = find_anomalies.fn(table, validation)
    assert find_anomalies.fn(chunked, validation, ctx=chunked_ctx) == old
    assert aggregate.fn(chunked, validation, old, ctx=chunked_ctx) == aggregate.fn(
        table, validation, old
    )
