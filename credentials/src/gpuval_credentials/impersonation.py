"""Pure: a kubeconfig user's impersonation (`as`, `as-uid`, `as-groups`, `as-user-extra`) as the
Impersonate-* headers kubectl sends. The kubernetes package reads none of these fields."""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from gpuval_credentials.errors import CredentialsError

FIELDS = ("as", "as-uid", "as-groups", "as-user-extra")
USER = "Impersonate-User"
UID = "Impersonate-Uid"
GROUP = "Impersonate-Group"
EXTRA = "Impersonate-Extra-"
# An HTTP token's characters (RFC 7230) but '%', which client-go escapes too so that the API
# server's unescaping cannot misread it.
_LEGAL = frozenset(string.ascii_letters + string.digits + "!#$&'*+-.^_`|~")


def escape_extra_key(key: str) -> str:
    """An extra's key in a header name: every byte outside an HTTP token %-encoded, as client-go
    does (the API server unescapes it)."""
    return "".join(chr(b) if chr(b) in _LEGAL else f"%{b:02X}" for b in key.encode("utf-8"))


def _strings(value: object, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CredentialsError(f"{field} is {value!r}: a list of strings is expected")
    return list(value)


def impersonation_headers(user: Mapping[str, Any], field: str) -> tuple[tuple[str, str], ...]:
    """The headers for `user` (a kubeconfig's `users[].user`), named in errors as `field`."""
    asked = [key for key in FIELDS if user.get(key)]
    if not asked:
        return ()
    name = user.get("as")
    if not name:
        raise CredentialsError(
            f"{field} sets {', '.join(asked)} without as: the API server impersonates groups, "
            "a uid or extras only of a user; add as (the user to act as) beside them"
        )
    headers: list[tuple[str, str]] = []
    for key, header in (("as", USER), ("as-uid", UID)):
        value = user.get(key)
        if value and not isinstance(value, str):
            raise CredentialsError(f"{field}.{key} is {value!r}: a string is expected")
        if value:
            headers.append((header, value))
    groups = user.get("as-groups")
    if groups:
        headers += [(GROUP, group) for group in _strings(groups, f"{field}.as-groups")]
    extra = user.get("as-user-extra") or {}
    if not isinstance(extra, Mapping):
        raise CredentialsError(
            f"{field}.as-user-extra is {extra!r}: a map of names to lists of strings is expected"
        )
    for key, values in extra.items():
        for value in _strings(values, f"{field}.as-user-extra.{key}"):
            headers.append((EXTRA + escape_extra_key(str(key)), value))
    return tuple(headers)
