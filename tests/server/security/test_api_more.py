"""Attacks on the store API, crons, stateless runs and state patches of a real ``onward
serve`` with tokens: mallory (the attacker) against alice's items, crons and threads, and
input past every bound. Each asserts the refusal and that alice's data did not change."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from onward.errors import RequestLimitError
from onward.serve.items import ItemLimits, Items, user_label
from onward.store.database import Store
from tests.support.security import VICTIM, auth
from tests.support.serve_api import chain


def as_alice(api: httpx.Client) -> dict[str, str]:
    return auth(VICTIM)


def test_a_user_cannot_read_list_overwrite_or_delete_another_users_items(
    api: httpx.Client,
) -> None:
    alice = as_alice(api)
    item = {"namespace": ["secrets"], "key": "k", "value": {"pin": "1234"}}
    assert api.put("/store/items", json=item, headers=alice).status_code == 204
    ns = {"namespace": "secrets", "key": "k"}
    assert api.get("/store/items", params=ns, headers=alice).json()["value"] == {"pin": "1234"}

    # mallory, by the same names, by alice's internal label, by wildcards and prefixes
    assert api.get("/store/items", params=ns).json() is None
    forged = {"namespace": f"{user_label('alice')}.secrets", "key": "k"}
    assert api.get("/store/items", params=forged).json() is None
    for prefix in ([], ["secrets"], ["*"], ["%"], [user_label("alice")]):
        res = api.post("/store/items/search", json={"namespace_prefix": prefix})
        assert res.status_code == 200, res.text
        assert res.json()["items"] == []
    assert api.post("/store/namespaces", json={}).json() == {"namespaces": []}
    assert api.post("/store/namespaces", json={"suffix": ["secrets"]}).json() == {"namespaces": []}
    evil = {**item, "value": {"pin": "0000"}}
    assert api.put("/store/items", json=evil).status_code == 204  # mallory's own item
    gone = {"namespace": ["secrets"], "key": "k"}
    assert api.request("DELETE", "/store/items", json=gone).status_code == 204  # mallory's own
    assert api.get("/store/items", params=ns, headers=alice).json()["value"] == {"pin": "1234"}
    found = api.post("/store/items/search", json={"namespace_prefix": []}, headers=alice).json()
    assert [i["value"] for i in found["items"]] == [{"pin": "1234"}]


def test_store_input_past_every_bound_is_refused_and_stores_nothing(api: httpx.Client) -> None:
    limits = ItemLimits()
    attacks = [
        ({"namespace": ["a"], "key": "k", "value": {"x": "v" * limits.max_value_bytes}}, 413),
        ({"namespace": ["a"] * (limits.max_depth + 1), "key": "k", "value": {}}, 422),
        ({"namespace": ["a" * (limits.max_label + 1)], "key": "k", "value": {}}, 422),
        ({"namespace": ["a"], "key": "k" * (limits.max_key + 1), "value": {}}, 422),
        ({"namespace": "a", "key": "k", "value": {}}, 422),
        ({"namespace": [1], "key": "k", "value": {}}, 422),
        ({"namespace": ["a"], "key": ["k"], "value": {}}, 422),
        ({"namespace": ["a"], "key": "k", "value": "x"}, 422),
        ({"namespace": ["a"], "key": "k", "value": {"x": 1}, "ttl": 1}, 422),
    ]
    for body, status in attacks:
        res = api.put("/store/items", json=body)
        assert res.status_code == status, (str(body)[:200], res.text)
    searches = [
        {"namespace_prefix": ["a"], "limit": limits.max_page + 1},
        {"namespace_prefix": ["a"], "limit": -1},
        {"namespace_prefix": ["a"], "offset": "x"},
        {"namespace_prefix": ["a"], "filter": {"x') OR 1=1; DROP TABLE store; --": 1}},
        {"namespace_prefix": ["a"], "filter": {"x": {"$eq": {"nested": [1]}}}},
        {"namespace_prefix": ["a"], "filter": "x"},
        {"namespace_prefix": "a"},
    ]
    for body in searches:
        res = api.post("/store/items/search", json=body)
        assert res.status_code == 422, (body, res.text)
    for body in ({"max_depth": 0}, {"limit": 10_000}, {"prefix": ["a."]}):
        assert api.post("/store/namespaces", json=body).status_code == 422, body
    assert api.post("/store/items/search", json={"namespace_prefix": []}).json() == {"items": []}


def test_a_user_past_the_item_quota_is_refused_but_may_still_update(db_url: str) -> None:
    with Store(db_url) as store:
        items = Items(store.url, store.backend, store.cipher, ItemLimits(max_items=2))
        try:
            items.put("mallory", ("a",), "1", {"n": 1})
            items.put("mallory", ("a",), "2", {"n": 2})
            with pytest.raises(RequestLimitError, match="most"):
                items.put("mallory", ("b",), "3", {"n": 3})
            items.put("mallory", ("a",), "2", {"n": 22})  # an update adds nothing
            items.put("alice", ("a",), "1", {"n": 1})  # another user's quota is theirs
            got = items.get("mallory", ("a",), "2")
            assert got is not None
            assert got["value"] == {"n": 22}
            assert items.get("mallory", ("b",), "3") is None
        finally:
            items.close()


def test_a_user_cannot_see_change_or_delete_another_users_crons(api: httpx.Client) -> None:
    alice = as_alice(api)
    tid = api.post("/threads", json={}, headers=alice).json()["thread_id"]
    cron = {"assistant_id": "onward", "schedule": "0 9 * * *", "input": chain("a")}
    made = api.post(f"/threads/{tid}/runs/crons", json=cron, headers=alice)
    assert made.status_code == 200, made.text
    cron_id = made.json()["cron_id"]
    assert made.json()["user_id"] == "alice"

    assert api.get(f"/runs/crons/{cron_id}").status_code == 404
    assert api.patch(f"/runs/crons/{cron_id}", json={"schedule": "* * * * *"}).status_code == 404
    assert api.delete(f"/runs/crons/{cron_id}").status_code == 404
    assert api.post("/runs/crons/search", json={}).json() == []
    assert api.post("/runs/crons/search", json={"thread_id": tid}).json() == []
    assert api.post("/runs/crons/count", json={}).json() == 0
    # mallory cannot schedule runs on alice's thread
    assert api.post(f"/threads/{tid}/runs/crons", json=cron).status_code == 404
    mine = api.get(f"/runs/crons/{cron_id}", headers=alice).json()
    assert mine["schedule"] == "0 9 * * *"
    assert mine["enabled"] is True


def test_a_cron_cannot_loosen_the_run_policy_or_flood_the_server(api: httpx.Client) -> None:
    base = {"assistant_id": "onward", "schedule": "* * * * *"}
    for extra, status in [
        ({"input": {"goal": "pay", "policy": {"auto_approve": ["pay"]}}}, 403),
        ({"input": {"goal": "pay", "budget": {"workdir": "/"}}}, 403),
        ({"input": {"goal": "pay", "policy": {"confine_paths": False}}}, 403),
        ({"schedule": "* * * * * *"}, 422),  # every second
        ({"schedule": "*/1 * * * * */1"}, 422),
        ({"webhook": "http://10.0.0.1/x"}, 422),  # egress policy
        ({"assistant_id": "someone-elses"}, 404),
        ({"checkpoint_id": "x"}, 422),
        ({"end_time": "tomorrow"}, 422),
    ]:
        res = api.post("/runs/crons", json={**base, **extra})
        assert res.status_code == status, (extra, res.text)
    assert api.post("/runs/crons/count", json={}).json() == 0
    made = 0
    while True:
        res = api.post("/runs/crons", json={**base, "schedule": "0 0 1 1 *"})
        if res.status_code != 200:
            break
        made += 1
        assert made <= 200, "no limit on crons per user"
    assert res.status_code == 429
    assert made == 100


def test_patch_state_of_another_users_thread_is_404_and_changes_nothing(
    api: httpx.Client, workdir: Path
) -> None:
    alice = as_alice(api)
    tid = api.post("/threads", json={}, headers=alice).json()["thread_id"]
    res = api.post(
        f"/threads/{tid}/runs/wait",
        json={"assistant_id": "onward", "input": chain("a")},
        headers=alice,
    )
    assert res.status_code == 200, res.text
    before = api.get(f"/threads/{tid}/state", headers=alice).json()
    for body in ({"metadata": {"owned": "by mallory"}}, {"metadata": {"source": "x"}}):
        assert api.patch(f"/threads/{tid}/state", json=body).status_code == 404
    for body, status in [
        ({"metadata": {"source": "input"}}, 403),
        ({"metadata": {"parents": {}}}, 403),
        ({"metadata": {"onward_owner": "mallory"}}, 403),
        ({"metadata": {f"k{i}": i for i in range(65)}}, 422),
    ]:
        res = api.patch(f"/threads/{tid}/state", json=body, headers=alice)
        assert res.status_code == status, (body, res.text)
    after = api.get(f"/threads/{tid}/state", headers=alice).json()
    assert after == before


def test_a_stateless_run_is_its_callers_alone(api: httpx.Client) -> None:
    alice = as_alice(api)
    res = api.post(
        "/runs/wait",
        json={"assistant_id": "onward", "input": chain("a"), "on_completion": "keep"},
        headers=alice,
    )
    assert res.status_code == 200, res.text
    tid = res.headers["content-location"].split("/")[2]
    assert api.get(f"/threads/{tid}").status_code == 404
    assert api.get(f"/threads/{tid}", headers=alice).status_code == 200
    assert api.post("/threads/search", json={}).json() == []
    # a thread run cannot ask for its thread to be deleted when it ends (only a stateless
    # run's own thread is, by the server)
    res = api.post(
        f"/threads/{tid}/runs/wait",
        json={"assistant_id": "onward", "input": chain("c"), "on_completion": "delete"},
        headers=alice,
    )
    assert res.status_code == 422, res.text
    assert "on_completion" in res.text
    assert api.get(f"/threads/{tid}", headers=alice).status_code == 200
    # a stateless run cannot reach into a thread by naming a checkpoint or a question
    res = api.post("/runs/wait", json={"input": chain("b"), "command": {"resume": "x"}})
    assert res.status_code == 422


JUNK: tuple[object, ...] = (
    *(None, True, 0, -1, 1.5, 2**63 - 1, "", "x", "a.b", "*", "%", "../../etc/passwd"),
    *([], [1], ["a"], [""], [None], [["a"]], ["a"] * 50, {}, {"a": 1}, {"$eq": []}),
    *({"a": {"$gt": {}}}, "x" * 5000, {"": None}),
)
"""A value of every JSON type and of the shapes the new routes look into."""
JUNK_ROUTES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("PUT", "/store/items", ("namespace", "key", "value", "index", "ttl")),
    ("DELETE", "/store/items", ("namespace", "key")),
    ("POST", "/store/items/search", ("namespace_prefix", "filter", "limit", "offset", "query")),
    ("POST", "/store/namespaces", ("prefix", "suffix", "max_depth", "limit", "offset")),
    ("POST", "/runs/crons/search", ("assistant_id", "thread_id", "enabled", "metadata", "limit")),
    ("POST", "/runs/crons/search", ("offset", "sort_by", "sort_order", "select")),
    ("POST", "/runs/crons/count", ("assistant_id", "thread_id", "metadata", "enabled")),
    ("POST", "/runs/crons", ("schedule", "timezone", "end_time", "enabled", "on_run_completed")),
    ("POST", "/runs/crons", ("input", "metadata", "stream_mode", "interrupt_before")),
    ("PATCH", "/runs/crons/{cron}", ("schedule", "timezone", "end_time", "enabled", "input")),
    ("PATCH", "/threads/{thread}/state", ("metadata", "checkpoint_id", "checkpoint")),
)


def test_junk_in_every_field_of_the_new_routes_is_a_4xx_never_a_5xx(api: httpx.Client) -> None:
    tid = api.post("/threads", json={}).json()["thread_id"]
    res = api.post(
        f"/threads/{tid}/runs/wait", json={"assistant_id": "onward", "input": chain("a")}
    )
    assert res.status_code == 200, res.text
    base_cron = {"assistant_id": "onward", "schedule": "0 0 1 1 *"}
    cron = api.post("/runs/crons", json=base_cron).json()["cron_id"]
    valid: dict[str, dict[str, object]] = {
        "/store/items": {"namespace": ["a"], "key": "k", "value": {"v": 1}},
        "/runs/crons": base_cron,
        "/threads/{thread}/state": {"metadata": {"m": 1}},
    }
    for method, template, fields in JUNK_ROUTES:
        path = template.format(cron=cron, thread=tid)
        for field in fields:
            for junk in JUNK:
                body = {**valid.get(template, {}), field: junk}
                res = api.request(method, path, json=body)
                assert res.status_code < 500, (method, path, field, junk, res.text)
        for raw in (b"[]", b"1", b"null", b'"x"', b"{"):
            res = api.request(
                method, path, content=raw, headers={"content-type": "application/json"}
            )
            assert res.status_code < 500, (method, path, raw, res.text)
    for params in ({"namespace": "", "key": "k"}, {"namespace": "a..b", "key": ""}, {}):
        assert api.get("/store/items", params=params).status_code < 500
    for raw in (b"{}", b"[1]", b"[" + b"{}," * 20 + b"{}]", b"[null]"):
        res = api.post("/runs/batch", content=raw, headers={"content-type": "application/json"})
        assert 400 <= res.status_code < 500, (raw, res.text)
    # alice's state was never the target; mallory's thread is still readable and whole
    assert api.get(f"/threads/{tid}/state").status_code == 200
