"""``autorecovery local-cluster up|down|status|start|stop|kill|restart``: a real cluster of processes on loopback.

A *node* ``N`` is bookie ``N`` plus the autorecovery daemon ``N`` next to it (``up --with-autorecovery``
starts one daemon per bookie). ``start|stop|kill|restart`` act on ``--bookie N``, ``--daemon N`` or
``--node N`` (each may be repeated); a restarted bookie keeps its data dir and address, a restarted daemon
its generated conf file. ``stop`` sends SIGTERM (a clean shutdown: the bookie unregisters), ``kill``
sends SIGKILL (a crash: its znode stays until the ZooKeeper session expires).

What later commands need is carried in two files next to ``cluster.json`` (issue 28): ``<dir>/bk_server.conf``
(this cluster's ``zkServers`` and ``zkLedgersRootPath``, ``httpServerPort=0``: for ``run -c``,
``shell --conf``, ``config check -c``, ``export -c``) and ``<dir>/env``, a shell file to source
(``. .cluster/env``) that exports ``ZK`` (the connect string), ``AUTORECOVERY_CONF`` (that file, absolute)
and ``AUTORECOVERY_HTTP`` (``host:port`` of the lowest-numbered running daemon's HTTP API; rewritten by
``start``/``restart``, since a restarted daemon gets a new free port). ``status`` prints all of it.
"""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path

import click

from autorecovery.testing.local_cluster import LocalCluster


def parse_defines(defines: tuple[str, ...], option: str = "-D") -> dict[str, str]:
    """``("key=value", ...)`` -> dict.

    Raises:
        click.BadParameter: an item without ``=`` or with an empty key (names the item).
    """
    out: dict[str, str] = {}
    for item in defines:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=option)
        out[key.strip()] = value.strip()
    return out


def cluster_conf(c: LocalCluster) -> Path:
    """``<dir>/bk_server.conf``: the conf file later commands use for this cluster."""
    return c.base / "bk_server.conf"


def env_file(c: LocalCluster) -> Path:
    """``<dir>/env``: the shell file exporting ``ZK``, ``AUTORECOVERY_CONF`` and ``AUTORECOVERY_HTTP``."""
    return c.base / "env"


def _http(c: LocalCluster) -> str:
    """``127.0.0.1:<port>`` of the lowest-numbered running daemon ("" when none runs)."""
    for i in sorted(c.daemons):
        if c.daemons[i].port and c.daemon_alive(i):
            return f"127.0.0.1:{c.daemons[i].port}"
    return ""


def write_handoff(c: LocalCluster) -> None:
    """Write ``<dir>/bk_server.conf`` and ``<dir>/env`` from the cluster's current state."""
    conf = cluster_conf(c)
    conf.write_text("# this local cluster, written by `autorecovery local-cluster up` (see `local-cluster status`)\n"
                    f"zkServers={c.zk_connect}\nzkLedgersRootPath={c.ledgers_root}\n"
                    "httpServerPort=0\nhttpServerAddress=127.0.0.1\n")
    lines = ["# written by `autorecovery local-cluster up|start|restart`; in a shell: . <this file>",
             f"export ZK={shlex.quote(c.zk_connect)}",
             f"export AUTORECOVERY_CONF={shlex.quote(str(conf.resolve()))}"]
    http = _http(c)
    if http:
        lines.append(f"export AUTORECOVERY_HTTP={http}")
    env_file(c).write_text("\n".join(lines) + "\n")


def _load(base_dir: Path) -> LocalCluster:
    try:
        return LocalCluster.load(base_dir)
    except FileNotFoundError as exc:
        raise click.ClickException(f"no cluster state at {base_dir / 'cluster.json'}") from exc


#: Bounds of bookie/daemon numbers and counts of a local cluster (one machine, 127.0.0.x addresses).
MAX_NODES = 250


@click.group("local-cluster")
def local_cluster() -> None:
    """Start, inspect and stop a local cluster (ZooKeeper + bookies on 127.0.0.x)."""


@local_cluster.command("up")
@click.option("--bookies", default=3, show_default=True, type=click.IntRange(1, MAX_NODES), help="number of bookies")
@click.option("--racks", default=1, show_default=True, type=click.IntRange(1, MAX_NODES), help="number of racks (bookies assigned round robin)")
@click.option("--dir", "base_dir", default=".cluster", show_default=True, type=click.Path(path_type=Path))
@click.option("--ledgers-root", default="/ledgers", show_default=True)
@click.option("--with-autorecovery", is_flag=True,
              help="also start one autorecovery daemon per bookie, each with a generated conf")
@click.option("-D", "defines", multiple=True, metavar="KEY=VALUE",
              help="a daemon setting (upstream key), repeatable; e.g. -D lostBookieRecoveryDelay=0")
def up(bookies: int, racks: int, base_dir: Path, ledgers_root: str, with_autorecovery: bool,
       defines: tuple[str, ...]) -> None:
    """Start ZooKeeper and BOOKIES bookies (and, with --with-autorecovery, a daemon per bookie); writes
    DIR/bk_server.conf and DIR/env (source it: ZK, AUTORECOVERY_CONF, AUTORECOVERY_HTTP) and prints the
    ZooKeeper connect string last.

    Daemons get ``zkServers``, ``zkLedgersRootPath``, ``bookieId`` (their bookie's id) and
    ``httpServerPort=0`` (a free port, printed), then every ``-D`` setting, which wins."""
    props = parse_defines(defines)
    if props and not with_autorecovery:
        raise click.BadParameter("settings are for the daemons: add --with-autorecovery", param_hint="-D")
    if (base_dir / "cluster.json").exists():
        old = LocalCluster.load(base_dir)
        if any(old.status().values()):
            raise click.ClickException(f"a cluster is already running from {base_dir} (local-cluster down first)")
    c = LocalCluster(base_dir, bookies=bookies, racks=racks, ledgers_root=ledgers_root)
    c.daemon_properties = {"httpServerPort": "0", **props}
    try:
        c.up()
        if with_autorecovery:
            for i in sorted(c.bookies):
                c.start_daemon(i)
    except Exception as exc:  # broad: torn down and re-raised as a one-line ClickException
        c.down()
        raise click.ClickException(f"cluster failed to start: {exc}") from exc
    for i in sorted(c.bookies):
        click.echo(f"bookie {c.bookie_id(i)}\t{c.rack_of(i)}\tpid {c.bookies[i].pid}")
    for i in sorted(c.daemons):
        d = c.daemons[i]
        click.echo(f"autorecovery {i}\thttp 127.0.0.1:{d.port}\tpid {d.pid}\tconf {d.data_dir}")
    write_handoff(c)
    click.echo(f"conf {cluster_conf(c)}\tfor run -c, shell --conf, config check -c, export -c")
    click.echo(f"env {env_file(c)}\tsource it (. {env_file(c)}) to get ZK, AUTORECOVERY_CONF"
               + (", AUTORECOVERY_HTTP" if c.daemons else ""))
    click.echo(c.zk_connect)


@local_cluster.command("down")
@click.option("--dir", "base_dir", default=".cluster", show_default=True, type=click.Path(path_type=Path))
def down(base_dir: Path) -> None:
    """Stop every process that `up` started (by pid), and nothing else."""
    c = _load(base_dir)
    stopped = c.down()
    click.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@local_cluster.command("status")
@click.option("--dir", "base_dir", default=".cluster", show_default=True, type=click.Path(path_type=Path))
def status(base_dir: Path) -> None:
    """Print, as JSON, everything later commands need: the ZooKeeper connect string, the conf and env
    files, each bookie (id, rack, alive, pid) and each daemon (HTTP address, alive, pid, conf, log)."""
    c = _load(base_dir)
    alive = c.status()
    bookies = [{"bookie": i, "id": c.bookie_id(i), "rack": c.rack_of(i), "alive": c.bookie_alive(i),
                "pid": c.bookies[i].pid} for i in sorted(c.bookies)]
    daemons = [{"daemon": i, "http": f"127.0.0.1:{d.port}" if d.port else None, "alive": c.daemon_alive(i),
                "pid": d.pid, "conf": d.data_dir, "log": d.log} for i, d in sorted(c.daemons.items())]
    click.echo(json.dumps({"zk_connect": c.zk_connect, "ledgers_root": c.ledgers_root,
                           "conf": str(cluster_conf(c)), "env": str(env_file(c)), "bookies": bookies,
                           "daemons": daemons, "processes": alive, "racks": c.rack_mapping()}, indent=2))


def _targets(c: LocalCluster, bookie: tuple[int, ...], daemon: tuple[int, ...], node: tuple[int, ...],
             action: str) -> list[tuple[str, int]]:
    """[("bookie"|"daemon", N)] in a safe order: bookies first when starting, daemons first otherwise."""
    if not (bookie or daemon or node):
        raise click.UsageError(f"{action}: name at least one --bookie N, --daemon N or --node N")
    b = list(dict.fromkeys(list(bookie) + list(node)))
    d = list(dict.fromkeys(list(daemon) + list(node)))
    for n in b:
        if n < 0 or (action != "start" and n not in c.bookies):
            raise click.BadParameter(f"no bookie {n} in this cluster (bookies: {sorted(c.bookies)})",
                                     param_hint="--bookie/--node")
    for n in d:
        if n < 0 or (action != "start" and n not in c.daemons):
            raise click.BadParameter(f"no autorecovery daemon {n} in this cluster (daemons: {sorted(c.daemons)})",
                                     param_hint="--daemon/--node")
    todo = [("bookie", n) for n in b]
    later = [("daemon", n) for n in d]
    return todo + later if action in ("start", "restart") else later + todo


def _node_options(f):
    f = click.option("--dir", "base_dir", default=".cluster", show_default=True, type=click.Path(path_type=Path))(f)
    f = click.option("--node", multiple=True, type=click.IntRange(0, MAX_NODES), help="bookie N and daemon N (repeatable)")(f)
    f = click.option("--daemon", multiple=True, type=click.IntRange(0, MAX_NODES), help="autorecovery daemon N (repeatable)")(f)
    f = click.option("--bookie", multiple=True, type=click.IntRange(0, MAX_NODES), help="bookie N (repeatable)")(f)
    return f


def _run(action: str, bookie, daemon, node, base_dir: Path) -> None:
    c = _load(base_dir)
    for kind, n in _targets(c, bookie, daemon, node, action):
        name = f"{kind}-{n}" if kind == "bookie" else f"autorecovery-{n}"
        alive = c.bookie_alive(n) if kind == "bookie" else c.daemon_alive(n)
        try:
            if action in ("stop", "kill"):
                if not alive:
                    click.echo(f"{name}: was not running")
                    continue
                sig = signal.SIGTERM if action == "stop" else signal.SIGKILL
                if kind == "bookie":
                    c.kill_bookie(n, sig)
                else:
                    c.stop_daemon(n, sig)
                click.echo(f"{name}: {'stopped' if action == 'stop' else 'killed'}")
                continue
            if action == "start" and alive:
                raise click.ClickException(f"{name} is already running (pid "
                                           f"{(c.bookies if kind == 'bookie' else c.daemons)[n].pid})")
            if kind == "bookie":
                new = n not in c.bookies
                bid = c.restart_bookie(n) if action == "restart" else c.start_bookie(n)
                if new:
                    c.write_racks()
                click.echo(f"{name}: running as {bid} in {c.rack_of(n)}, pid {c.bookies[n].pid}")
            else:
                info = c.restart_daemon(n) if action == "restart" else c.start_daemon(n)
                click.echo(f"{name}: running, http 127.0.0.1:{info.port}, pid {info.pid}")
        except RuntimeError as exc:
            raise click.ClickException(f"{name} failed to {action}: {exc}") from exc
        finally:
            write_handoff(c)  # a restarted daemon has a new HTTP port


@local_cluster.command("start")
@_node_options
def start(bookie, daemon, node, base_dir: Path) -> None:
    """Start a stopped bookie/daemon/node again on the same data dir, address and conf. A bookie number
    not in the cluster yet adds a new bookie (next rack round robin; /bookies updated)."""
    _run("start", bookie, daemon, node, base_dir)


@local_cluster.command("stop")
@_node_options
def stop(bookie, daemon, node, base_dir: Path) -> None:
    """Stop with SIGTERM (clean shutdown) and wait for the process to exit."""
    _run("stop", bookie, daemon, node, base_dir)


@local_cluster.command("kill")
@_node_options
def kill(bookie, daemon, node, base_dir: Path) -> None:
    """Kill with SIGKILL (a crash) and wait for the process to exit."""
    _run("kill", bookie, daemon, node, base_dir)


@local_cluster.command("restart")
@_node_options
def restart(bookie, daemon, node, base_dir: Path) -> None:
    """Stop (SIGTERM, if running) and start again on the same data dir, address and conf."""
    _run("restart", bookie, daemon, node, base_dir)
