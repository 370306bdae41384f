"""Machines on one machine, for tests: each component in Linux namespaces of its own, on a bridge the test makes.

A `Network` is a Linux bridge with a private /24 (10.213.N.0/24; N and every interface name derived from this
process's id, so parallel test processes never collide). The test's own process is the host at .1 on it (the
operator's machine). `Network.machine(name)` makes a network namespace joined to the bridge by a veth pair, with an
address of its own (and loopback up, which reaches nothing but itself). `Machine.start(command, …)` runs the command
there in new mount and PID namespaces:

- the mount namespace hides every scratch place a process could share with another by mounting an empty tmpfs over
  it (/tmp, /dev/shm and the test's temporary root, where every other machine's directory is), then puts back its
  own directory and the volumes it declares, at the paths they have on the host; the code, the virtual environment
  and the interpreter stay visible, as an image would be, the repository read-only;
- the PID namespace makes it a container: killing it (`Machine.kill`) kills every process in it, the ones its
  servers spawned included, as a container's end does.

Needs root (network namespaces, bridges, mounts): `Network` skips the test when the kernel refuses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PREFIX = "10.213"  # a /16 of RFC 1918 space that this machine's other networks do not use
SCRATCH = (Path("/tmp"), Path("/dev/shm"), Path("/var/tmp"))  # hidden in every machine: a tmpfs of its own each


@dataclasses.dataclass(frozen=True)
class Volume:
    """``source`` on the host, seen at ``target`` inside a machine (the same path unless given)."""

    source: Path
    target: Path | None = None
    read_only: bool = False

    @property
    def at(self) -> Path:
        return self.target or self.source


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _pids(netns: str) -> list[str]:
    return subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()


def _used_subnets() -> set[str]:
    listing = subprocess.run(["ip", "-4", "-o", "addr", "show"], check=True, capture_output=True, text=True).stdout
    return {str(ipaddress.ip_interface(line.split()[3]).network) for line in listing.splitlines()}


class Network:
    """A bridge with a private /24; the test's process is its host at .1. A context manager: on exit every
    machine's processes are killed and its namespace, the veths and the bridge are deleted, whatever happened."""

    def __init__(self, root: Path):
        if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
            pytest.skip("namespaces need root and iproute2's ip and util-linux's unshare")
        self.root = root  # the test's temporary root: hidden in every machine
        self.tag = f"ev{os.getpid()}"  # names within Linux's 15 characters: ev, up to 7 digits, up to 4 more
        self.bridge = f"{self.tag}br"
        self.machines: list[Machine] = []
        used = _used_subnets()
        start = os.getpid() % 250
        third = next(
            (
                (start + step) % 250 + 2
                for step in range(250)
                if f"{PREFIX}.{(start + step) % 250 + 2}.0/24" not in used
            ),
            None,
        )
        if third is None:
            raise RuntimeError(f"no free /24 in {PREFIX}.0.0/16")
        self.subnet = ipaddress.ip_network(f"{PREFIX}.{third}.0/24")
        self.host = str(self.subnet[1])

    def __enter__(self) -> Network:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
        except subprocess.CalledProcessError as error:
            if "not permitted" not in error.stderr and "not supported" not in error.stderr.lower():
                raise  # e.g. a bridge of that name left by a killed run: a failure to see, not a reason to skip
            pytest.skip(f"the kernel refused a bridge: {error.stderr.strip()}")
        try:
            _ip("addr", "add", f"{self.host}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def machine(self, name: str) -> Machine:
        """A network namespace on the bridge at the next address (.2, .3, …), with eth0 and lo up."""
        number = len(self.machines) + 2
        outside, inside = f"{self.tag}v{number}", f"{self.tag}p{number}"
        machine = Machine(
            self, name, f"{self.tag}-{name}", str(self.subnet[number]), self.root / "machines" / name, outside
        )
        self.machines.append(machine)
        _ip("netns", "add", machine.netns)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", machine.netns)
        _ip("link", "set", outside, "master", self.bridge, "up")
        _ip("-n", machine.netns, "link", "set", inside, "name", "eth0")
        _ip("-n", machine.netns, "addr", "add", f"{machine.address}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", machine.netns, "link", "set", "eth0", "up")
        _ip("-n", machine.netns, "link", "set", "lo", "up")
        machine.home.mkdir(parents=True)
        return machine

    def close(self) -> None:
        for machine in self.machines:
            with contextlib.suppress(RuntimeError):  # the namespace and its veth go all the same
                machine.kill()
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "delete", machine.veth)  # both ends, now: a namespace's own end goes only when it does
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "delete", machine.netns)
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "delete", self.bridge)


@dataclasses.dataclass
class Machine:
    """One component's machine: a network namespace with an address on the bridge and a directory of its own
    (``home``, on the host under the test's root), in which `start` runs its processes."""

    network: Network
    name: str
    netns: str
    address: str
    home: Path
    veth: str  # the host's end of its veth pair
    process: subprocess.Popen | None = None

    def start(
        self, command: list[str], env: dict[str, str], volumes: tuple[Volume, ...] = (), user: str | None = None
    ) -> subprocess.Popen:
        """Run ``command`` (as ``user`` when given) with exactly ``env``, in new mount and PID namespaces in this
        machine's network namespace; its output goes to ``home``/output.log. Sees: its home, ``volumes``, and
        what is outside the scratch places and the test's root."""
        assert self.process is None or self.process.poll() is not None, f"{self.name} is running"
        places = [place for place in (*SCRATCH, self.network.root) if place.exists()]
        hidden = [place for place in places if not any(other in place.parents for other in places)]
        mounts = [Volume(self.home), *volumes, Volume(REPO, read_only=True)]
        # A container's umask, not the test process's: `evidence` commands run in-process by other tests leave
        # 077, and mount points made under it would keep a machine's own user (PostgreSQL's) out of its directory.
        script = ["set -e", "umask 022", "mount -t tmpfs -o mode=0755 staging /mnt"]
        # Bind what stays visible under /mnt first: the tmpfs over the hidden places then covers the originals.
        for number, volume in enumerate(mounts):
            script += [f"mkdir /mnt/{number}", f"mount --bind {shlex.quote(str(volume.source))} /mnt/{number}"]
            if volume.read_only:
                script.append(f"mount -o remount,bind,ro /mnt/{number}")
        script += [f"mount -t tmpfs -o mode=1777 hidden {shlex.quote(str(place))}" for place in hidden]
        for number, volume in sorted(enumerate(mounts), key=lambda pair: len(pair[1].at.parts)):
            script += [
                f"mkdir -p {shlex.quote(str(volume.at))}",
                f"mount --move /mnt/{number} {shlex.quote(str(volume.at))}",
            ]
        script += ["umount /mnt", 'exec "$@"']
        as_user = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"] if user else []
        with open(self.home / "output.log", "a") as log:
            self.process = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.netns,
                    # --kill-child: SIGKILL to unshare kills its child, the PID namespace's init, and so all in it
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "--pid",
                    "--fork",
                    "--kill-child",
                    "--mount-proc",
                    "--",
                    "sh",
                    "-c",
                    "\n".join(script),
                    "sh",
                    *as_user,
                    *command,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self.process

    def kill(self) -> None:
        """SIGKILL, as a container is killed: every process in the machine. Returns when none is left, so that a
        restart finds its ports free."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        # unshare's --kill-child ends its PID namespace, but not through a change of user (setpriv): the kernel
        # clears a process's parent-death signal when its credentials change. So every process of the machine too.
        deadline = time.monotonic() + 30
        while pids := _pids(self.netns):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes of {self.name} outlived SIGKILL: {pids}")
            time.sleep(0.05)

    def log(self, tail: int = 3000) -> str:
        path = self.home / "output.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def url(self, port: int, scheme: str = "http") -> str:
        return f"{scheme}://{self.address}:{port}"
