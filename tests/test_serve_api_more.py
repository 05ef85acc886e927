"""The rest of the LangGraph Server API, through the unmodified Python ``langgraph_sdk``
against a real ``onward serve`` (both store backends): stateless runs, the store API,
patching a checkpoint's metadata, and crons run by the server's scheduler."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from tests.test_serve import serve
from tests.test_serve_api import chain, done_steps, wait_until


@pytest.fixture
def server(db_url: str, workdir: Path) -> Iterator[str]:
    with serve(db_url, workdir) as url:
        yield url


@pytest.fixture
def client(server: str) -> SyncLangGraphClient:
    return get_sync_client(url=server, api_key=None)


# -- the store API ----------------------------------------------------------------------


def test_store_items_are_put_read_searched_listed_and_deleted(client: SyncLangGraphClient) -> None:
    store = client.store
    store.put_item(["docs", "a"], "k1", {"text": "one", "n": 1})
    store.put_item(["docs", "a"], "k2", {"text": "two", "n": 2})
    store.put_item(["docs", "b"], "k3", {"text": "three", "n": 3})
    store.put_item(["notes"], "k4", {"text": "four", "n": 4})

    item = store.get_item(["docs", "a"], "k1")
    assert item["namespace"] == ["docs", "a"]
    assert item["key"] == "k1"
    assert item["value"] == {"text": "one", "n": 1}
    assert item["created_at"] and item["updated_at"]

    store.put_item(["docs", "a"], "k1", {"text": "uno", "n": 1})  # an update, not a copy
    assert store.get_item(["docs", "a"], "k1")["value"]["text"] == "uno"

    found = store.search_items(["docs"])["items"]
    assert {i["key"] for i in found} == {"k1", "k2", "k3"}
    assert [i["key"] for i in store.search_items(["docs"], filter={"n": {"$gte": 2}})["items"]] in (
        ["k2", "k3"],
        ["k3", "k2"],
    )
    assert [i["key"] for i in store.search_items([], filter={"text": "four"})["items"]] == ["k4"]
    assert len(store.search_items(["docs"], limit=2)["items"]) == 2
    assert len(store.search_items(["docs"], limit=2, offset=2)["items"]) == 1

    spaces = store.list_namespaces()["namespaces"]
    assert sorted(spaces) == [["docs", "a"], ["docs", "b"], ["notes"]]
    assert sorted(store.list_namespaces(prefix=["docs"])["namespaces"]) == [
        ["docs", "a"],
        ["docs", "b"],
    ]
    assert store.list_namespaces(suffix=["b"])["namespaces"] == [["docs", "b"]]
    assert sorted(store.list_namespaces(max_depth=1)["namespaces"]) == [["docs"], ["notes"]]

    store.delete_item(["docs", "a"], "k1")
    assert store.get_item(["docs", "a"], "k1") is None
    assert {i["key"] for i in store.search_items(["docs"])["items"]} == {"k2", "k3"}


BAD_STORE_REQUESTS: list[tuple[str, dict[str, Any], str]] = [
    ("PUT", {"namespace": ["a"], "key": "k", "value": {}, "ttl": 5}, "ttl"),
    ("PUT", {"namespace": ["a"], "key": "k", "value": {}, "index": ["text"]}, "index"),
    ("PUT", {"namespace": ["a.b"], "key": "k", "value": {}}, "periods"),
    ("PUT", {"namespace": [], "key": "k", "value": {}}, "at least one label"),
    ("PUT", {"namespace": ["a"], "key": "", "value": {}}, "key"),
    ("PUT", {"namespace": ["a"], "key": "k", "value": [1]}, "object"),
    ("PUT", {"namespace": ["a"], "key": "k", "value": {}, "color": 1}, "color"),
    ("SEARCH", {"namespace_prefix": ["a"], "query": "cats"}, "semantic"),
    ("SEARCH", {"namespace_prefix": ["a"], "limit": 10_000}, "limit"),
    ("SEARCH", {"namespace_prefix": ["a"], "filter": {"a') OR 1=1 --": 1}}, "filter field"),
    ("SEARCH", {"namespace_prefix": ["a"], "filter": {"n": {"$regex": "x"}}}, "operator"),
]


def test_store_requests_onward_does_not_take_are_a_clear_4xx(server: str) -> None:
    for method, body, word in BAD_STORE_REQUESTS:
        if method == "SEARCH":
            res = httpx.post(f"{server}/store/items/search", json=body, timeout=30)
        else:
            res = httpx.request(method, f"{server}/store/items", json=body, timeout=30)
        assert res.status_code == 422, (body, res.text)
        assert word in res.json()["detail"], (body, res.text)
    assert httpx.post(f"{server}/store/namespaces", json={}, timeout=30).json() == {
        "namespaces": []
    }
