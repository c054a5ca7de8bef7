"""Settings come from the environment; every default is safe for a local demo.

`DATABASE_URL` selects PostgreSQL (or any backend dj-database-url knows); without it the
embedded SQLite file under `var/` is used.
"""

import json
import os
import tempfile
from pathlib import Path

import dj_database_url
from django.core.management.utils import get_random_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AGENTRUNS_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_json(name: str, default: object) -> object:
    raw = os.environ.get(name, "").strip()
    return json.loads(raw) if raw else default


def persisted_secret_key() -> str:
    """The web server and the cluster must share a key (task payloads are signed with it),
    so without SECRET_KEY in the environment one is generated once under var/."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(get_random_secret_key())
        path.chmod(0o600)
    return path.read_text().strip()


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY") or persisted_secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
# UI-5: a forged post is refused on a page that says why, in the site's own style.
CSRF_FAILURE_VIEW = "playground.csrf.csrf_failure"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Widget templates come from the project's template settings (the admin's mode editor).
    "django.forms",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # Before django_q: its `qcluster` command is agentruns's (OPS-8, a group SIGTERM).
    "agentruns",
    "django_q",
    "reversion",
    "playground",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # UI-4: static files are served by the app itself, with or without DEBUG.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # SEC-3: a path or query PostgreSQL cannot store is a 400 before any view looks it up.
    "agentruns.api.limits.StorableRequestMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # request.htmx: pages answer htmx's polls with a fragment (playground).
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
FORM_RENDERER = "django.forms.renderers.TemplatesSetting"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "playground.context.navigation",
            ],
        },
    },
]


def database_settings() -> dict:
    url = os.environ.get("DATABASE_URL", "").strip()
    if not url:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "agentruns.sqlite3",
            "OPTIONS": {
                # Web, cluster and executor threads share one file: wait for the writer
                # instead of failing, and take the write lock up front to avoid upgrades
                # that deadlock.
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    db: dict = dict(dj_database_url.parse(url, conn_max_age=0))
    if db["ENGINE"] == "django.db.backends.postgresql":
        db.setdefault("OPTIONS", {})
        # Every query here reads a page or a run's rows by index: JIT compiling one whose
        # estimate crosses jit_above_cost (a count over a million-run configuration) took
        # 320 ms for a query that ran in 10 (PERF-8).
        options = ["-c jit=off"]
        # Django disables prepared statements for the sake of transaction-mode poolers
        # (pgbouncer). The loop prepares its step statement explicitly (runtime/journal.py);
        # nothing is prepared implicitly. Behind such a pooler set AGENTRUNS_PREPARE=0.
        if env_bool("AGENTRUNS_PREPARE", True):
            db["OPTIONS"]["prepare_threshold"] = 2**31 - 1
            # The loop's statements find rows by key, so a plan for their parameters
            # buys nothing, and PostgreSQL plans a prepared statement for its parameters
            # five times before it settles on the generic plan: ~2 ms each for a step
            # statement, 0.8 s of a 1000-run batch on fresh pool connections (PERF-6).
            # Only named statements are affected, and only the loop names any.
            options.append("-c plan_cache_mode=force_generic_plan")
        given = db["OPTIONS"].get("options")
        db["OPTIONS"]["options"] = " ".join([given, *options] if given else options)
        # Web processes keep one connection per thread; the cluster's executor switches
        # its own process to a pool (agentruns.cluster.driver).
        db["CONN_MAX_AGE"] = None
        db["CONN_HEALTH_CHECKS"] = True
        db["TEST"] = {"NAME": os.environ.get("TEST_DATABASE_NAME") or None}
    return db


DATABASES = {"default": database_settings()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# UI-7: dates read "2026-12-02 18:48:29 UTC" in the admin and on the pages alike.
FORMAT_MODULE_PATH = ["config.formats"]

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("AGENTRUNS_STATIC_ROOT", BASE_DIR / "staticfiles"))
# WhiteNoise serves what `collectstatic` gathered (compressed) without DEBUG; with DEBUG it
# finds files in the apps directly. Names stay unhashed so pages render before
# collectstatic has run (tests).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# UI-7: /favicon.ico (asked for by browsers and tools that read no <link rel="icon">).
WHITENOISE_ROOT = BASE_DIR / "playground" / "root"
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# SEC-3: request limits. Bodies past these are refused (413 / 400) before a view runs.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("AGENTRUNS_MAX_BODY_BYTES", 1_048_576)
DATA_UPLOAD_MAX_NUMBER_FIELDS = env_int("AGENTRUNS_MAX_FORM_FIELDS", 200)
DATA_UPLOAD_MAX_NUMBER_FILES = 0

# Production switches (`manage.py check --deploy` is clean with AGENTRUNS_HTTPS=1, a
# SECRET_KEY and ALLOWED_HOSTS from the environment). Off by default so `make run` serves
# plain HTTP on localhost.
AGENTRUNS_HTTPS = env_bool("AGENTRUNS_HTTPS", False)
SECURE_SSL_REDIRECT = AGENTRUNS_HTTPS
SESSION_COOKIE_SECURE = AGENTRUNS_HTTPS
CSRF_COOKIE_SECURE = AGENTRUNS_HTTPS
SECURE_HSTS_SECONDS = env_int("AGENTRUNS_HSTS_SECONDS", 31_536_000) if AGENTRUNS_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("AGENTRUNS_HSTS_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("AGENTRUNS_HSTS_PRELOAD", True)
if env_bool("AGENTRUNS_BEHIND_TLS_PROXY", False):
    # Only behind a proxy that sets this header itself (and strips it from clients).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

# SEC-14: throttle counters live where every web process sees them (gunicorn runs several
# workers): Redis when REDIS_URL is set, else a table in the database (created by the
# migration agentruns 0013), never process memory.
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            # Keeps this deployment's keys apart on a Redis other applications share.
            "KEY_PREFIX": os.environ.get("AGENTRUNS_CACHE_PREFIX", "agentruns"),
        }
        if REDIS_URL
        else {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "agentruns_cache",
            # Culling past MAX_ENTRIES would drop live counters; expired rows go first.
            "OPTIONS": {"MAX_ENTRIES": env_int("AGENTRUNS_CACHE_MAX_ENTRIES", 100_000)},
        }
    )
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "agentruns.api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "agentruns.api.limits.Pagination",
    "PAGE_SIZE": 100,
    # JSON only: what the schema documents is what is parsed (a form body is a 415).
    "DEFAULT_PARSER_CLASSES": ["agentruns.api.limits.BoundedJSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # SEC-3, SEC-14: per user on run submission and resume (API, pages and admin alike:
    # agentruns/throttles.py); generous defaults.
    "DEFAULT_THROTTLE_CLASSES": ["agentruns.api.limits.ActionThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "submit": os.environ.get("AGENTRUNS_THROTTLE_SUBMIT", "600/minute"),
        "resume": os.environ.get("AGENTRUNS_THROTTLE_RESUME", "600/minute"),
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "agentruns API",
    "DESCRIPTION": "Run LLM agents safely: gated context, durable tool loops, approvals.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "/" + STATIC_URL + "playground/favicon.svg",
    "REDOC_DIST": "SIDECAR",
    # UI-4, UI-7: no web fonts (the page links none; agentruns.api.docs forbids the rest).
    "REDOC_UI_SETTINGS": {
        "theme": {
            "typography": {
                "fontFamily": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
                "headings": {"fontFamily": "system-ui, -apple-system, 'Segoe UI', sans-serif"},
                "code": {"fontFamily": "ui-monospace, Menlo, Consolas, monospace"},
            }
        }
    },
    # Separate request components carry what a request must satisfy (minLength, writable
    # fields only), so the schema allows exactly what the API accepts (SEC-3).
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "DataClassEnum": "agentruns.classes.DATA_CLASS_CHOICES",
        "RunStatusEnum": "agentruns.api.shapes.RUN_STATUSES",
        "TicketStatusEnum": "agentruns.api.shapes.TICKET_STATUSES",
        "ReplayStatusEnum": "agentruns.api.replays.REPLAY_STATUSES",
        "VerdictEnum": "agentruns.api.replays.VERDICTS",
    },
}

# --- agentruns -------------------------------------------------------------------------

# CG-5: read raw; the gate parses it fail-closed on every decision.
AGENTRUNS_DATA_CLASS_ENFORCEMENT = os.environ.get("AGENTRUNS_DATA_CLASS_ENFORCEMENT")
AGENTRUNS_HTTP_ALLOWED_HOSTS = env_list("AGENTRUNS_HTTP_ALLOWED_HOSTS")
# SEC-11: the only environment variables a provider's `api_key_env` may name.
AGENTRUNS_PROVIDER_KEY_VARS = env_list(
    "AGENTRUNS_PROVIDER_KEY_VARS", "OPENAI_API_KEY,ANTHROPIC_API_KEY"
)
AGENTRUNS_LEASE_SECONDS = env_float("AGENTRUNS_LEASE_SECONDS", 30.0)
AGENTRUNS_MAX_ATTEMPTS = env_int("AGENTRUNS_MAX_ATTEMPTS", 3)
# DEL-3: how deep a tree of delegated runs may grow (the root is depth 0).
AGENTRUNS_MAX_DELEGATION_DEPTH = env_int("AGENTRUNS_MAX_DELEGATION_DEPTH", 3)
AGENTRUNS_MAX_TURNS = env_int("AGENTRUNS_MAX_TURNS", 50)
# SEC-3: a model reply (text plus tool-call arguments) larger than this fails the run
# `provider_reply_too_large` before any of it is stored; no real turn comes near 1 MB.
AGENTRUNS_MAX_REPLY_BYTES = env_int("AGENTRUNS_MAX_REPLY_BYTES", 1_000_000)
# See agentruns/runtime/journal.py: re-doable steps skip waiting for the WAL flush.
AGENTRUNS_FAST_COMMIT = env_bool("AGENTRUNS_FAST_COMMIT", True)
# The execution cluster (agentruns.cluster; sizing in the README's "Execution cluster").
# Each q2 worker process drives up to EXECUTOR_THREADS runs at once on threads sharing a
# fixed psycopg pool of DB_POOL_MAX connections, plus one that listens for wake-ups: one
# machine holds Q_WORKERS * (DB_POOL_MAX + 1) + 3 connections (the sentinel, which also runs
# the scheduler, the pusher, the monitor). The pool is also each process's admission
# control; why 6, measured, is in store/connection.py (take_connection).
AGENTRUNS_DB_POOL_MAX = env_int("AGENTRUNS_DB_POOL_MAX", 6)
AGENTRUNS_DB_POOL_TIMEOUT = env_float("AGENTRUNS_DB_POOL_TIMEOUT", 30.0)
# PERF-6 wants 2000 runs in flight on one 2-core machine: 2 x 512 held 1024 at most, so a
# batch of 2000 ran as two waves of provider waits (50 % of ideal at best). Threads start
# only as runs need them, so up to 1024 in flight nothing changes (same threads, memory and
# connections); past it the runs wait on their provider together instead of in turn.
AGENTRUNS_EXECUTOR_THREADS = env_int(
    "AGENTRUNS_EXECUTOR_THREADS",
    1024 if DATABASES["default"]["ENGINE"].endswith("postgresql") else 4,
)
# How often a worker's heartbeat also sweeps (0: every heartbeat, i.e. lease/3).
AGENTRUNS_SWEEP_SECONDS = env_float("AGENTRUNS_SWEEP_SECONDS", 0.0)
# PERF-5 (PostgreSQL): each worker process LISTENs for committed wake-ups on a connection of
# its own and claims them at once, rather than when q2's pusher next polls its queue. Off by
# default behind a transaction-mode pooler (AGENTRUNS_PREPARE=0): a LISTEN there lands on
# whichever server connection the pooler lent and stays on it, and the notifications go to
# whichever client borrows it next; q2's polling (Q_POLL) and the heartbeat claims remain.
AGENTRUNS_WAKE_LISTEN = env_bool("AGENTRUNS_WAKE_LISTEN", env_bool("AGENTRUNS_PREPARE", True))
# On a graceful stop, how long a worker waits for its runs to reach a step boundary and
# hand themselves back; a run still busy after that is reclaimed once its lease expires.
AGENTRUNS_SHUTDOWN_SECONDS = env_float("AGENTRUNS_SHUTDOWN_SECONDS", 20.0)
# q2's task timeout. A wake-up blocks at most half of it waiting for a free thread.
AGENTRUNS_Q_TIMEOUT = env_int("AGENTRUNS_Q_TIMEOUT", 60)
# UI-7: what the playground and "Start a run" preselect when it works offline (else the
# first configuration that does): the demo's scripted run that completes by itself.
AGENTRUNS_DEFAULT_CONFIGURATION = os.environ.get(
    "AGENTRUNS_DEFAULT_CONFIGURATION", "multi-tool-demo"
)
# Operating and integrating (README "Operating and integrating").
# OPS-3: a bearer token for `GET /metrics` (Prometheus); without it only staff sessions.
# GOV-3: "on" holds a catalog change that widens what may leave, or weakens who decides,
# until another holder of agentruns.approve_change approves it. Off by default: one
# operator alone would otherwise wait for a second forever.
AGENTRUNS_CHANGE_APPROVAL = os.environ.get("AGENTRUNS_CHANGE_APPROVAL", "off").lower() == "on"
AGENTRUNS_METRICS_TOKEN = os.environ.get("AGENTRUNS_METRICS_TOKEN", "")
# OPS-4: webhook sends: the total deadline of one attempt (connect, send and read together,
# SEC-8), attempts before giving up, backoff base/cap.
AGENTRUNS_WEBHOOK_TIMEOUT = env_float("AGENTRUNS_WEBHOOK_TIMEOUT", 5.0)
# SEC-9: hosts a webhook may reach although they resolve to a loopback, private or
# link-local address (an internal receiver); every other target must be public.
AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = env_list("AGENTRUNS_WEBHOOK_ALLOWED_HOSTS")
# MCP tool servers (MCP-1, README "MCP tool servers"). SEC-9 holds for their URLs as for a
# webhook's; these hosts may be loopback or private (an internal MCP server).
AGENTRUNS_MCP_ALLOWED_HOSTS = env_list("AGENTRUNS_MCP_ALLOWED_HOSTS")
# stdio servers run only these commands, chosen by name in the admin, never typed there:
# '{"files": ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]}'.
# An entry may also be an object, {"command": [...], "cwd": "/srv/repo", "env": {"TZ": "UTC"}}
# (INT-4): the directory it starts in and the only variables it gets besides the SDK's safe
# few. Without a cwd it starts in AGENTRUNS_MCP_STDIO_ROOT/<name>, created empty: never in
# the product's checkout, whose files a server would otherwise read as its own.
AGENTRUNS_MCP_STDIO_COMMANDS = env_json("AGENTRUNS_MCP_STDIO_COMMANDS", {})
AGENTRUNS_MCP_STDIO_ROOT = os.environ.get(
    "AGENTRUNS_MCP_STDIO_ROOT", str(Path(tempfile.gettempdir()) / "agentruns-mcp")
)
# SEC-11 for MCP: the only variables a server's bearer token may come from. A list of its
# own, so no key meant for an LLM vendor can be sent to an MCP server, nor the reverse.
AGENTRUNS_MCP_KEY_VARS = env_list("AGENTRUNS_MCP_KEY_VARS")
# MCP-5: the demo's own MCP server (a ticket tracker), which `manage.py serve` starts on
# this URL when the demo data registered it; this one URL may be loopback. Empty: no demo
# server (set it so in production).
AGENTRUNS_DEMO_MCP_URL = os.environ.get("AGENTRUNS_DEMO_MCP_URL", "http://127.0.0.1:8765/mcp")
AGENTRUNS_WEBHOOK_MAX_ATTEMPTS = env_int("AGENTRUNS_WEBHOOK_MAX_ATTEMPTS", 8)
# SCHED-2: a schedule's due time the sweeper first sees later than this was missed
# (downtime) and follows the schedule's catch_up; the sweeper runs at least once a minute.
AGENTRUNS_SCHEDULE_GRACE_SECONDS = env_int("AGENTRUNS_SCHEDULE_GRACE_SECONDS", 300)
# SCHED-4: how far a trigger's X-Agentruns-Timestamp may be from the server's clock.
AGENTRUNS_TRIGGER_WINDOW_SECONDS = env_int("AGENTRUNS_TRIGGER_WINDOW_SECONDS", 300)
AGENTRUNS_WEBHOOK_BACKOFF_SECONDS = env_float("AGENTRUNS_WEBHOOK_BACKOFF_SECONDS", 10.0)
AGENTRUNS_WEBHOOK_BACKOFF_MAX_SECONDS = env_float("AGENTRUNS_WEBHOOK_BACKOFF_MAX_SECONDS", 3600.0)
# OPS-6: links in mails point here; a reminder goes this long before a ticket's deadline.
AGENTRUNS_SITE_URL = os.environ.get("AGENTRUNS_SITE_URL", "http://127.0.0.1:8000").rstrip("/")
AGENTRUNS_REMINDER_SECONDS = env_float("AGENTRUNS_REMINDER_SECONDS", 3600.0)
# OPS-1: the currency of the configurations' prices, named beside every cost shown.
AGENTRUNS_CURRENCY = os.environ.get("AGENTRUNS_CURRENCY", "USD").strip() or "USD"
# Mail: the console in the demo; SMTP once EMAIL_HOST is set.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_BACKEND = os.environ.get(
    "EMAIL_BACKEND",
    # SEC-8: Django's SMTP backend with EMAIL_TIMEOUT as one deadline per send.
    "agentruns.outbound.DeadlineEmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_PORT = env_int("EMAIL_PORT", 587)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "agentruns@localhost")
# Only the test suite sets these: fault injection points, and modules that register
# tools outside the product (comma-separated import paths, imported at app ready).
AGENTRUNS_FAULTS = os.environ.get("AGENTRUNS_FAULTS", "")
AGENTRUNS_FAULT_TRACE = os.environ.get("AGENTRUNS_FAULT_TRACE", "")
AGENTRUNS_EXTRA_TOOL_MODULES = env_list("AGENTRUNS_EXTRA_TOOL_MODULES")

_Q_WORKERS = env_int("AGENTRUNS_Q_WORKERS", 2)
Q_CLUSTER = {
    "name": "agentruns",
    # CLU-4: the ORM broker on the default database, so a wake-up commits in the same
    # transaction as the run row. The subclass also starts each worker's executor driver
    # as soon as q2 spawns the worker (agentruns.cluster.broker).
    "orm": "default",
    "broker_class": "agentruns.cluster.broker.WakeBroker",
    # Processes per machine: about one per core; each drives up to EXECUTOR_THREADS runs.
    "workers": _Q_WORKERS,
    # A wake-up only claims a run and hands it to a thread, so it takes milliseconds; under
    # backpressure it waits at most timeout/2 and then re-enqueues itself. q2 kills a
    # worker that overruns the timeout (and with it the runs on its threads).
    "timeout": AGENTRUNS_Q_TIMEOUT,
    # `retry` must exceed `timeout` or a task is handed out twice while still running.
    "retry": AGENTRUNS_Q_TIMEOUT + max(5, AGENTRUNS_Q_TIMEOUT // 2),
    # Delivery attempts are q2's business only: the run row (its lease, its own attempt
    # budget, AGENTRUNS_MAX_ATTEMPTS) decides; the sweeper re-enqueues what was lost.
    "max_attempts": 1,
    "ack_failures": True,
    # Tasks a cluster takes ahead of its workers; few, since a dead cluster's prefetched
    # wake-ups wait for the sweeper (after `timeout`) or q2's redelivery (after `retry`).
    "queue_limit": env_int("AGENTRUNS_Q_QUEUE_LIMIT", 2 * _Q_WORKERS),
    # Wake-ups taken per dequeue (one statement: agentruns.cluster.broker).
    "bulk": env_int("AGENTRUNS_Q_BULK", _Q_WORKERS),
    "recycle": 1_000_000_000,  # recycling a worker would cut its in-flight runs short.
    "poll": env_float("AGENTRUNS_Q_POLL", 0.05),
    "save_limit": -1,  # successful wake-ups are not stored; failures are
    "catch_up": False,
    "label": "Task queue",
}

# What an operator reads (UI-7, README "Logs"): startup, errors, decisions. One line per
# ordinary 4xx (no traceback), none per poll that went well (playground.polls).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "quiet_polls": {"()": "playground.polls.QuietPolls"},
        "one_line_4xx": {"()": "playground.polls.OneLine4xx"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "django.server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["one_line_4xx"],
        },
        # runserver's request log, as Django configures it, less the polls.
        "django.server": {"class": "logging.StreamHandler", "formatter": "django.server"},
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
    "loggers": {
        # Django's own lines go to the root's handler once (its default config adds a
        # second, DEBUG-only one).
        "django": {"level": "INFO"},
        "django.server": {
            "handlers": ["django.server"],
            "filters": ["quiet_polls"],
            "level": "INFO",
            "propagate": False,
        },
        "agentruns": {"level": os.environ.get("AGENTRUNS_LOG_LEVEL", "INFO")},
        # django-q2 logs as "django-q".
        "django-q": {"level": os.environ.get("Q_LOG_LEVEL", "WARNING")},
    },
}
