"""The only module that calls the Kubernetes API (besides kopf's own watching).

A small synchronous facade over the official ``kubernetes`` client: the trainer pod
(create, get, list, delete, resize), the job's status, Events, and the CRD (its revision).
Everything returns plain dicts shaped like the API's JSON (camelCase keys), so the pure
builders and readers of ``build.py`` work on them directly. Calls block; the kopf layer runs
them in a thread.

Errors: a missing object is None / False, never an exception; anything else raises
``KubeError`` (with the API's status code and message), except Events, which are best
effort and only logged.

Fencing: with several replicas, only the leader writes. ``may_write`` (set by the leader
election, :mod:`decor.service.election`) is asked before every write to the cluster; when it says no,
the write is not sent and :class:`Fenced` is raised. The Lease itself is written regardless.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from decor.api.vocabulary import API_GROUP, API_VERSION, PLURAL
from decor.core.build import build_resize_patch

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
CONNECTIONS = 32
"""Connections to the API server kept open for reuse (calls at once beyond it open new ones)."""
DEFAULT_TIMEOUT_S = 10.0
"""Per-request timeout; the control loop holds the allocation when a call times out."""


class KubeError(RuntimeError):
    """An API call failed. ``status`` is the HTTP status (0 when there was none)."""

    def __init__(self, what: str, status: int, message: str) -> None:
        super().__init__(f"{what}: {status} {message}".strip())
        self.status = status
        self.message = message


class Fenced(KubeError):
    """A write refused before it was sent: this replica does not hold the leader's Lease."""

    def __init__(self, what: str) -> None:
        super().__init__(what, 0, "not sent: this replica is not the acting leader")


def _api_exception() -> type[Exception]:
    from kubernetes.client.exceptions import ApiException

    return ApiException


def _transport_errors() -> tuple[type[Exception], ...]:
    """What a request raises when it never got an answer: connection refused or reset, a
    timeout (urllib3 wraps those in MaxRetryError, which is no OSError), a bad payload."""
    from urllib3.exceptions import HTTPError

    return (OSError, ValueError, HTTPError)


def _error_message(exc: Exception) -> tuple[int, str]:
    status = int(getattr(exc, "status", 0) or 0)
    body = getattr(exc, "body", None)
    message = str(getattr(exc, "reason", "") or exc)
    if body:
        try:
            message = json.loads(body).get("message", message)
        except (TypeError, ValueError):
            message = str(body)[:500]
    return status, message


class Kube:
    """Kubernetes API calls the operator makes. Build with :meth:`from_environment`."""

    def __init__(self, api_client: Any, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.timeout_s = timeout_s
        self.may_write: Callable[[], bool] | None = None
        """Asked before each write to the cluster (None: always allowed; one replica)."""

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None) -> Kube:
        """In-cluster credentials when running in a pod, else ``$KUBECONFIG``/~/.kube/config."""
        from kubernetes import client, config

        configuration = client.Configuration()
        try:
            if kubeconfig:
                raise config.ConfigException("explicit kubeconfig")
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        # Kept connections: the commit workers and the status writer's (8 + 8 by default)
        # call at once; the client's default (5 per CPU of the host) would open and drop a
        # TLS connection per call beyond it on a small node.
        configuration.connection_pool_maxsize = CONNECTIONS
        return cls(client.ApiClient(configuration))

    # --- plumbing -----------------------------------------------------------------------------

    def _json(self, response: Any) -> dict[str, Any]:
        """A raw (``_preload_content=False``) response's JSON body as a dict."""
        data = getattr(response, "data", None)
        if data is None and hasattr(response, "read"):
            data = response.read()
        if isinstance(data, bytes | bytearray):
            data = data.decode("utf-8")
        result = json.loads(data) if data else {}
        return result if isinstance(result, dict) else {}

    def _fence(self, what: str) -> None:
        """Raise :class:`Fenced` unless this replica may write now."""
        if self.may_write is not None and not self.may_write():
            raise Fenced(what)

    def _call(
        self,
        what: str,
        fn: Any,
        *args: Any,
        missing_ok: bool = False,
        write: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Call ``fn`` returning the raw JSON dict; None for 404 when ``missing_ok``.
        ``write``: a write to the cluster, sent only while the fence allows it."""
        if write:
            self._fence(what)
        try:
            response = fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs)
        except _api_exception() as exc:
            status, message = _error_message(exc)
            if missing_ok and status == 404:
                return None
            raise KubeError(what, status, message) from exc
        except _transport_errors() as exc:
            raise KubeError(what, 0, str(exc)) from exc
        return self._json(response)

    # --- the job ------------------------------------------------------------------------------

    def patch_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any], uid: str | None = None
    ) -> bool:
        """Merge-patch ``status`` (None values delete fields). False when the job is gone.

        ``uid``: the job this status is for. The patch carries it as a precondition, so a job
        deleted and created again under the same name (another uid) is not written with the
        old one's status; the API server answers 409 and this returns False (gone)."""
        body: dict[str, Any] = {"status": dict(status)}
        if uid is not None:
            body["metadata"] = {"uid": uid}
        try:
            result = self._call(
                f"patch dtj {namespace}/{name} status",
                self.custom.patch_namespaced_custom_object_status,
                API_GROUP,
                API_VERSION,
                namespace,
                PLURAL,
                name,
                body,
                _content_type=MERGE_PATCH,
                missing_ok=True,
                write=True,
            )
        except KubeError as exc:
            if uid is not None and exc.status == 409:  # the uid precondition: another job now
                return False
            raise
        return result is not None

    # --- pods ---------------------------------------------------------------------------------

    def create_pod(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a pod; raises KubeError (status 409 when the name is taken)."""
        namespace = body["metadata"]["namespace"]
        return self._call(
            f"create pod {namespace}/{body['metadata']['name']}",
            self.core.create_namespaced_pod,
            namespace,
            dict(body),
            write=True,
        )

    def delete_pod(self, namespace: str, name: str, grace_period_s: int | None = None) -> bool:
        """Delete gracefully (SIGTERM, then SIGKILL after the grace period). False if gone."""
        kwargs: dict[str, Any] = {}
        if grace_period_s is not None:
            kwargs["grace_period_seconds"] = grace_period_s
        result = self._call(
            f"delete pod {namespace}/{name}",
            self.core.delete_namespaced_pod,
            name,
            namespace,
            missing_ok=True,
            **kwargs,
            write=True,
        )
        return result is not None

    def resize_pod_cpu(
        self, namespace: str, name: str, container: str, cores: float
    ) -> dict[str, Any]:
        """Patch the pod's ``resize`` subresource: CPU requests = limits = ``cores``.

        Returns the pod as the API server stored it; the kubelet applies the change
        asynchronously (read it back with ``build.applied_cpu_cores``).
        """
        patch = build_resize_patch(cores, container)
        what = f"resize pod {namespace}/{name}"
        resize = getattr(self.core, "patch_namespaced_pod_resize", None)
        if resize is not None:
            return self._call(
                what,
                resize,
                name,
                namespace,
                patch,
                _content_type=STRATEGIC_MERGE_PATCH,
                write=True,
            )
        return self._raw_resize(what, namespace, name, patch)  # pragma: no cover (old clients)

    def _raw_resize(
        self, what: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PATCH /api/v1/namespaces/NS/pods/NAME/resize for clients without the method."""
        self._fence(what)
        try:
            response = self.api_client.call_api(
                f"/api/v1/namespaces/{namespace}/pods/{name}/resize",
                "PATCH",
                header_params={"Content-Type": STRATEGIC_MERGE_PATCH, "Accept": "application/json"},
                body=dict(patch),
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.timeout_s,
            )
        except _api_exception() as exc:
            raise KubeError(what, *_error_message(exc)) from exc
        return self._json(response[0] if isinstance(response, tuple) else response)

    def pod_proxy_get(self, namespace: str, pod: str, port: int, path: str) -> str:
        """GET ``path`` on ``pod:port`` through the API server's pod proxy (text body).

        For an operator outside the cluster network (e.g. on a laptop against kind); needs
        ``get`` on ``pods/proxy``. Raises KubeError.
        """
        what = f"proxy GET {namespace}/{pod}:{port}{path}"
        try:
            response = self.core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod}:{port}",
                namespace,
                path.lstrip("/"),
                _preload_content=False,
                _request_timeout=self.timeout_s,
            )
        except _api_exception() as exc:
            raise KubeError(what, *_error_message(exc)) from exc
        except _transport_errors() as exc:
            raise KubeError(what, 0, str(exc)) from exc
        data = getattr(response, "data", None)
        if data is None and hasattr(response, "read"):
            data = response.read()
        return (
            data.decode("utf-8", errors="replace")
            if isinstance(data, bytes | bytearray)
            else str(data or "")
        )

    # --- checkpoint claims --------------------------------------------------------------------

    def create_claim(self, body: Mapping[str, Any]) -> bool:
        """Create a PersistentVolumeClaim; False when one of that name exists already."""
        namespace = body["metadata"]["namespace"]
        try:
            self._call(
                f"create pvc {namespace}/{body['metadata']['name']}",
                self.core.create_namespaced_persistent_volume_claim,
                namespace,
                dict(body),
                write=True,
            )
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The PersistentVolumeClaim, or None when there is none."""
        result = self._call(
            f"get pvc {namespace}/{name}",
            self.core.read_namespaced_persistent_volume_claim,
            name,
            namespace,
            missing_ok=True,
        )
        return dict(result) if result is not None else None

    # --- LimitRanges ----------------------------------------------------------------------------

    def list_limit_ranges(self, namespace: str) -> list[dict[str, Any]]:
        """The LimitRanges of ``namespace`` (read when no watch keeps them: a namespaced
        install without the capacity view)."""
        result = self._call(
            f"list limitranges {namespace}", self.core.list_namespaced_limit_range, namespace
        )
        return [dict(item) for item in (result or {}).get("items") or []]

    # --- the rendezvous Service of a several-pod job ------------------------------------------

    def ensure_service(self, body: Mapping[str, Any]) -> str:
        """Create the Service unless it exists; returns its cluster IP."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            service = self._call(
                f"create service {namespace}/{name}",
                self.core.create_namespaced_service,
                namespace,
                dict(body),
                write=True,
            )
        except KubeError as exc:
            if exc.status != 409:
                raise
            service = self._call(
                f"get service {namespace}/{name}",
                self.core.read_namespaced_service,
                name,
                namespace,
            )
        address = str((service.get("spec") or {}).get("clusterIP") or "")
        if not address or address == "None":
            raise KubeError(f"service {namespace}/{name}", 0, "has no cluster IP")
        return address

    # --- the CRD ------------------------------------------------------------------------------

    def get_crd(self, name: str) -> dict[str, Any] | None:
        """The CustomResourceDefinition ``name``, or None when there is none; raises
        KubeError (403 without ``get`` on it)."""
        from kubernetes import client

        result = self._call(
            f"get crd {name}",
            client.ApiextensionsV1Api(self.api_client).read_custom_resource_definition,
            name,
            missing_ok=True,
        )
        return dict(result) if result is not None else None

    # --- the leader's Lease (never fenced: it is how a replica becomes the leader) ----------

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The coordination.k8s.io/v1 Lease, or None when there is none."""
        result = self._call(
            f"get lease {namespace}/{name}",
            self.coordination.read_namespaced_lease,
            name,
            namespace,
            missing_ok=True,
        )
        return dict(result) if result is not None else None

    def create_lease(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Lease; raises KubeError (409 when another replica created it first)."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        return self._call(
            f"create lease {namespace}/{name}",
            self.coordination.create_namespaced_lease,
            namespace,
            dict(body),
        )

    def replace_lease(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the Lease, on condition of ``metadata.resourceVersion`` (compare-and-swap);
        raises KubeError, 409 when it changed since it was read."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        return self._call(
            f"replace lease {namespace}/{name}",
            self.coordination.replace_namespaced_lease,
            name,
            namespace,
            dict(body),
        )

    # --- events -------------------------------------------------------------------------------

    def post_event(self, body: Mapping[str, Any]) -> None:
        """Create a core/v1 Event; failures are logged, never raised (Events are advisory)."""
        namespace = body["metadata"]["namespace"]
        try:
            self._call(
                f"create event in {namespace}",
                self.core.create_namespaced_event,
                namespace,
                dict(body),
                write=True,
            )
        except KubeError as exc:
            log.warning("could not post event %s: %s", body.get("reason"), exc)
