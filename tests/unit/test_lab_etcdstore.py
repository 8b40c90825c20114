"""The lab's etcd-backed API store (tests/lab/kubeapi_etcdstore.py), without a member: the
keys it writes are kube-apiserver's, and every key it writes is one it reads back as the
same object; keys it does not write are none of its business."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[1] / "lab"
sys.path.insert(0, str(LAB))  # the lab's API modules import their siblings by name
try:
    import kubeapi_etcd
    import kubeapi_etcdstore as etcdstore
    from kubeapi_store import KINDS, NODES, PODS
finally:
    sys.path.remove(str(LAB))


def test_objects_live_under_kube_apiservers_keys() -> None:
    assert etcdstore._key(NODES, "/ctl-1") == "/registry/nodes/ctl-1"
    assert etcdstore._key(PODS, "kube-system/web") == "/registry/pods/kube-system/web"
    helm = KINDS[("helm.cattle.io", "helmchartconfigs")]
    assert etcdstore._key(helm, "kube-system/traefik") == \
        "/registry/helm.cattle.io/helmchartconfigs/kube-system/traefik"


@pytest.mark.parametrize("kind", list(KINDS.values()), ids=lambda k: k.resource)
def test_every_key_written_reads_back_as_its_object(kind) -> None:  # type: ignore[no-untyped-def]
    key = "ns-a/name-b" if kind.namespaced else "/name-b"
    assert etcdstore._kind_of(etcdstore._key(kind, key)) == (kind, key)


@pytest.mark.parametrize("key", ["/registry/health", "/registry/", "/lab/x",
                                 "/registry/minions/x", "/registryx/nodes/a"])
def test_other_keys_are_not_objects(key: str) -> None:
    assert etcdstore._kind_of(key) is None


def test_a_prefix_range_ends_after_its_last_key() -> None:
    end = base64.b64decode(kubeapi_etcd.prefix_end("/registry/")).decode()
    assert end == "/registry0" and "/registry/zzz" < end and "/registry0" >= end


def test_a_value_that_is_no_object_is_left_out_and_an_object_gets_its_revision() -> None:
    def kv(value: bytes) -> dict[str, str]:
        return {"key": "", "mod_revision": "42", "value": base64.b64encode(value).decode()}

    assert etcdstore._decode(kv(b"not json")) is None
    assert etcdstore._decode(kv(b"[1, 2]")) is None
    assert etcdstore._decode(kv(b'{"metadata": "x"}')) is None
    obj = etcdstore._decode(kv(b'{"metadata": {"name": "a", "resourceVersion": "7"}}'))
    assert obj == {"metadata": {"name": "a", "resourceVersion": "42"}}


class _Member:
    """A member that answers `failures` first, then a range at revision 7."""

    def __init__(self, *failures: str) -> None:
        self.failures = list(failures)
        self.calls = 0

    def call(self, path: str, body: dict, timeout: float) -> dict:  # type: ignore[type-arg]
        self.calls += 1
        if self.failures:
            raise kubeapi_etcd.EtcdUnavailable(self.failures.pop(0))
        return {"header": {"revision": "7", "cluster_id": "1"}}


def _client(member: _Member, timeout: float = 1.0) -> kubeapi_etcd.Members:
    import threading

    client = kubeapi_etcd.Members.__new__(kubeapi_etcd.Members)
    client.endpoints, client.timeout, client._current = [member], timeout, 0  # type: ignore[list-item]
    client.moved = threading.Event()
    return client


def test_a_read_a_leaders_hand_over_answered_is_asked_again_as_etcds_client_does() -> None:
    member = _Member("etcdserver: leader changed", "etcdserver: leader changed")
    assert _client(member).revision() == (7, "1")
    assert member.calls == 3
    assert _client(_Member("etcdserver: leader changed")).check() == (True, "")


def test_any_other_failure_of_a_read_is_at_once_and_a_hand_over_only_until_the_deadline() -> None:
    for why in ("etcdserver: no leader", "ConnectionRefusedError: [Errno 111] refused"):
        member = _Member(why, why)
        with pytest.raises(kubeapi_etcd.EtcdUnavailable, match=why[:10]):
            _client(member).revision()
        assert member.calls == 1
    endless = _Member(*["etcdserver: leader changed"] * 1000)
    with pytest.raises(kubeapi_etcd.EtcdUnavailable, match="leader changed"):
        _client(endless, timeout=0.2).revision()
    assert 2 <= endless.calls < 1000


def test_a_kubelets_delete_that_found_no_quorum_is_tried_again() -> None:
    """The kubelet's delete of a terminated pod (the lab's own view does it) is tried
    again while it finds no quorum, as the real one does at its status manager's next
    sync: one try left the pod terminating for good, and a drain timed out on it (CI,
    2026-12-05: the member the view read was paused)."""
    import kubeapi_store

    class Flaky(kubeapi_store.Store):  # type: ignore[misc]
        failures = 0

        def _transact(self, op):  # type: ignore[no-untyped-def]
            if self.failures:
                self.failures -= 1
                raise OSError("etcd: no quorum")
            return super()._transact(op)

    store = Flaky(0)
    pod = store.create(PODS, "default", {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "i"}]}})
    store.failures = 2  # the next two tries find no quorum
    before = kubeapi_store.KUBELET_RETRY
    kubeapi_store.KUBELET_RETRY = 0.01
    try:
        store._terminated("default", "p", pod["metadata"]["uid"])
    finally:
        kubeapi_store.KUBELET_RETRY = before
    assert store.failures == 0
    assert "default/p" not in store.objects["pods"]
