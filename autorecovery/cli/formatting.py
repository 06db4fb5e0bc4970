"""Upstream's text renderings that the shell prints (CLI only; the HTTP API renders JSON).

``bookie_line`` (``BookieID:…, IP:…, Port:…, Hostname:…``), ``format_metadata`` (upstream
``LedgerMetadataImpl.toString``) and the progress line of long operations.
"""

from __future__ import annotations

from autorecovery.admin.op_context import OpProgress
from autorecovery.admin.ops_ledgers import base64_text, upstream_digest_name
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState


def bookie_line(bookie_id: str, address: tuple[str, int, str]) -> str:
    """Upstream ``CommandHelpers.getBookieSocketAddrStringRepresentation``:
    ``BookieID:<id>, IP:<ip>, Port:<port>, Hostname:<hostname>``."""
    ip, port, name = address
    return f"BookieID:{bookie_id}, IP:{ip}, Port:{port}, Hostname:{name}"


def format_metadata(md: LedgerMetadata, *, with_password: bool = False) -> str:
    """Upstream ``LedgerMetadataImpl.toSafeString()`` (4.17), field for field::

        LedgerMetadata{formatVersion=3, ensembleSize=3, writeQuorumSize=2, ackQuorumSize=2, state=CLOSED,
        length=1280, lastEntryId=4, digestType=CRC32C, password=OMITTED, ensembles={0=[a:1, b:2, c:3]},
        customMetadata={key=base64:dmFsdWU=}}

    ``length``/``lastEntryId`` only for a closed ledger (as upstream); the password is ``OMITTED``
    (upstream's ``toSafeString``; issue 25) unless ``with_password`` asks for upstream's ``toString``
    form ``password=base64:cHc=`` (the shell's ``ledgermetadata --with-password``); custom metadata
    values in base64, keys sorted (upstream's order is a HashMap's). ``ctime`` is not part of upstream's
    text; see ``ledgermetadata --json``. Metadata that stores no password (format v1) has neither
    ``digestType`` nor ``password``, as upstream's ``hasPassword()`` check.
    """
    ens = ", ".join(f"{s.first_entry_id}=[{', '.join(s.ensemble)}]" for s in md.segments)
    custom = ", ".join(f"{k}=base64:{base64_text(v)}" for k, v in sorted(md.custom_metadata.items()))
    parts = [
        f"formatVersion={md.format_version}",
        f"ensembleSize={md.ensemble_size}",
        f"writeQuorumSize={md.write_quorum}",
        f"ackQuorumSize={md.ack_quorum}",
        f"state={md.state.name}",
    ]
    if md.state == LedgerState.CLOSED:
        parts += [f"length={md.length}", f"lastEntryId={md.last_entry_id}"]
    if md.has_password:  # upstream prints neither for metadata that stores none (format v1)
        parts += [
            f"digestType={upstream_digest_name(md)}",
            f"password=base64:{base64_text(md.password)}" if with_password else "password=OMITTED",
        ]
    parts += [
        f"ensembles={{{ens}}}",
        f"customMetadata={{{custom}}}",
    ]
    return "LedgerMetadata{" + ", ".join(parts) + "}"


def human_bytes(n: float) -> str:
    """``1.5 MB`` style (powers of 1000, as upstream's shell)."""
    units = ["B", "KB", "MB", "GB", "TB", "PB"]
    x = float(n)
    i = 0
    while abs(x) >= 1000 and i < len(units) - 1:
        x /= 1000
        i += 1
    return f"{x:.0f} {units[i]}" if i == 0 else f"{x:.1f} {units[i]}"


def human_duration(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s" if m else f"{sec}s"


def progress_line(p: OpProgress, width: int = 24) -> str:
    """One-line progress bar: ``[#####.....] 3/10 ledgers left, 1.2 MB/4.0 MB left, 350.0 KB/s, ETA 8s``."""
    done_frac = 1.0
    if p.bytes_total > 0:
        done_frac = 1.0 - p.bytes_left / p.bytes_total
    elif p.ledgers_total > 0:
        done_frac = 1.0 - p.ledgers_left / p.ledgers_total
    done_frac = min(1.0, max(0.0, done_frac))
    filled = int(round(done_frac * width))
    bar = "#" * filled + "." * (width - filled)
    rate = f"{human_bytes(p.rate_bytes_per_s)}/s"
    blocked = f", {len(p.blocked)} blocked" if p.blocked else ""
    return (f"[{bar}] {p.ledgers_left}/{p.ledgers_total} ledgers left, {human_bytes(p.bytes_left)}/"
            f"{human_bytes(p.bytes_total)} left, {rate}, ETA {human_duration(p.eta_s)}{blocked}")
