"""The watches (decor.adapter.watch): list, then watch from the list's
resourceVersion, events parsed as they come (a line may arrive in pieces), bookmarks move
the resourceVersion only, an expired watch (an ERROR event) lists again. The API server is a
fake lister that answers as the client does with ``_preload_content=False``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from decor.adapter import watch as watch_module
from decor.adapter.watch import Watches, watch_events
from decor.core.views import ClusterView
from kubernetes import client


class Response:
    """A urllib3 response as the client returns it unread: ``data``, ``stream`` in chunks."""

    def __init__(self, chunks: list[bytes], status: int = 200) -> None:
        self.chunks, self.status = chunks, status

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield from self.chunks

    def close(self) -> None:
        """(Nothing to close: no connection here.)"""

    def release_conn(self) -> None:
        """(Nothing to give back.)"""


def _pod(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}}


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def test_events_are_parsed_whole_when_a_line_comes_in_pieces() -> None:
    added = _line("ADDED", _pod("b", "11"))
    response = Response([added[:7], added[7:] + b"\n", _line("DELETED", _pod("b", "12"))])
    events = list(watch_events(response))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("DELETED", "b"),
    ]


def test_a_watch_the_server_refuses_raises() -> None:
    with pytest.raises(RuntimeError, match="HTTP 403"):
        list(watch_events(Response([b'{"reason": "Forbidden"}'], status=403)))


def test_list_then_watch_from_its_version_and_list_again_when_the_watch_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watch_module, "RETRY_S", 0.01)
    cluster = Watches.cluster(ClusterView(), client.ApiClient())
    listed = {"metadata": {"resourceVersion": "10"}, "items": [_pod("a", "9")]}
    watches = [
        Response(
            [
                _line("ADDED", _pod("b", "11")),
                _line("BOOKMARK", {"metadata": {"resourceVersion": "15"}}),
                _line("MODIFIED", _pod("a", "16")),
            ]
        ),  # ends: the server's timeout; the next watch goes on from version 16
        Response([_line("ERROR", {"code": 410, "message": "too old resource version"})]),
    ]
    calls: list[dict[str, Any]] = []
    seen: list[tuple[str, str, bool]] = []
    lists: list[list[str]] = []

    def lister(**kwargs: Any) -> Response:
        calls.append(kwargs)
        if not kwargs.get("watch"):
            if lists:  # listed again after the expired watch: enough
                cluster.stop()
            return Response([json.dumps(listed).encode()])
        return watches.pop(0)

    def replace(items: list[dict[str, Any]]) -> None:
        lists.append([i["metadata"]["name"] for i in items])

    def put(raw: dict[str, Any], deleted: bool = False) -> None:
        seen.append((raw["metadata"]["name"], raw["metadata"]["resourceVersion"], deleted))

    runner = threading.Thread(target=cluster._run, args=("pods", lister, replace, put))
    runner.start()
    runner.join(10)
    assert not runner.is_alive()
    assert seen == [("b", "11", False), ("a", "16", False)]  # the bookmark put nothing
    watch_versions = [c["resource_version"] for c in calls if c.get("watch")]
    assert watch_versions == ["10", "16"]
    assert lists == [["a"], ["a"]]
    assert all(c["_preload_content"] is False for c in calls)


def test_without_the_capacity_view_only_trainer_pods_are_watched_in_each_namespace_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def recorder(name: str) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Response:
            calls.append((name, args, kwargs))
            return Response(
                [json.dumps({"metadata": {"resourceVersion": "1"}, "items": []}).encode()]
            )

        return call

    for name in ("list_namespaced_pod", "list_pod_for_all_namespaces"):
        monkeypatch.setattr(client.CoreV1Api, name, recorder(name))
    view = ClusterView()
    served = Watches.trainer_pods(view, client.ApiClient(), ("ml", "ml-dev"))
    assert [t.name for t in served.threads] == [
        "decor-watch-trainer-pods-ml",
        "decor-watch-trainer-pods-ml-dev",
    ]
    for thread in served.threads:
        what, lister, replace, _ = thread._args  # type: ignore[attr-defined]
        lister(_preload_content=False)
        replace([])
        assert view.unlisted_namespaces == ({"ml-dev"} if what.endswith("-ml") else set())
    assert calls == [
        (
            "list_namespaced_pod",
            ("ml",),
            {"label_selector": "decor.dev/job", "_preload_content": False},
        ),
        (
            "list_namespaced_pod",
            ("ml-dev",),
            {"label_selector": "decor.dev/job", "_preload_content": False},
        ),
    ]
    everywhere = Watches.trainer_pods(ClusterView(), client.ApiClient(), ())
    (thread,) = everywhere.threads
    thread._args[1](_preload_content=False)  # type: ignore[attr-defined]
    assert calls[-1] == (
        "list_pod_for_all_namespaces",
        (),
        {"label_selector": "decor.dev/job", "_preload_content": False},
    )
