"""The five core/v1 calls cargoship makes, through the official client's ApiClient.

The client's generated `CoreV1Api` is one 4 MB module whose import builds hundreds of
pydantic models: about 0.8 s of CPU in every command that talks to the API (a restart's
apply, a plan that labels nodes), more than the rest of such a command's own work. Every
answer cargoship reads is read as plain JSON anyway (`_preload_content=False`: no model is
ever built), so these methods serialise the request with the client's own `param_serialize`
and send it with its `call_api`: the same Configuration, credentials, TLS, connection pool
and timeouts, and the same ApiException for an answer outside 2xx, as
`ApiClient._call_with_legacy_options` raises it. Same names and keywords as CoreV1Api's,
so a CoreV1Api can stand in for it (the tests' own clients do).

Written against the client's generated-code API of major 37, in this one place.
"""

from __future__ import annotations

import json
from typing import Any

# The generated CoreV1Api's query parameters, by the keyword its methods take.
_QUERY = {"field_selector": "fieldSelector", "label_selector": "labelSelector",
          "watch": "watch", "resource_version": "resourceVersion",
          "allow_watch_bookmarks": "allowWatchBookmarks", "timeout_seconds": "timeoutSeconds",
          "limit": "limit", "_continue": "continue"}


class CoreV1:
    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def list_node(self, **kwargs: Any) -> Any:
        return self._call("GET", "/api/v1/nodes", **kwargs)

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._call("GET", "/api/v1/pods", **kwargs)

    def read_node(self, name: str, **kwargs: Any) -> Any:
        return self._call("GET", f"/api/v1/nodes/{_segment(name)}", **kwargs)

    def patch_node(self, name: str, body: Any, **kwargs: Any) -> Any:
        # What the client's REST layer sends for an object body: a strategic merge patch
        # (a list body would be a JSON patch).
        kind = "application/json-patch+json" if isinstance(body, list) \
            else "application/strategic-merge-patch+json"
        return self._call("PATCH", f"/api/v1/nodes/{_segment(name)}", body=body,
                          content_type=kind, **kwargs)

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any,
                                       **kwargs: Any) -> Any:
        return self._call("POST", f"/api/v1/namespaces/{_segment(namespace)}/pods/"
                                  f"{_segment(name)}/eviction", body=body,
                          content_type="application/json", **kwargs)

    def _call(self, method: str, path: str, *, body: Any = None, content_type: str = "",
              _preload_content: bool = True, _request_timeout: Any = None,
              **params: Any) -> Any:
        """The raw urllib3 response with `_preload_content=False` (a 2xx one: any other
        raises ApiException), else the answer's JSON."""
        from kubernetes.client.exceptions import ApiException

        unknown = set(params) - set(_QUERY)
        if unknown:  # a typo must not become a silently unfiltered request
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        query = [(_QUERY[k], _text(v)) for k, v in params.items() if v is not None]
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        method, url, header_params, serialized, post_params = self.api_client.param_serialize(
            method, path, query_params=query, header_params=headers, body=body,
            auth_settings=["BearerToken"])
        response = self.api_client.call_api(method, url, header_params, serialized,
                                            post_params, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()  # the body, for the exception's message
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        if not _preload_content:
            return response.response
        return json.loads(response.read() or b"null")


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _segment(value: str) -> str:
    """A name in a path: the client quotes path parameters the same way (safe='')."""
    from urllib.parse import quote

    return quote(str(value), safe="")
