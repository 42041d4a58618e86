"""The watches of pods (and nodes, ResourceQuotas and LimitRanges) that feed the :class:`views.ClusterView`.

Each runs beside kopf in a thread: list, then watch from the list's resourceVersion,
re-list when the watch expires (410 Gone) or fails. Until each first list has answered, the
view is not ``listed``, and the control loop waits: a period that saw a job before its pod
would take the pod for lost and create another, and the planner would plan without the
nodes and quotas still to come.

- :meth:`Watches.cluster`: capacity accounting needs every pod on a node, in every
  namespace, and the nodes themselves, even when the operator serves some namespaces. The
  planner reads every namespace's ResourceQuotas as capacity too, and a job's settings the
  LimitRanges of its namespace (they clip its bounds). Needs ``list``/``watch`` on nodes,
  pods, resourcequotas and limitranges cluster-wide (the chart's ``planner.watchNodes``).
- :meth:`Watches.trainer_pods`: without that view, only DECOR's trainer pods, in the
  namespaces served (``list``/``watch`` on pods there).

Each event is parsed as JSON and put in the view as it is: the client's watch helper would
also build a model object of it (and dump and parse it again to do so), which in a busy
cluster cost more than the rest.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from decor.api import vocabulary
from decor.core import views
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


@dataclass(frozen=True)
class Watched:
    """One list-and-watch: what it is (for the log), the client's lister (list when called
    plainly, watch with ``watch=True``), and the view's callbacks for a list and an event."""

    what: str
    lister: Callable[..., Any]
    replace: Callable[[list[dict[str, Any]]], None]
    put: Callable[..., None]


class Watches:
    """Threads keeping the view current, one per :class:`Watched`, until :meth:`stop`."""

    def __init__(self, watched: Sequence[Watched]) -> None:
        self.stopped = threading.Event()
        self.threads = [
            threading.Thread(
                target=self._run,
                args=(w.what, w.lister, w.replace, w.put),
                name=f"decor-watch-{w.what}",
                daemon=True,
            )
            for w in watched
        ]

    @classmethod
    def cluster(cls, view: ClusterView, api_client: Any) -> Watches:
        """Every node, pod, ResourceQuota and LimitRange, cluster-wide (the capacity view)."""
        from kubernetes import client

        core = client.CoreV1Api(api_client)
        view.expect_lists((views.NODES, views.EVERY_POD, views.QUOTAS, views.LIMIT_RANGES))
        return cls(
            (
                Watched("nodes", core.list_node, view.replace_nodes, view.put_node),
                Watched("pods", core.list_pod_for_all_namespaces, view.replace_pods, view.put_pod),
                Watched(
                    "resourcequotas",
                    core.list_resource_quota_for_all_namespaces,
                    view.replace_quotas,
                    view.put_quota,
                ),
                Watched(
                    "limitranges",
                    core.list_limit_range_for_all_namespaces,
                    view.replace_limit_ranges,
                    view.put_limit_range,
                ),
            )
        )

    @classmethod
    def trainer_pods(cls, view: ClusterView, api_client: Any, namespaces: Sequence[str]) -> Watches:
        """DECOR's trainer pods (those with the job label) in ``namespaces``, each watched
        apart; empty: in every namespace, in one watch."""
        from kubernetes import client

        core = client.CoreV1Api(api_client)
        selector = vocabulary.LABEL_JOB
        view.expect_lists([views.pods_in(n) for n in namespaces] or [views.EVERY_POD])
        if not namespaces:
            lister = partial(core.list_pod_for_all_namespaces, label_selector=selector)
            return cls((Watched("trainer-pods", lister, view.replace_pods, view.put_pod),))
        return cls(
            tuple(
                Watched(
                    f"trainer-pods-{namespace}",
                    partial(core.list_namespaced_pod, namespace, label_selector=selector),
                    partial(view.replace_pods, namespace=namespace),
                    view.put_pod,
                )
                for namespace in namespaces
            )
        )

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
