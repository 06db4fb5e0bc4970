"""Who may do what on the admin HTTP port, and the audit trail of what they did (issue 25).

Roles (ours; upstream's HTTP server has no authentication):

* ``admin``: the bearer token of ``httpAdminTokenFile``, or a client certificate (HTTPS with
  ``httpServerClientCaPath``) whose subject or CN is listed in ``httpAdminCertificateSubjects`` (every
  client certificate the CA signs when that key is empty, as in issue 15);
* ``read``: the bearer token of ``httpReadTokenFile``, or a client certificate not listed;
* ``anonymous``: no credential.

What each request needs (:func:`required_role`): every mutating method (PUT/POST/DELETE/PATCH) and
every secret-revealing read (``?withPassword=true``) needs ``admin``; every other request needs
``read``. An anonymous caller passes a ``read`` check unless ``httpReadTokenFile`` is set, and an
``admin`` check for a mutation only when no credential at all is configured (the loopback default;
the configuration refuses mutations on another bind without one). A secret is never revealed to an
anonymous caller. A missing or wrong credential answers 401 (``WWW-Authenticate: Bearer``), a
credential of too low a role 403. Tokens are compared in constant time and never logged.

Every mutation, every secret-revealing read and every refused request writes one ``audit`` log line
(who: role and certificate subject, never a token; what: method, path, query and the top-level
scalar fields of the JSON body; from where: the peer address; result: the status) and counts in
``autorecovery_admin_requests_total{action,result}``.

:class:`Credentials` is the live credential set; :class:`CredentialReloader` re-reads the token files
and the HTTPS certificate, key and client CA when they change (``tlsCertFilesRefreshDurationSeconds``).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from autorecovery import metrics
from autorecovery.config.files import FileStamp, read_first_line
from autorecovery.errors import ConfigError
from autorecovery.rpc.tls_reload import CERT, KEY, TRUST, PemFile, PemFiles

log = structlog.get_logger("autorecovery.http")
audit_log = structlog.get_logger("autorecovery.audit")

ADMIN, READ, ANONYMOUS = "admin", "read", "anonymous"

#: Methods that change something: they need the admin role.
MUTATING_METHODS = frozenset({"PUT", "POST", "DELETE", "PATCH"})

#: Query switches that reveal a secret when true: they need an authenticated admin.
SECRET_SWITCHES = ("withPassword",)


@dataclass(frozen=True)
class Caller:
    """Who sent a request: ``role`` (admin, read, anonymous), ``who`` for the audit line
    (``token:admin``, ``cert:CN=...``, ``anonymous``; never the token) and whether a credential proved it."""

    role: str
    who: str
    authenticated: bool


def _text(body: str, status: int) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain")


class Credentials:
    """The live credentials of the admin port; the reloader swaps tokens and the TLS context in place.

    Args:
        admin_token: ``httpAdminTokenFile``'s first line, or None.
        read_token: ``httpReadTokenFile``'s first line, or None.
        client_certs: HTTPS requires client certificates (``httpServerClientCaPath``).
        admin_subjects: ``httpAdminCertificateSubjects``: subjects (``CN=a,O=b``) or CNs that are admin;
            empty = every client certificate is admin.
    """

    def __init__(self, *, admin_token: str | None = None, read_token: str | None = None,
                 client_certs: bool = False, admin_subjects: frozenset[str] = frozenset()) -> None:
        self.admin_token = admin_token
        self.read_token = read_token
        self.client_certs = client_certs
        self.admin_subjects = admin_subjects

    def __repr__(self) -> str:  # never the tokens
        return (f"Credentials(admin_token={'set' if self.admin_token else None}, "
                f"read_token={'set' if self.read_token else None}, client_certs={self.client_certs}, "
                f"admin_subjects={sorted(self.admin_subjects)})")

    @property
    def configured(self) -> bool:
        """Whether any credential is configured (then anonymous callers may not mutate)."""
        return bool(self.admin_token or self.read_token or self.client_certs)

    def identify(self, request: web.Request) -> Caller | None:
        """The caller of ``request``; None when it presents a bearer token that is not accepted.

        Order: a bearer token (when any token is configured) decides alone; else a verified client
        certificate (admin when its CN or full subject is in ``admin_subjects``, or that set is
        empty; else read); else anonymous. The ``Authorization`` header is taken as bytes (a non-UTF-8
        header is a wrong token, not an error); both tokens are compared, each in constant time.
        Never raises.
        """
        header = request.headers.get("Authorization")
        if header is not None and (self.admin_token or self.read_token):
            raw = header.encode("utf-8", "surrogateescape")
            scheme, _, got = raw.strip().partition(b" ")
            got = got.strip()
            is_admin = _same(got, self.admin_token)
            is_read = _same(got, self.read_token)
            if scheme.lower() != b"bearer" or not (is_admin or is_read):
                return None
            return Caller(ADMIN, "token:admin", True) if is_admin else Caller(READ, "token:read", True)
        subject = _peer_subject(request)
        if subject is not None:
            cn = subject[0]
            if not self.admin_subjects or cn in self.admin_subjects or subject[1] in self.admin_subjects:
                return Caller(ADMIN, f"cert:{subject[1]}", True)
            return Caller(READ, f"cert:{subject[1]}", True)
        return Caller(ANONYMOUS, ANONYMOUS, False)


def _same(got: bytes, want: str | None) -> bool:
    """Whether ``got`` is the token ``want`` (constant time; False when no token is configured)."""
    if not want:
        return False
    return hmac.compare_digest(got, want.encode("utf-8"))


def _peer_subject(request: web.Request) -> tuple[str, str] | None:
    """(CN, ``CN=..,O=..`` subject) of the verified client certificate, or None."""
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return None
    names = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}
    parts, cn = [], ""
    for rdn in cert.get("subject", ()):
        for k, v in rdn:
            parts.append(f"{names.get(k, k)}={v}")
            if k == "commonName":
                cn = v
    return cn, ",".join(parts)


def secret_requested(request: web.Request) -> bool:
    """True when the query may ask for a secret: a secret switch with any value but ``false``
    (``?withPassword``, ``?withPassword=true``; a bad value is refused later with 400)."""
    return any(k in request.query and request.query[k].strip().lower() != "false" for k in SECRET_SWITCHES)


def required_role(request: web.Request) -> str:
    """``admin`` for a mutation or a secret-revealing read, else ``read``."""
    if request.method in MUTATING_METHODS or secret_requested(request):
        return ADMIN
    return READ


def _refusal(caller: Caller | None, creds: Credentials, request: web.Request) -> web.Response | None:
    """The 401/403 answer for ``request`` from ``caller``, or None when it may proceed."""
    need = required_role(request)
    secret = secret_requested(request)
    if caller is None:
        return _unauthorized("the bearer token in 'Authorization' is not accepted")
    if caller.role == ADMIN:
        return None
    if need == READ:
        if caller.role == ANONYMOUS and creds.read_token:
            return _unauthorized("this request needs 'Authorization: Bearer <token>' with the token of "
                                 "httpReadTokenFile or httpAdminTokenFile")
        return None
    if caller.role == ANONYMOUS and not creds.configured and not secret:
        return None  # the loopback default: no credential configured at all
    what = "reveals a secret (withPassword)" if secret else "changes the cluster"
    if caller.role == READ:
        return _text(f"403 Forbidden: this request {what} and needs the admin credential "
                     f"(httpAdminTokenFile, or a client certificate listed in httpAdminCertificateSubjects); "
                     f"{caller.who} is read-only", 403)
    if not creds.configured:
        return _text(f"403 Forbidden: this request {what} and needs an authenticated admin; configure "
                     f"httpAdminTokenFile (or HTTPS client certificates) and send its token", 403)
    return _unauthorized(f"this request {what} and needs 'Authorization: Bearer <token>' with the token of "
                         f"httpAdminTokenFile (or an admin client certificate)")


def _unauthorized(why: str) -> web.Response:
    """A 401 answer with ``why`` and ``WWW-Authenticate: Bearer realm="autorecovery"`` (RFC 6750)."""
    resp = _text(f"401 Unauthorized: {why}", 401)
    resp.headers["WWW-Authenticate"] = 'Bearer realm="autorecovery"'
    return resp


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


#: per-request storage of the auth middleware (aiohttp's typed keys): the identified caller (None: a bad
#: token) and whether the request was refused, for the audit middleware
CALLER: web.RequestKey[Caller | None] = web.RequestKey("caller", object)  # type: ignore[arg-type]
REFUSED: web.RequestKey[bool] = web.RequestKey("refused", bool)


def auth_middleware(creds: Credentials) -> Callable:
    """Identify the caller (stored as ``request[CALLER]``) and answer 401/403 before any handler
    when its role is not enough (see the module docstring)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        caller = creds.identify(request)
        request[CALLER] = caller
        refusal = _refusal(caller, creds, request)
        if refusal is not None:
            request[REFUSED] = True
            log.warning("admin request refused", method=request.method, path=request.path,
                        remote=request.remote, who=caller.who if caller else "bad token", status=refusal.status)
            return refusal
        return await handler(request)

    return check


def _result(status: int) -> str:
    """The audit ``result`` label of an HTTP status: ok (< 400), denied (401, 403), rejected (other 4xx),
    failed (5xx)."""
    if status < 400:
        return "ok"
    if status in (401, 403):
        return "denied"
    if status < 500:
        return "rejected"
    return "failed"


def _params(request: web.Request) -> dict[str, str]:
    """Query parameters and top-level scalar JSON body fields, each value cut to 100 characters (at most
    16); a secret switch is named, never a secret."""
    out: dict[str, str] = {}
    for k, v in list(request.query.items())[:16]:
        out[k[:50]] = v[:100]
    body = getattr(request, "_read_bytes", None)  # aiohttp's cache of a body a handler read
    if body:
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict):
            for k, v in list(doc.items())[:16]:
                if isinstance(v, (str, int, float, bool)) or v is None:
                    out[str(k)[:50]] = str(v)[:100]
                elif isinstance(v, list) and all(isinstance(x, str) for x in v[:8]):
                    out[str(k)[:50]] = ",".join(v[:8])[:100]
    return out


def audit_middleware(registry: metrics.MetricsRegistry) -> Callable:
    """One ``audit`` log line and one ``autorecovery_admin_requests_total{action,result}`` count per
    mutation, secret-revealing read or refused request (outermost middleware: it sees every answer)."""

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            if (request.method in MUTATING_METHODS or secret_requested(request) or request.get(REFUSED)):
                caller: Caller | None = request.get(CALLER)
                route = request.match_info.route.resource
                action = f"{request.method} {route.canonical if route is not None else 'unmatched'}"
                result = _result(status)
                audit_log.info("audit", who=caller.who if caller else "bad token",
                               role=caller.role if caller else "none", method=request.method,
                               path=request.path[:200], params=_params(request), remote=request.remote,
                               status=status, result=result)
                registry.counter("autorecovery", "admin_requests_total",
                                 labels={"action": action, "result": result}).inc()

    return record


# -- HTTPS context and reloading ------------------------------------------------------------------------
def server_ssl_context(cert_path: str, key_path: str, client_ca_path: str | None = None) -> ssl.SSLContext:
    """The HTTPS context of the admin server (``httpServerTlsEnable``): TLS 1.2+, the PEM certificate
    chain and key, and with ``client_ca_path`` a required client certificate signed by those CAs.

    Raises:
        ConfigError: naming the key when a file cannot be loaded (the key's content is never quoted).
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"bad value for httpServerCertificatePath/httpServerKeyPath: cannot load {cert_path} "
                          f"with its key: {getattr(exc, 'strerror', None) or type(exc).__name__}") from None
    if client_ca_path:
        try:
            ctx.load_verify_locations(cafile=client_ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"bad value for httpServerClientCaPath: cannot load {client_ca_path}: "
                              f"{getattr(exc, 'strerror', None) or type(exc).__name__}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class ReloadableTls:
    """An HTTPS server context whose certificate, key and client CA can be replaced under a running
    server: :attr:`server_context` is given to the listener once; each new handshake switches (in the
    SNI callback, called for every ClientHello) to the context built last by :meth:`reload`.
    Connections already open keep theirs.

    Args:
        cert_path: ``httpServerCertificatePath``, a PEM certificate chain.
        key_path: ``httpServerKeyPath``, its PEM key.
        client_ca_path: ``httpServerClientCaPath``, PEM CAs whose client certificates are required;
            None = no client certificates.

    Raises:
        ConfigError: from :func:`server_ssl_context`, naming the key whose file does not load.
    """

    def __init__(self, cert_path: str, key_path: str, client_ca_path: str | None = None) -> None:
        self.cert_path, self.key_path, self.client_ca_path = cert_path, key_path, client_ca_path
        self.current = server_ssl_context(cert_path, key_path, client_ca_path)
        # change detection and the whole-version check are the bookie TLS ends' (rpc.tls_reload); the
        # caller (CredentialReloader) sets the pace, hence refresh(force=True) and any refresh_s > 0
        files = [PemFile(k, p, kind) for k, p, kind in (("httpServerCertificatePath", cert_path, CERT),
                                                         ("httpServerKeyPath", key_path, KEY),
                                                         ("httpServerClientCaPath", client_ca_path, TRUST)) if p]
        self.pems = PemFiles(files, 1.0, on_rejected=_warn_admin_tls)
        self.server_context = server_ssl_context(cert_path, key_path, client_ca_path)
        self.server_context.sni_callback = self._pick

    def _pick(self, sslobj: Any, _name: str | None, _ctx: ssl.SSLContext) -> None:
        sslobj.context = self.current

    @property
    def client_certs(self) -> bool:
        """Whether the listener requires a client certificate (a client CA was given)."""
        return self.server_context.verify_mode == ssl.CERT_REQUIRED

    def paths(self) -> dict[str, str]:
        """The files this context is built from, by config key (the client CA only when set)."""
        out = {"httpServerCertificatePath": self.cert_path, "httpServerKeyPath": self.key_path}
        if self.client_ca_path:
            out["httpServerClientCaPath"] = self.client_ca_path
        return out

    def reload(self) -> bool:
        """Build a context from the files when they changed and their new version is whole
        (:meth:`autorecovery.rpc.tls_reload.PemFiles.refresh`); the old one stays otherwise, with one
        WARNING per broken version naming the key.

        Returns:
            True when the served context was replaced. Never raises for a bad file.
        """
        if not self.pems.refresh(force=True):
            return False
        try:
            self.current = server_ssl_context(self.cert_path, self.key_path, self.client_ca_path)
        except ConfigError as exc:  # the files changed again between the check and this read
            _warn_admin_tls(None, str(exc))
            return False
        return True


def _warn_admin_tls(f: PemFile | None, why: str) -> None:
    log.warning("admin HTTPS certificate not reloaded; the previous one is still served",
                key=f.name if f is not None else None, error=why)


class CredentialReloader:
    """Re-reads the token files and the HTTPS files of the admin port when they change (inode, size or
    mtime: :class:`~autorecovery.config.files.FileStamp`), every ``period_s`` seconds
    (``tlsCertFilesRefreshDurationSeconds``; 0 = never). A file that is missing, empty, unreadable or
    not a certificate keeps the old credential and logs one WARNING naming the key; the next change
    is tried again. The HTTPS files go through :meth:`ReloadableTls.reload`, the change check of the
    bookie TLS ends (:class:`~autorecovery.rpc.tls_reload.PemFiles`: a version is taken only whole,
    certificate and key matching).
    """

    def __init__(self, creds: Credentials, *, admin_token_path: str | None = None,
                 read_token_path: str | None = None, tls: ReloadableTls | None = None) -> None:
        self.creds = creds
        self.tokens = {k: p for k, p in (("httpAdminTokenFile", admin_token_path),
                                         ("httpReadTokenFile", read_token_path)) if p}
        self.tls = tls
        self._stamps = {p: FileStamp.of(p) for p in self._paths()}
        self.reloads = 0  # successful reloads (tests and logs)

    def _paths(self) -> list[str]:
        return list(self.tokens.values())

    def check(self) -> bool:
        """Reload what changed since the last check; True when something was reloaded. A file that does
        not load keeps the old credential and logs one WARNING naming its key (never raises for it)."""
        changed = {p for p in self._paths() if FileStamp.of(p) != self._stamps.get(p)}
        for p in changed:
            self._stamps[p] = FileStamp.of(p)
        done = False
        for key, path in self.tokens.items():
            if path in changed:
                done |= self._reload_token(key, path)
        if self.tls is not None and self.tls.reload():  # its own change check (rpc.tls_reload.PemFiles)
            log.info("admin HTTPS certificate reloaded", files=sorted(self.tls.paths().values()))
            done = True
        self.reloads += done
        return done

    def _reload_token(self, key: str, path: str) -> bool:
        """Take the first line of ``path`` as the new token of ``key``; False (and a WARNING) when it is
        missing, unreadable or empty."""
        try:
            token = read_first_line(path, key).strip()
            if not token:
                raise ConfigError(f"bad value for {key}: {path} is empty (expected the token on the first line)")
        except ConfigError as exc:
            log.warning(f"{key} not reloaded; the previous token stays valid", key=key, error=str(exc))
            return False
        if key == "httpAdminTokenFile":
            self.creds.admin_token = token
        else:
            self.creds.read_token = token
        log.info(f"{key} reloaded", key=key, path=path)
        return True

    async def run(self, period_s: float) -> None:
        """Poll every ``period_s`` seconds until cancelled (nothing when ``period_s`` <= 0)."""
        if period_s <= 0:
            return
        while True:
            await asyncio.sleep(period_s)
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 - a reload failure must not stop the poller
                log.warning("admin credential reload failed", error=f"{type(exc).__name__}: {exc}")


REFRESH_KEY = "tlsCertFilesRefreshDurationSeconds"


def refresh_period_s(settings: Any) -> float:
    """Seconds between two checks of the admin port's credential files: upstream's
    ``tlsCertFilesRefreshDurationSeconds`` (default 0 = never; shared with the bookie TLS reload).
    Read from the key table when it has the key, else from the raw property; a value that is not a
    finite number >= 0 logs a WARNING naming the key and means never."""
    try:
        value = settings.get("tlsCertFilesRefreshDurationSeconds")
    except KeyError:  # a key table without it
        value = (getattr(settings, "properties", None) or {}).get(REFRESH_KEY)
    if value in (None, ""):
        return 0.0
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        log.warning(f"bad value for {REFRESH_KEY}: expected seconds >= 0; admin credentials are not reloaded",
                    key=REFRESH_KEY)
        return 0.0
    return seconds
