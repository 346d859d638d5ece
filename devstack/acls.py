"""Users and ACLs of the secured broker, set through Kafka's Admin API as the super user."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from devstack.errors import DevstackError

if TYPE_CHECKING:
    from devstack.secure import FlowGrant

TIMEOUT_S = 30.0
_OWN_TOPIC_OPS = (AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.READ)
_READ_OPS = (AclOperation.READ, AclOperation.DESCRIBE)
_LITERAL, _PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def flow_bindings(
    flow: FlowGrant,
    system_topics: Iterable[str],
    read_topics: Iterable[str],
    groups: Iterable[str],
) -> list[AclBinding]:
    """A flow's ACLs: its own topics and the system topics, its transactional ids, groups."""
    principal = f"User:{flow.user}"
    out = _allow(principal, ResourceType.TOPIC, flow.topic_prefix, _PREFIXED, _OWN_TOPIC_OPS)
    for topic in system_topics:
        out += _allow(principal, ResourceType.TOPIC, topic, _LITERAL, _OWN_TOPIC_OPS)
    for topic in read_topics:
        out += _allow(principal, ResourceType.TOPIC, topic, _LITERAL, _READ_OPS)
    out += _allow(
        principal,
        ResourceType.TRANSACTIONAL_ID,
        flow.transactional_id_prefix,
        _PREFIXED,
        (AclOperation.WRITE, AclOperation.DESCRIBE),
    )
    for group in groups:
        out += _allow(principal, ResourceType.GROUP, group, _PREFIXED, (AclOperation.READ,))
    return out


def writer_bindings(user: str, groups: Iterable[str]) -> list[AclBinding]:
    """The writer's ACLs: read and describe every topic, commit offsets of its groups."""
    principal = f"User:{user}"
    out = _allow(principal, ResourceType.TOPIC, "*", _LITERAL, _READ_OPS)
    for group in groups:
        out += _allow(principal, ResourceType.GROUP, group, _PREFIXED, _READ_OPS)
    return out


def _allow(
    principal: str,
    kind: ResourceType,
    name: str,
    pattern: ResourcePatternType,
    operations: Iterable[AclOperation],
) -> list[AclBinding]:
    return [
        AclBinding(kind, name, pattern, principal, "*", op, AclPermissionType.ALLOW)
        for op in operations
    ]


def create(conf: Mapping[str, Any], bindings: list[AclBinding]) -> None:
    """Create ``bindings`` (existing ones are left as they are)."""
    admin = AdminClient({**conf, "log_level": 3})
    for binding, future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).items():
        try:
            future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise DevstackError(f"cannot create the ACL {binding}: {exc.args[0].str()}") from exc


def upsert_scram_users(
    conf: Mapping[str, Any], users: Mapping[str, str], mechanism: str, iterations: int
) -> None:
    """Create or update the SCRAM credential of each user (name -> password)."""
    kind = ScramMechanism[mechanism.replace("-", "_")]
    info = ScramCredentialInfo(kind, iterations)
    changes: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(u, info, p.encode()) for u, p in users.items()
    ]
    admin = AdminClient({**conf, "log_level": 3})
    for user, future in admin.alter_user_scram_credentials(changes).items():
        try:
            future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:  # the error names the user, never the password
            raise DevstackError(f"cannot create the user {user!r}: {exc.args[0].str()}") from exc


def wait_until_login_works(conf: Mapping[str, Any], timeout_s: float = TIMEOUT_S) -> None:
    """Wait until ``conf``'s user can log in (a new credential reaches the broker shortly)."""
    deadline = time.monotonic() + timeout_s
    while True:
        admin = AdminClient({**conf, "log_level": 0})
        try:
            admin.list_topics(timeout=3)
            return
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise DevstackError(
                    f"user {conf.get('sasl.username')!r} cannot log in after "
                    f"{timeout_s:.0f}s: {exc.args[0].str()}"
                ) from exc
        time.sleep(0.3)
