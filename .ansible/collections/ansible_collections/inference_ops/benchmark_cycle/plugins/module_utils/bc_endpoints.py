# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an endpoint the cycle talks to must look like, and what in it may be a secret: the server's base URL, a router
hook (a command on the host or an HTTP call), a webhook. Pure checks for the contract (bc_contract.problems), each
naming the field and the fix and never quoting a secret."""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_export import NOTIFY_DEFAULT, NOTIFY_EVENTS

# a flag or word that carries a secret: it belongs in bc_api_key (a 0600 file), never on a command line
# as a word of its own ("--token", "auth_token", "api-key"), not inside another ("--max-prefill-tokens", "tokenizer")
SECRET_WORD = re.compile(r"(?i)(?:^|[^a-z])(api[-_]?key|token|secret|passw(?:or)?d?|passwd|auth|authorization|bearer|credentials?)"
                         r"(?:$|[^a-z])")
# the two shapes of a router hook (roles/service_drain/tasks/lb.yml): a command on the host, or an HTTP call
# (`check`: a command on the host that exits 0 once the router says the hook took effect: its read-back)
HOOK_KEYS = {"argv": {"argv", "timeout", "check"}, "url": {"url", "method", "body", "headers", "status_code", "timeout", "check"}}
# what an HTTP header may carry, and what a key or token is made of: printable ASCII, no space
HEADER_SAFE = re.compile(r"^[\x21-\x7e]+\Z")
HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?\Z")


def url_problem(field: str, url: Any, show: bool = True) -> str:
    """'' for a base URL whose host is the one an operator reads in it: http(s), a host (a name, an IPv4
    or a bracketed IPv6 address) and an optional port, a path; no user-info ('http://host:port@other'
    sends every request, and its key, to `other`), no query, fragment, backslash, whitespace or
    non-ASCII character (a look-alike host). Never raises. `show`: False where the URL may carry a secret (a
    webhook's: in its user-info or query), which then never appears in the message."""
    text = url if isinstance(url, str) else ""
    fix = "give http(s)://HOST[:PORT][/PATH], e.g. http://127.0.0.1:30001"
    if not text:
        return "%s must be a URL: %s" % (field, fix)
    shown = text[:80].encode("ascii", "backslashreplace").decode() if show else "(not shown)"
    if not HEADER_SAFE.match(text) or "\\" in text:
        return "%s=%s holds whitespace, a backslash, a control or a non-ASCII character: %s" % (field, shown, fix)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as err:
        return "%s=%s cannot be read as a URL (%s): %s" % (field, shown, err, fix)
    if parts.scheme not in ("http", "https"):
        return "%s=%s: the scheme must be http or https; %s" % (field, shown, fix)
    if "@" in parts.netloc:
        return "%s=%s has user-info (what stands before @ is not the host: requests, and their key or token, would go to %s); %s" % (
            field, shown, parts.hostname, fix)
    if parts.query or parts.fragment or "?" in text or "#" in text:
        return "%s=%s has a query or fragment: give the server's base URL only; %s" % (field, shown, fix)
    host = parts.hostname or ""
    try:
        bracketed = parts.netloc.startswith("[") and ipaddress.ip_address(host).version == 6
    except ValueError:
        bracketed = False
    if not (bracketed or HOSTNAME.match(host)) or port == 0 or (port is None and parts.netloc.endswith(":")):
        return "%s=%s: %r is not a host name or address (with a port from 1 to 65535); %s" % (field, shown, host, fix)
    return ""


def hook_problem(field: str, hook: Any) -> str:
    """'' for a router hook the drain runs: {argv: [...], timeout} or {url, method, body, headers,
    status_code, timeout}. A misspelt key, an empty argv or URL, both shapes at once: refused, since
    a hook that does not run leaves the host in the router while its service is stopped."""
    if not isinstance(hook, dict):
        return "%s must be a mapping: {argv: [/usr/local/bin/lb, remove, HOST]} or {url: https://lb/..., method: POST}" % field
    shapes = [k for k in HOOK_KEYS if k in hook]
    if len(shapes) != 1:
        unknown = sorted(set(hook) - set().union(*HOOK_KEYS.values()))
        return ("%s needs exactly one of argv (a command on the host) or url (an HTTP call)%s"
                % (field, "; unknown key(s) %s" % ", ".join(map(str, unknown)) if unknown else ""))
    shape = shapes[0]
    unknown = sorted(map(str, set(hook) - HOOK_KEYS[shape]))
    if unknown:
        return "%s: unknown key(s) %s for an %s hook; its keys are %s" % (field, ", ".join(unknown), shape,
                                                                          ", ".join(sorted(HOOK_KEYS[shape])))
    if shape == "argv":
        argv = hook["argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, (str, int)) and str(a) for a in argv):
            return "%s.argv must be a non-empty list of words, e.g. [/usr/local/bin/lb, remove, ct200]" % field
        if not str(argv[0]).startswith("/"):
            return "%s.argv[0] is not an absolute path: give the program's absolute path (one word; its arguments follow)" % field
    elif not isinstance(hook["url"], str) or not re.match(r"^https?://[^\s/]+", hook["url"]):
        return "%s.url must be an http(s):// URL" % field
    if "check" in hook:
        check = hook["check"]
        if not isinstance(check, list) or not check or not all(isinstance(a, (str, int)) and str(a) for a in check) \
                or not str(check[0]).startswith("/"):
            return "%s.check must be a command (a non-empty list, its program an absolute path) that exits 0 once the router " \
                   "agrees, e.g. [/usr/local/bin/lb, is-out, ct200]" % field
    if "timeout" in hook:
        timeout = hook["timeout"]
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 3600:
            return "%s.timeout must be a whole number of seconds from 1 to 3600" % field
    return ""


def _leaves(value: Any) -> list[str]:
    """Every scalar inside a hook's body (a token may be anywhere in it)."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [str(value)] if isinstance(value, str) else []


def hook_secrets(*hooks: Any) -> list[str]:
    """What in the router hooks may be a secret, to redact from every message: each header's value,
    each argv word that names a token, key, secret or password, a URL's query values and password."""
    out: list[str] = []
    for hook in hooks:
        if not isinstance(hook, dict):
            continue
        headers = hook.get("headers")
        for value in (headers.values() if isinstance(headers, dict) else []):
            out.append(str(value))
            out.extend(str(value).split()[1:])  # "Bearer TOKEN": the token alone too
        for argv in (hook.get("argv"), hook.get("check")):
            words = [str(a) for a in argv] if isinstance(argv, list) else []
            for i, word in enumerate(words[1:], start=1):
                if SECRET_WORD.search(word):
                    out.append(word)
                    if word.startswith("-") and "=" not in word and i + 1 < len(words):
                        out.append(words[i + 1])  # `--token VALUE`: the value too
                    out.extend(word.split("=", 1)[1:])
        out.extend(_leaves(hook.get("body")))
        url = str(hook.get("url") or "")
        out.extend(re.findall(r"[?&][^=&#]+=([^&#]+)", url))
        out.extend(re.findall(r"^[a-z]+://[^/@:]+:([^/@]+)@", url))
    return [s for s in dict.fromkeys(out) if len(s) >= 4]


def notify_problems(hook: Any) -> list[str]:
    """bc_notify_webhook: {url, token (optional: sent as Authorization: Bearer), on (a list of NOTIFY_EVENTS, default
    failed and router_out)}; {} is no webhook. The token's value is never quoted."""
    if not isinstance(hook, dict) or not hook:
        return []
    out = []
    unknown = sorted(map(str, set(hook) - {"url", "token", "on"}))
    if unknown:
        out.append("bc_notify_webhook: unknown key(s) %s; its keys are url, token, on" % ", ".join(unknown))
    problem = url_problem("bc_notify_webhook.url", hook.get("url"), show=False)
    if problem:
        out.append(problem)
    if "token" in hook and not (isinstance(hook["token"], str) and re.fullmatch(r"[!-~]+", hook["token"])):
        out.append("bc_notify_webhook.token is empty, or holds whitespace or a character outside printable ASCII (the value is "
                   "not shown): give it from a secret, the bc_secret lookup of BC_NOTIFY_TOKEN (as inventory/example reads BC_API_KEY), "
                   "with BC_NOTIFY_TOKEN_FILE (a 0600 file) or BC_NOTIFY_TOKEN set, or leave token out for a webhook that "
                   "takes none")
    on = hook.get("on", list(NOTIFY_DEFAULT))
    if not isinstance(on, list) or not on or not all(isinstance(e, str) and e in NOTIFY_EVENTS for e in on):
        out.append("bc_notify_webhook.on must be a non-empty list of %s, e.g. [failed, router_out] (the default); "
                   "for no webhook, give bc_notify_webhook: {}" % ", ".join(NOTIFY_EVENTS))
    return out
