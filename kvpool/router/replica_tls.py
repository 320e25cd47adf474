"""``kvpool router --replica-ca-certs PEM``: the CAs the router trusts for https:// replicas.

NOTE(replica-ca): one client context, made at startup, serves the health beats (replicas.py),
the proxied requests (wire.py) and the router's own asks (relayed.py's own_session): a
replica whose certificate one of them trusts and another does not would pass its beats and
fail every request, or serve requests its lookups could not score. Given a PEM, the router trusts
its CAs *instead of* the system's, as Envoy's ``trusted_ca`` and nginx's
``proxy_ssl_trusted_certificate`` do: a private CA for private replicas, and a replica whose
certificate a public CA signed is not trusted by accident. Hostnames are checked as ever
(the certificate must name the URL's host or IP). Without the flag the system's CAs are used
(OpenSSL's SSL_CERT_FILE / SSL_CERT_DIR still apply). A file that is missing, unreadable or
holds no CA certificate is a startup error naming the flag and the path
(docs/architecture.md, Router: "Replicas over HTTPS").
"""

from __future__ import annotations

import ssl

from kvpool.errors import ConfigError

__all__ = ["replica_context"]


def replica_context(path: str | None) -> ssl.SSLContext | None:
    """The context for https:// replicas trusting the CAs in ``path`` (None: no flag given,
    the system's CAs); ConfigError naming the flag and the path when it cannot be used."""
    if path is None:
        return None
    try:
        return ssl.create_default_context(cafile=path)
    except OSError as exc:  # ssl.SSLError is one: not PEM, no certificate in it
        what = ("not PEM CA certificates" if isinstance(exc, ssl.SSLError)
                else f"cannot read it ({exc.strerror or exc})")
        raise ConfigError(f"--replica-ca-certs {path}: {what}") from None
