"""The demo's sample data: an orders.csv with a known number of each anomaly."""

from __future__ import annotations

import csv
import random
from datetime import datetime, timedelta
from pathlib import Path

DEMO_GOAL = "Analyze orders.csv, find abnormal orders and give me a summary"
HEADER = ["order_id", "customer", "region", "amount", "order_time", "ship_time"]
CUSTOMERS = ["acme", "globex", "initech", "umbrella", "hooli", "stark"]
REGIONS = ["north", "south", "east", "west"]


def write_sample_orders(path: Path, rows: int = 200, seed: int = 7) -> dict[str, int]:
    """Write ``rows`` orders with injected anomalies; return the expected count per rule
    (plus ``malformed`` for lines with the wrong number of fields)."""
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, 8, 0)
    records: list[list[str]] = []
    for i in range(rows):
        ordered = start + timedelta(minutes=37 * i)
        shipped = ordered + timedelta(hours=rng.randint(2, 72))
        records.append(
            [
                f"A{10000 + i}",
                rng.choice(CUSTOMERS),
                rng.choice(REGIONS),
                f"{rng.uniform(5, 900):.2f}",
                ordered.strftime("%Y-%m-%d %H:%M"),
                shipped.strftime("%Y-%m-%d %H:%M"),
            ]
        )
    expected = {
        "non_positive_amount": 0,
        "ship_before_order": 0,
        "duplicate_order_id": 0,
        "missing_required_fields": 0,
        "invalid_value": 0,
        "malformed": 0,
    }
    slots = iter(rng.sample(range(1, rows), rows // 6))
    for _ in range(max(1, rows // 40)):  # zero or negative amounts
        records[next(slots)][3] = rng.choice(["0", "-12.50", "-3.00", "0.00"])
        expected["non_positive_amount"] += 1
    for _ in range(max(1, rows // 50)):  # shipped before ordered
        r = records[next(slots)]
        r[5] = (datetime.strptime(r[4], "%Y-%m-%d %H:%M") - timedelta(hours=5)).strftime(
            "%Y-%m-%d %H:%M"
        )
        expected["ship_before_order"] += 1
    for _ in range(max(1, rows // 60)):  # an id used twice: both rows are flagged
        a, b = next(slots), next(slots)
        records[b][0] = records[a][0]
        expected["duplicate_order_id"] += 2
    for _ in range(max(1, rows // 70)):  # a required field left empty
        records[next(slots)][rng.choice([0, 3, 4])] = ""
        expected["missing_required_fields"] += 1
    for _ in range(max(1, rows // 100)):  # not a number
        records[next(slots)][3] = "n/a"
        expected["invalid_value"] += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for i, r in enumerate(records):
            w.writerow(r)
            if i in (rows // 3, 2 * rows // 3):  # a broken line: too few fields
                f.write(f"B{i},{CUSTOMERS[0]},truncated\n")
                expected["malformed"] += 1
    return expected
