"""Replay docker-compose.yml's services as local processes on loopback (test aid, issue 14).

There is no Docker engine on our machines, so the compose file is tested by running what it says:
each service built from our image (``build:`` / ``image: autorecovery:…``) becomes a process running
``python -m autorecovery <command>`` with the service's ``environment``, its bind-mounted config files
and its named volumes, on its own loopback address (127.0.0.(100+i), as a container has its own
network namespace). ZooKeeper is our Debian ZooKeeper (the caller's connect string replaces
``zk:2181``). Substitutions, applied to commands, environment values and mounted files alike:

* a service's ``hostname`` → its loopback address; ``zk:2181`` → the real ZooKeeper;
* inside a service, ``0.0.0.0`` and ``127.0.0.1`` → its own address (its "localhost");
* a bind mount's container path → a copy of the file under ``<workdir>/<service>/``; a named volume's
  container path → ``<workdir>/volumes/<volume>``.

``healthcheck.test`` is run the same way (``CMD`` or ``CMD-SHELL``, ``python`` → this interpreter, with
``HOSTNAME`` set), and :meth:`ComposeReplay.up` honours ``depends_on`` conditions
(``service_started``, ``service_healthy``, ``service_completed_successfully``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

OUR_IMAGE = "autorecovery:"


@dataclass
class Service:
    """One replayed service: what to run, where, and how to check it."""

    name: str
    address: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    health: list[str] | None
    depends_on: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    log: Path | None = None


class ComposeReplay:
    """Load ``compose_file`` and prepare its services under ``workdir``.

    Args:
        compose_file: path of docker-compose.yml (bind-mount sources are relative to its folder).
        workdir: scratch directory for config copies, volumes and logs.
        zk_connect: ``host:port`` of the ZooKeeper that stands in for the ``zk`` service.

    Raises:
        ValueError: naming the service whose command, volume or healthcheck cannot be replayed.
    """

    def __init__(self, compose_file: Path, workdir: Path, zk_connect: str) -> None:
        self.base = compose_file.resolve().parent
        self.doc = yaml.safe_load(compose_file.read_text())
        self.workdir = workdir
        self.zk_connect = zk_connect
        names = list(self.doc["services"])
        self.addresses = {n: f"127.0.0.{100 + i}" for i, n in enumerate(names)}
        self.hostnames = {spec.get("hostname", n): self.addresses[n] for n, spec in self.doc["services"].items()
                          if spec.get("hostname")}
        self.services: dict[str, Service] = {}
        for n, spec in self.doc["services"].items():
            if self.ours(n):
                self.services[n] = self._prepare(n, spec)

    # -- preparation ------------------------------------------------------------------------------
    def ours(self, name: str) -> bool:
        """Whether the service runs our image (the others — ZooKeeper, Prometheus, Grafana — are not replayed)."""
        spec = self.doc["services"][name]
        return "build" in spec or str(spec.get("image", "")).startswith(OUR_IMAGE)

    def substitute(self, text: str, own: str | None = None) -> str:
        """Apply the hostname, ZooKeeper and own-address substitutions to ``text``."""
        if own is not None:  # first: the addresses substituted below may be on 127.0.0.1 themselves
            text = re.sub(r"(?<![\d.])(?:0\.0\.0\.0|127\.0\.0\.1)(?![\d])", own, text)
        text = text.replace("zk:2181", self.zk_connect)
        for host, addr in sorted(self.hostnames.items(), key=lambda kv: -len(kv[0])):
            text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", addr, text)
        return text

    def _prepare(self, name: str, spec: dict) -> Service:
        own = self.addresses[name]
        cwd = self.workdir / name
        cwd.mkdir(parents=True, exist_ok=True)
        paths: dict[str, str] = {}  # container path -> local path
        for vol in spec.get("volumes", []):
            if not isinstance(vol, str):
                raise ValueError(f"service {name}: long-form volume {vol!r} is not replayed")
            src, dst = vol.split(":")[:2]
            if src.startswith(("./", "/", "../")):
                local = cwd / dst.lstrip("/")
                local.parent.mkdir(parents=True, exist_ok=True)
                source = (self.base / src).resolve()
                local.write_text(self.substitute(source.read_text(), own))
                local.chmod(source.stat().st_mode)
                paths[dst] = str(local)
            else:
                local = self.workdir / "volumes" / src
                local.mkdir(parents=True, exist_ok=True)
                paths[dst] = str(local)

        def localise(text: str) -> str:
            for dst, local in sorted(paths.items(), key=lambda kv: -len(kv[0])):
                text = re.sub(rf"(?<![\w/]){re.escape(dst)}(?=$|/|[\s\"',:])", local, text)
            return text

        for local_path in paths.values():
            p = Path(local_path)
            if p.is_file():
                p.write_text(localise(p.read_text()))
        command = spec.get("command")
        if not isinstance(command, list):
            raise ValueError(f"service {name}: command must be a list to be replayed, got {command!r}")
        argv = [sys.executable, "-m", "autorecovery"] + [localise(self.substitute(str(a), own)) for a in command]
        env = {k: localise(self.substitute(str(v), own)) for k, v in (spec.get("environment") or {}).items()}
        env["HOSTNAME"] = own
        health = None
        test = (spec.get("healthcheck") or {}).get("test")
        if test:
            kind, *rest = test
            if kind == "CMD":
                health = [sys.executable if a == "python" else self.substitute(a, own) for a in rest]
            elif kind == "CMD-SHELL":
                script = self.substitute(rest[0], own)
                script = re.sub(r"(^|\s)python(\s)", rf"\g<1>{shlex.quote(sys.executable)}\g<2>", script)
                health = ["/bin/sh", "-c", script]
            else:
                raise ValueError(f"service {name}: healthcheck test {test!r} is not replayed")
        deps = spec.get("depends_on") or {}
        if isinstance(deps, list):
            deps = {d: "service_started" for d in deps}
        else:
            deps = {d: (c or {}).get("condition", "service_started") for d, c in deps.items()}
        return Service(name, own, argv, env, cwd, health, deps)

    # -- running ----------------------------------------------------------------------------------
    def _env(self, svc: Service) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BK_")}
        env.update(svc.env)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self, name: str) -> Service:
        """Start a service's process (output to ``<workdir>/<name>.log``)."""
        svc = self.services[name]
        svc.log = self.workdir / f"{name}.log"
        with open(svc.log, "ab") as out:
            svc.proc = subprocess.Popen(svc.argv, cwd=svc.cwd, env=self._env(svc), stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        return svc

    def healthy(self, name: str) -> bool:
        """Run the service's healthcheck once; True when it exits 0 (no healthcheck: process alive)."""
        svc = self.services[name]
        if svc.health is None:
            return svc.proc is not None and svc.proc.poll() is None
        r = subprocess.run(svc.health, env=self._env(svc), cwd=svc.cwd, capture_output=True, timeout=30)
        return r.returncode == 0

    def wait(self, name: str, condition: str, timeout_s: float = 60.0) -> None:
        """Wait (with a deadline) until ``name`` meets a ``depends_on`` condition.

        Raises:
            AssertionError: naming the service, the condition and the tail of its log.
        """
        svc = self.services.get(name)
        deadline = time.monotonic() + timeout_s
        while True:
            if svc is None:  # not ours (ZooKeeper is the caller's, already up)
                return
            if condition == "service_completed_successfully":
                code = svc.proc.poll() if svc.proc else None
                if code == 0:
                    return
                if code is not None:
                    raise AssertionError(f"{name} exited {code}: {self.tail(name)}")
            elif condition == "service_healthy":
                if self.healthy(name):
                    return
            elif svc.proc is not None:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} not {condition} within {timeout_s}s: {self.tail(name)}")
            time.sleep(0.2)  # polling a condition with a deadline

    def order(self) -> list[str]:
        """Our services in dependency order (depends_on first)."""
        out: list[str] = []

        def visit(n: str, stack: tuple[str, ...] = ()) -> None:
            if n in out or n not in self.services:
                return
            if n in stack:
                raise ValueError(f"depends_on cycle through {n}")
            for d in self.services[n].depends_on:
                visit(d, (*stack, n))
            out.append(n)

        for n in self.services:
            visit(n)
        return out

    def up(self, timeout_s: float = 90.0) -> None:
        """Start every service in dependency order, honouring each ``depends_on`` condition."""
        for n in self.order():
            for dep, cond in self.services[n].depends_on.items():
                self.wait(dep, cond, timeout_s)
            self.start(n)

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int | None:
        """Signal a service's process group and wait for it; returns its exit code."""
        svc = self.services[name]
        if svc.proc is None or svc.proc.poll() is not None:
            return svc.proc.returncode if svc.proc else None
        os.killpg(svc.proc.pid, sig)
        try:
            return svc.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(svc.proc.pid, signal.SIGKILL)
            return svc.proc.wait(10)

    def down(self) -> None:
        for n in reversed(self.order()):
            self.stop(n)

    def tail(self, name: str, n: int = 3000) -> str:
        svc = self.services[name]
        return svc.log.read_text(errors="replace")[-n:] if svc.log and svc.log.exists() else "(no log)"

    def remove_volumes(self) -> None:
        shutil.rmtree(self.workdir / "volumes", ignore_errors=True)
