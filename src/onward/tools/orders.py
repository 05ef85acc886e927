"""Built-in tools of the order-anomaly template: read_csv → validate_fields →
find_anomalies → aggregate → render_report."""

from __future__ import annotations

import codecs
import csv
import hashlib
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from onward.errors import DeterministicToolError
from onward.model.state import SideEffect
from onward.store import chunks
from onward.store.artifacts import atomic_write
from onward.tools.registry import ToolContext, tool
from onward.verification.checks import FileExists, Matches, RowCount

FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "order_id": ("order_id", "orderid", "order_no", "order_number", "id", "订单号", "订单编号"),
    "amount": ("amount", "order_amount", "total", "price", "金额", "订单金额"),
    "order_time": ("order_time", "order_date", "ordered_at", "created_at", "下单时间", "订单时间"),
    "ship_time": (
        "ship_time",
        "shipped_at",
        "ship_date",
        "delivery_time",
        "delivered_at",
        "发货时间",
        "配送时间",
    ),
    "customer": ("customer", "customer_id", "customer_name", "client", "客户", "客户名"),
    "region": ("region", "area", "city", "地区", "区域"),
}
REQUIRED_FIELDS = ("order_id", "amount", "order_time")
GROUP_FIELDS = ("customer", "region")
EXAMPLES_PER_RULE = 5


def detect_fields(columns: list[str]) -> dict[str, str]:
    """Canonical field → actual column, matched case-insensitively against the aliases."""
    by_lower = {c.strip().lower(): c for c in columns}
    found: dict[str, str] = {}
    for canonical, aliases in FIELD_ALIASES.items():
        for alias in aliases:
            if alias.lower() in by_lower:
                found[canonical] = by_lower[alias.lower()]
                break
    return found


def missing_field_message(source: str, missing: list[str], columns: list[str]) -> str:
    wanted = "; ".join(f"{m} (any of: {', '.join(FIELD_ALIASES[m])})" for m in missing)
    return (
        f"{source} has no column for required field(s) {wanted}. Its columns are: "
        f"{', '.join(columns) or '(none)'}. Rename the column(s) or pass a declared plan (--plan)"
    )


def not_utf8_csv(path: str, source: str) -> str | None:
    """Why the CSV at ``path`` cannot be read as UTF-8 text (the encoding onward reads,
    with or without a BOM), or None. A NUL byte means a binary file, not a CSV; any other
    encoding (Latin-1, GBK…) is refused rather than guessed, since a wrong guess turns
    names and amounts into other text without a word."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    offset = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            if b"\x00" in chunk:
                return (
                    f"{source} is a binary file (it holds NUL bytes), not a CSV; pass the "
                    "CSV export of the data as UTF-8 text"
                )
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                # exc.object: the bytes a previous chunk left undecoded, then this chunk
                at = offset + exc.start - (len(exc.object) - len(chunk))
                return (
                    f"{source} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                    f"{at}); "
                    "onward reads CSVs as UTF-8: save it as UTF-8 (from Latin-1: iconv -f "
                    f"latin1 -t utf-8 {source} > utf8.csv) and pass that file"
                )
            offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return f"{source} is not UTF-8 text (it ends inside a character); save it as UTF-8"
    return None


def read_header(path: str) -> list[str]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        return next(csv.reader(f), [])


@tool(checks=[RowCount(field="rows", min=1)])
def read_csv(path: str, ctx: ToolContext) -> dict[str, Any]:
    """Read a CSV into rows (dicts keyed by header); malformed lines are kept aside.

    In a run the file is streamed and its rows are stored in chunks as they are read
    (``rows`` is then a manifest, see :mod:`onward.store.chunks`): a file of any size
    costs the memory of one chunk. Each stored row is ``[line, *values]``; the header
    is stored once, in ``columns``."""
    file = ctx.path(path)
    if not file.is_file():
        raise FileNotFoundError(f"input file {path} not found in {ctx.workdir}")
    if (why := not_utf8_csv(str(file), path)) is not None:
        raise DeterministicToolError(why, hint="pass a UTF-8 CSV")
    with file.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        malformed: list[dict[str, Any]] = []

        def lines() -> Iterator[list[Any]]:
            for values in reader:
                line = reader.line_num
                if not any(v.strip() for v in values):
                    continue
                if len(values) != len(header):
                    malformed.append(
                        {
                            "line": line,
                            "fields": len(values),
                            "expected": len(header),
                            "raw": ",".join(values),
                        }
                    )
                    continue
                yield [line, *values]

        if ctx.artifacts is None:  # called directly: plain rows, as before chunks
            rows: Any = [_as_row(header, r) for r in lines()]
        else:
            rows = ctx.artifacts.put_rows(lines(), owner=ctx.thread_id)
    return {"path": path, "columns": header, "rows": rows, "malformed": malformed}


def _as_row(header: list[str], stored: list[Any]) -> dict[str, Any]:
    return {"_line": stored[0], **dict(zip(header, stored[1:], strict=True))}


def table_rows(table: dict[str, Any], ctx: ToolContext | None) -> Iterator[dict[str, Any]]:
    """A table's rows as dicts keyed by header (plus ``_line``), one at a time: streamed
    from its chunks, or from the plain list an older run (or a direct call) produced."""
    rows = table["rows"]
    if not chunks.is_manifest(rows):
        yield from rows
        return
    if ctx is None or ctx.artifacts is None:
        raise DeterministicToolError("this table's rows are in an artifact store: run the tool")
    header = table["columns"]
    for stored in ctx.artifacts.rows(rows, "table"):
        yield _as_row(header, stored)


@tool
def validate_fields(table: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """Map required and optional fields to columns; report malformed rows instead of crashing."""
    columns: list[str] = table["columns"]
    fields = detect_fields(columns)
    missing = [f for f in (required or list(REQUIRED_FIELDS)) if f not in fields]
    if missing:
        raise DeterministicToolError(missing_field_message(table["path"], missing, columns))
    return {
        "fields": fields,
        "missing_optional": [f for f in FIELD_ALIASES if f not in fields],
        "row_count": chunks.row_count(table["rows"]),
        "malformed_rows": table["malformed"],
    }


def _parse_time(value: str) -> datetime | None:
    text = value.strip().replace("/", "-")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _parse_amount(value: str) -> Decimal | None:
    try:
        return Decimal(value.strip().replace(",", "").lstrip("¥$€"))
    except InvalidOperation:
        return None


@tool(checks=[RowCount(field="rules", min=1)])
def find_anomalies(
    table: dict[str, Any], validation: dict[str, Any], ctx: ToolContext | None = None
) -> dict[str, Any]:
    """Apply the anomaly rules; every rule lists its matching lines and example rows.

    Two streamed passes over the rows (order ids first, for duplicates); a rule keeps
    its matching line numbers and its first few rows, never every matching row."""
    fields: dict[str, str] = validation["fields"]
    lines: dict[str, list[int]] = {rule: [] for rule in DESCRIPTIONS}
    examples: dict[str, list[dict[str, Any]]] = {rule: [] for rule in DESCRIPTIONS}

    def hit(rule: str, row: dict[str, Any]) -> None:
        lines[rule].append(row["_line"])
        if len(examples[rule]) < EXAMPLES_PER_RULE:
            examples[rule].append(row)

    id_counts = Counter(r[fields["order_id"]].strip() for r in table_rows(table, ctx))
    total = 0
    for row in table_rows(table, ctx):
        total += 1
        value = {f: str(row[c]).strip() for f, c in fields.items()}
        if any(not value[f] for f in REQUIRED_FIELDS):
            hit("missing_required_fields", row)
        amount = _parse_amount(value["amount"]) if value["amount"] else None
        ordered = _parse_time(value["order_time"]) if value["order_time"] else None
        shipped = _parse_time(value["ship_time"]) if value.get("ship_time") else None
        bad_amount = bool(value["amount"]) and amount is None
        bad_time = (bool(value["order_time"]) and ordered is None) or (
            bool(value.get("ship_time")) and shipped is None
        )
        if bad_amount or bad_time:
            hit("invalid_value", row)
        if amount is not None and amount <= 0:
            hit("non_positive_amount", row)
        if ordered and shipped and _comparable(shipped) < _comparable(ordered):
            hit("ship_before_order", row)
        if value["order_id"] and id_counts[value["order_id"]] > 1:
            hit("duplicate_order_id", row)
    del id_counts
    rules = []
    for rule, description in DESCRIPTIONS.items():
        entry: dict[str, Any] = {
            "rule": rule,
            "description": description,
            "count": len(lines[rule]),
            "lines": lines[rule],
            "examples": examples[rule],
        }
        if rule == "ship_before_order" and "ship_time" not in fields:
            entry["skipped"] = "the file has no ship/delivery time column"
        rules.append(entry)
    abnormal = sorted({line for r in rules for line in r["lines"]})
    return {
        "columns": table["columns"],
        "rules": rules,
        "total_rows": total,
        "anomalous_rows": len(abnormal),
        "anomalous_lines": abnormal,
    }


DESCRIPTIONS = {
    "missing_required_fields": "a required field (order id, amount, order time) is empty",
    "invalid_value": "amount is not a number or a time cannot be parsed",
    "non_positive_amount": "amount is zero or negative",
    "ship_before_order": "ship/delivery time is earlier than the order time",
    "duplicate_order_id": "the order id appears on more than one row",
}
"""The anomaly rules, in the order the report lists them."""


def _comparable(t: datetime) -> datetime:
    return t.replace(tzinfo=None)


@tool
def aggregate(
    table: dict[str, Any],
    validation: dict[str, Any],
    anomalies: dict[str, Any],
    group_by: str | None = None,
    ctx: ToolContext | None = None,
) -> dict[str, Any]:
    """Count abnormal orders per rule and per a grouping column (customer or region)."""
    fields: dict[str, str] = validation["fields"]
    column = (
        fields.get(group_by)
        if group_by
        else next((fields[f] for f in GROUP_FIELDS if f in fields), None)
    )
    if group_by and column is None:
        column = group_by if group_by in table["columns"] else None
        if column is None:
            raise DeterministicToolError(
                f"cannot group by {group_by!r}: no such column in {table['path']}",
                hint="group by one of: " + ", ".join(table["columns"]),
            )
    abnormal = set(anomalies["anomalous_lines"])
    by_group: Counter[str] = Counter()
    if column:
        for row in table_rows(table, ctx):
            if row["_line"] in abnormal:
                by_group[str(row[column]).strip() or "(empty)"] += 1
    return {
        "by_rule": {r["rule"]: r["count"] for r in anomalies["rules"]},
        "group_by": column,
        # A list, not a dict: artifact JSON sorts keys, and this order is by count.
        "by_group": [
            {"group": g, "count": n}
            for g, n in sorted(by_group.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "total_rows": anomalies["total_rows"],
        "anomalous_rows": anomalies["anomalous_rows"],
        "malformed_rows": len(validation["malformed_rows"]),
    }


_templates = Environment(
    loader=PackageLoader("onward", "templates"),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,  # Markdown, not HTML
)


@tool(
    side_effect=SideEffect.IDEMPOTENT,
    checks=[Matches(field="title", pattern=r"\S")],
)
def render_report(
    path: str,
    source: str,
    validation: dict[str, Any],
    anomalies: dict[str, Any],
    summary: dict[str, Any],
    ctx: ToolContext,
) -> dict[str, Any]:
    """Render the Markdown report (Jinja2) and write it atomically."""
    text = _templates.get_template("order_report.md.j2").render(
        source=source, validation=validation, anomalies=anomalies, summary=summary
    )
    data = text.encode("utf-8")
    atomic_write(ctx.path(path), data)
    return {
        "path": path,
        "title": text.splitlines()[0].lstrip("# "),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "by_rule": summary["by_rule"],
    }


def report_checks(path: str) -> list[Any]:
    """Checks the template planner attaches to render_report (the path is per run)."""
    return [FileExists(path=path), Matches(path=path, pattern=r"## Counts per rule")]
