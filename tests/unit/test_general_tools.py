"""The general tools a model plans with: read_file, list_dir, http_get (allowlisted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onward import DeterministicToolError, ToolContext
from onward.tools.registry import default_registry
from tests.support.httpfake import FakeService


def _call(name: str, args: dict[str, object], workdir: Path) -> object:
    spec = default_registry.get(name)
    assert spec is not None
    ctx = ToolContext(thread_id="t", step_id="s", attempt=1, workdir=workdir)
    return spec.call(spec.args_model.model_validate(args), ctx)


def test_read_file_reads_text_and_says_when_it_truncated(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("héllo world", encoding="utf-8")
    out = _call("read_file", {"path": "notes.txt", "max_bytes": 5}, tmp_path)
    assert out == {"path": "notes.txt", "text": "héll", "bytes": 12, "truncated": True}
    with pytest.raises(FileNotFoundError, match=r"nope\.txt is not a file"):
        _call("read_file", {"path": "nope.txt"}, tmp_path)


def test_list_dir_lists_matching_files_sorted(tmp_path: Path) -> None:
    (tmp_path / "in" / "sub").mkdir(parents=True)
    for name in ("b.txt", "a.txt", "c.csv", "sub/d.txt"):
        (tmp_path / "in" / name).write_text("x")
    assert _call("list_dir", {"path": "in", "pattern": "*.txt"}, tmp_path) == {
        "path": "in",
        "files": ["in/a.txt", "in/b.txt"],
        "count": 2,
    }
    assert _call("list_dir", {"path": "in", "pattern": "**/*.txt"}, tmp_path)["count"] == 3  # type: ignore[index]


def test_http_get_only_reaches_allowlisted_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeService() as service:
        url = f"{service.base_url}/stats"
        with pytest.raises(DeterministicToolError, match="not allowed") as refused:
            _call("http_get", {"url": url}, tmp_path)
        assert refused.value.hint is not None
        assert "ONWARD_HTTP_ALLOW" in refused.value.hint
        monkeypatch.setenv("ONWARD_HTTP_ALLOW", f"127.0.0.1:{service.port}")
        out = _call("http_get", {"url": url}, tmp_path)
    assert out["status"] == 200  # type: ignore[index]
    assert '"total"' in out["text"]  # type: ignore[index]


def test_http_get_refuses_what_is_not_http(tmp_path: Path) -> None:
    with pytest.raises(DeterministicToolError, match="not an http"):
        _call("http_get", {"url": "file:///etc/passwd"}, tmp_path)
