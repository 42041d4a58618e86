"""Cluster-wide watches of nodes, pods, ResourceQuotas and LimitRanges that feed the :class:`views.ClusterView`.

Capacity accounting needs every pod on a node, in every namespace, and the nodes
themselves, even when the operator serves some namespaces; kopf serves only what it handles
in its namespaces, so these watches run beside it, each in a thread: list, then watch
from the list's resourceVersion, re-list when the watch expires (410 Gone) or fails. The
planner reads every namespace's ResourceQuotas as capacity too, and a job's settings the
LimitRanges of its namespace (they clip its bounds). Each event is parsed as JSON and put
in the view as it is: the client's watch helper would also build a model object of it (and
dump and parse it again to do so), which in a busy cluster cost more than the rest.
Needs ``list``/``watch`` on nodes, pods, resourcequotas and limitranges cluster-wide (the chart's
``planner.watchNodes``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from decor.core.views import ClusterView

log = logging.getLogger("decor.operator")

WATCH_TIMEOUT_S = 300
"""Server-side timeout of one watch request; it is renewed from the last resourceVersion."""
RETRY_S = 5.0
"""Pause before re-listing after an error."""
OK_STATUS = range(200, 300)


def watch_events(response: Any) -> Iterator[dict[str, Any]]:
    """The events of one watch response (one JSON object a line), as dicts: ``type`` and
    ``object``. A response that is not a success raises."""
    from kubernetes.watch.watch import iter_resp_lines

    if response.status not in OK_STATUS:
        raise RuntimeError(f"HTTP {response.status}: {response.data[:200]!r}")
    for line in iter_resp_lines(response):
        if line.strip():
            yield json.loads(line)


class ClusterWatch:
    """Four threads keeping ``view``'s nodes, pods, ResourceQuotas and LimitRanges current until
    :meth:`stop`."""

    def __init__(self, view: ClusterView, api_client: Any) -> None:
        from kubernetes import client

        self.view = view
        self.core = client.CoreV1Api(api_client)
        self.api_client = api_client
        self.stopped = threading.Event()
        watched = (
            ("nodes", self.core.list_node, view.replace_nodes, view.put_node),
            ("pods", self.core.list_pod_for_all_namespaces, view.replace_pods, view.put_pod),
            (
                "resourcequotas",
                self.core.list_resource_quota_for_all_namespaces,
                view.replace_quotas,
                view.put_quota,
            ),
            (
                "limitranges",
                self.core.list_limit_range_for_all_namespaces,
                view.replace_limit_ranges,
                view.put_limit_range,
            ),
        )
        self.threads = [
            threading.Thread(target=self._run, args=w, name=f"decor-watch-{w[0]}", daemon=True)
            for w in watched
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(
        self,
        what: str,
        lister: Callable[..., Any],
        replace: Callable[[list[dict[str, Any]]], None],
        put: Callable[..., None],
    ) -> None:
        while not self.stopped.is_set():
            try:
                listed = lister(_preload_content=False, _request_timeout=60)
                body = json.loads(listed.data)
                replace(list(body.get("items") or []))
                version = body.get("metadata", {}).get("resourceVersion")
                while not self.stopped.is_set():
                    response = lister(
                        watch=True,
                        resource_version=version,
                        timeout_seconds=WATCH_TIMEOUT_S,
                        allow_watch_bookmarks=True,
                        _preload_content=False,
                        _request_timeout=WATCH_TIMEOUT_S + 30,
                    )
                    try:
                        for event in watch_events(response):
                            if self.stopped.is_set():
                                return
                            version = self._apply(what, event, put, version)
                    finally:
                        response.close()
                        response.release_conn()
            except Exception as exc:  # noqa: BLE001 - keep watching whatever happened
                log.warning("watch of %s failed (%s); listing again in %gs", what, exc, RETRY_S)
                self.stopped.wait(RETRY_S)

    @staticmethod
    def _apply(what: str, event: dict[str, Any], put: Callable[..., None], version: str) -> str:
        """Put one watch event in the view; the resourceVersion to watch from after it. An
        ERROR event (the watch expired: 410 Gone) raises, and the caller lists again."""
        kind = event.get("type")
        raw = event.get("object") or {}
        if kind == "ERROR":
            raise RuntimeError(f"watch of {what} ended: {raw.get('message')}")
        version = (raw.get("metadata") or {}).get("resourceVersion", version)
        if kind != "BOOKMARK":
            put(raw, deleted=kind == "DELETED")
        return version
