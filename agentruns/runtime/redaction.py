"""CG-11, SEC-4: API-key-, token- and password-shaped strings never leave or enter the log.

The token shapes are detect-secrets' own plugin patterns, taken as data from the installed
package (so they improve with it), plus the shapes SEC-4 names that it lacks. Secrets that
have no shape of their own are found by their name: an assignment to a secret-like name in
text (`DB_PASSWORD=…`, `"api_key": "…"`, `password => …`), a password in a URL, an
`Authorization` header, or a JSON value under a secret-like key.

It runs on every send, so it is built for speed: each pattern carries literal hints and is
only tried on a text that contains one of them.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from detect_secrets.plugins import (
    aws,
    azure_storage_key,
    basic_auth,
    discord,
    github_token,
    gitlab_token,
    jwt,
    mailchimp,
    openai,
    pypi_token,
    sendgrid,
    slack,
    square_oauth,
    stripe,
    telegram_token,
    twilio,
)
from detect_secrets.plugins.keyword import DENYLIST

MARKER = "[REDACTED:{kind}]"
MARKED = "[REDACTED:"


@dataclass(frozen=True)
class Shape:
    kind: str
    pattern: re.Pattern[str]
    # Literals of which a text must contain one for the pattern to be tried (lower-case ones
    # are looked for in the lower-cased text), or a quicker pattern it must match.
    hints: tuple[str, ...] | re.Pattern[str]
    # 0: the whole match is the secret; 1: only the first group is (the rest is context).
    group: int = 0
    # A last check on the secret itself, for shapes ordinary words also have.
    accept: Callable[[str], bool] | None = None


def _basic_credentials(value: str) -> bool:
    """`Basic` is also an English word: only a base64 `user:password` is a credential."""
    try:
        return b":" in base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False


# detect-secrets plugins whose patterns match exactly the secret (or capture it in group
# 1). Left out: artifactory (its patterns swallow the surrounding delimiters), npm (an
# .npmrc line to its end), private_key (only the header line), ip_public (no secret), the
# IBM/Cloudant/Softlayer keyword patterns (covered by the assignment rule below), keyword
# (per-file-type heuristics; its DENYLIST of names is used below instead).
DETECT_SECRETS: list[tuple[Any, str, tuple[str, ...] | re.Pattern[str]]] = [
    (aws.AWSKeyDetector, "api_key", ("a3t", "abia", "acca", "akia", "asia", "aws")),
    (azure_storage_key.AzureStorageKeyDetector, "api_key", ("accountkey=",)),
    (basic_auth.BasicAuthDetector, "password", ("://",)),
    (discord.DiscordBotTokenDetector, "token", re.compile(r"\.[a-zA-Z\d_-]{6}\.")),
    (github_token.GitHubTokenDetector, "token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    (gitlab_token.GitLabTokenDetector, "token", ("gl", "gr1348941")),
    (jwt.JwtTokenDetector, "token", ("eyj",)),
    (mailchimp.MailchimpDetector, "api_key", ("-us",)),
    (openai.OpenAIDetector, "api_key", ("t3blbkfj",)),
    (pypi_token.PypiTokenDetector, "token", ("pypi-",)),
    (sendgrid.SendGridDetector, "api_key", ("sg.",)),
    (slack.SlackDetector, "token", ("xox", "hooks.slack.com")),
    (square_oauth.SquareOAuthDetector, "token", ("sq0csp-",)),
    (stripe.StripeDetector, "api_key", ("k_live_",)),
    (telegram_token.TelegramBotTokenDetector, "token", re.compile(r":[0-9A-Za-z_-]{35}")),
    (twilio.TwilioKeyDetector, "api_key", ("AC", "SK")),
]


def _detect_secrets_shapes() -> list[Shape]:
    shapes = []
    for plugin, kind, hints in DETECT_SECRETS:
        for pattern in plugin().denylist:
            shapes.append(Shape(kind, pattern, hints, group=min(pattern.groups, 1)))
    return shapes


# What SEC-4 names and detect-secrets (1.5) lacks or matches too narrowly:
# (kind, pattern, hints); the whole match is the secret.
EXTRA_PATTERNS: list[tuple[str, str, tuple[str, ...]]] = [
    # PEM and PGP private key blocks; a block cut before its END line (http.get stops at
    # 64 KB) is a secret to the end of the text.
    (
        "private_key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]+?"
        r"(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        ("-----begin",),
    ),
    # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-) and look-alikes.
    ("api_key", r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}", ("sk-",)),
    ("api_key", r"\b[rsp]k_(?:live|test)_[0-9a-zA-Z]{16,}", ("k_live_", "k_test_")),
    ("api_key", r"\bAIza[0-9A-Za-z_\-]{35}\b", ("aiza",)),
    ("token", r"\bgh[pousr]_[A-Za-z0-9]{30,}", ("gh",)),
    ("token", r"\bgithub_pat_[A-Za-z0-9_]{22,}", ("github_pat_",)),
    ("token", r"\bglpat-[A-Za-z0-9_\-]{20,}", ("glpat-",)),
    ("token", r"\bhf_[A-Za-z0-9]{30,}", ("hf_",)),
    ("token", r"\bnpm_[A-Za-z0-9]{36}\b", ("npm_",)),
    ("token", r"\bxox[abprse]-[A-Za-z0-9-]{10,}", ("xox",)),
    ("token", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", ("eyj",)),
    ("token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*", ("bearer",)),
]
EXTRA: list[Shape] = [
    *(Shape(kind, re.compile(pattern), hints) for kind, pattern, hints in EXTRA_PATTERNS),
    Shape(
        "password",
        re.compile(r"(?i)\bbasic\s+([A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])"),
        ("basic",),
        group=1,
        accept=_basic_credentials,
    ),
    # A password in a URL without a user name (`redis://:pw@host`), which detect-secrets'
    # basic_auth pattern requires.
    Shape("password", re.compile(r"://[^\s/?#@:]*:([^\s/?#@]+)@"), ("://",), group=1),
    Shape(
        "token",
        re.compile(
            r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|bearer|token|digest)\s+)?+"
            r"(?!\[REDACTED)([^\s\"',;]+)"
        ),
        ("authorization",),
        group=1,
    ),
]

SHAPES: list[Shape] = [*EXTRA, *_detect_secrets_shapes()]


def _any_hint(shapes: list[Shape]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """One look for every shape's hints at once, (in the lower-cased text, in the text):
    most texts a run stores (a number, "done", a short JSON reply) hold none, and then
    no shape needs a look of its own."""
    lower: set[str] = set()
    cased: set[str] = set()
    for shape in shapes:
        if isinstance(shape.hints, re.Pattern):
            cased.add(shape.hints.pattern)
        else:
            for hint in shape.hints:
                (lower if hint.islower() else cased).add(re.escape(hint))
    return re.compile("|".join(sorted(lower))), re.compile("|".join(sorted(cased)))


LOWER_HINTS, CASED_HINTS = _any_hint(SHAPES)

# Secret-like names: detect-secrets' keyword DENYLIST plus tokens, access keys and
# credentials. A name must END with one (`max_tokens` is no secret, `GITHUB_TOKEN` is).
NAMES = [name.replace("_?", "[_-]?") for name in DENYLIST] + [
    r"access[_-]?key",
    r"secret[_-]?key",
    r"[a-z0-9]+[_-]key",  # SIGNING_KEY=, ENCRYPTION_KEY=, master-key:
    r"token",
    r"credentials?",
    r"passphrase",
    # A bare `key` only where it is a name: quoted (`"key": …`) or assigned (`?key=…`),
    # never in prose ("the key: patience").
    r"(?<![a-z0-9])key(?=[\"']|\s*=)",
]
NAME = "(?:" + "|".join(NAMES) + ")"
KIND_OF_NAME = [
    (re.compile(r"(?i)authorization"), "token"),
    (re.compile(r"(?i)pass|pwd|contrase"), "password"),
    (re.compile(r"(?i)token"), "token"),
    (re.compile(r"(?i)key"), "api_key"),
]
# `password: x`, `DB_PASSWORD=x`, `"api_key": "x"`, `password => x`: keep the name so the
# text still reads, drop the value. Matched on the lower-cased text (much faster than a
# case-insensitive pattern), and only where a cheap look for the names' endings hits.
ASSIGNMENT = re.compile(
    rf"({NAME})([\"']?\s*(?:=>|:=|:|=)\s*)(?![\"']?\[redacted)"
    r"(\"(?:[^\"\\\n]|\\.)+\"|'[^'\n]+'|[^\s,;&\"'}\])]+)"
)
NAME_ENDINGS = re.compile(
    r"(?:pass(?:word|wd|phrase)?|pwd|secret|key|token|credentials?|contrase(?:ñ|n)a)"
    r"[\"']?\s*(?:=>|:=|:|=)"
)
# A JSON key naming a secret: the names above, a bare `key`, and an Authorization header.
SECRET_KEY = re.compile(rf"(?i)(?:{NAME}|^key|authorization)$")


def _name_kind(name: str) -> str:
    for pattern, kind in KIND_OF_NAME:
        if pattern.search(name):
            return kind
    return "secret"


def _present(hints: tuple[str, ...] | re.Pattern[str], text: str, lower: str) -> bool:
    if isinstance(hints, re.Pattern):
        return hints.search(text) is not None
    return any(hint in (lower if hint.islower() else text) for hint in hints)


def _apply(shape: Shape, text: str, found: Counter[str]) -> str:
    marker = MARKER.format(kind=shape.kind)

    def hide(match: re.Match[str]) -> str:
        secret = match.group(shape.group)
        if not secret or MARKED in secret or (shape.accept and not shape.accept(secret)):
            return match.group(0)
        found[shape.kind] += 1
        if shape.group == 0:
            return marker
        start, end = match.span(shape.group)
        whole = match.group(0)
        return whole[: start - match.start()] + marker + whole[end - match.start() :]

    return shape.pattern.sub(hide, text)


def redact(text: str) -> tuple[str, dict[str, int]]:
    """The text with every secret replaced by a marker, and how many of each kind."""
    found: Counter[str] = Counter()
    lower = text.lower()
    if LOWER_HINTS.search(lower) or CASED_HINTS.search(text):
        for shape in SHAPES:
            if _present(shape.hints, text, lower):
                text = _apply(shape, text, found)
                lower = text.lower()
    if NAME_ENDINGS.search(lower):
        text = _hide_assignments(text, lower, found)
    return text, {kind: n for kind, n in found.items() if n}


def _hide_assignments(text: str, lower: str, found: Counter[str]) -> str:
    if len(lower) != len(text):  # a few non-ASCII letters change length when lower-cased
        lower = "".join(char if len(char.lower()) != 1 else char.lower() for char in text)
    pieces, last = [], 0
    for match in ASSIGNMENT.finditer(lower):
        kind = _name_kind(match.group(1))
        found[kind] += 1
        start, end = match.span(3)
        quote = text[start] if text[start] in "\"'" else ""
        pieces += [text[last:start], quote, MARKER.format(kind=kind), quote]
        last = end
    return "".join([*pieces, text[last:]])


def redact_value(value: Any) -> tuple[Any, dict[str, int]]:
    """Redact every string inside a JSON value, and everything under a secret-like key:
    each string and number at any depth below it becomes the marker (a number under
    `password` is a secret too); lists and objects keep their shape."""
    found: Counter[str] = Counter()

    def walk(node: Any, key: str = "", secret: str = "", field: bool = False) -> Any:
        # Under a JSON Schema's `properties`, an object is the schema of a field *named*
        # `password`, not a password (ask_user may ask for one with a pattern).
        if not secret and key and SECRET_KEY.search(key) and not (field and isinstance(node, dict)):
            secret = _name_kind(key)
        if secret and _is_leaf(node) and MARKED not in str(node):
            found[secret] += 1
            return MARKER.format(kind=secret)
        if isinstance(node, str):
            clean, kinds = redact(node)
            found.update(kinds)
            return clean
        if isinstance(node, list):
            return [walk(item, key, secret) for item in node]
        if isinstance(node, dict):
            fields = key == "properties"
            return {name: walk(item, str(name), secret, fields) for name, item in node.items()}
        return node

    return walk(value), dict(found)


def _is_leaf(node: Any) -> bool:
    """A value that can hold a secret; an empty string or a flag cannot."""
    if isinstance(node, str):
        return bool(node)
    return isinstance(node, int | float) and not isinstance(node, bool)
