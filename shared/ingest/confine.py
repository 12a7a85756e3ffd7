"""What a parser child does to itself before it touches a document: limits, no secrets, no network, its own uid.

In order, while it may still be root: resource limits (address space, file size, CPU, processes, no core
dumps); a new network namespace, in which only a loopback interface exists and it is down; an environment
holding PATH, HOME, TMPDIR, LANG and the parsers' own switches only, the inherited one wiped from memory too;
then its own unprivileged uid and gid with no supplementary groups. Then, as that uid: death with its parent,
a user and network namespace if the network is not isolated yet (the way an unprivileged process can), not
dumpable (other processes cannot read its memory or /proc files), and the seccomp filter (shared/ingest/seccomp.py:
no sockets at all).

`apply` reports what it achieved; under a strict policy a missing guard refuses the document (503) instead.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import tempfile
from dataclasses import dataclass

from shared.errors import ServiceUnavailable
from shared.ingest import scrub, seccomp

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
# The environment a child gets: nothing of the worker's but PATH; unstructured's two switches (unstructured_setup.py
# sets them in the forkserver, and unstructured reads them again at run time).
_PARSER_ENVIRONMENT = {"LANG": "C.UTF-8", "DO_NOT_TRACK": "true", "UNSTRUCTURED_DISABLE_NOTICE": "1"}
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class Confinement:
    """What one child applies to itself: its private directory, limits, uid (None: keep the worker's) and policy."""

    workdir: str
    memory_bytes: int
    file_bytes: int
    cpu_seconds: int
    processes: int
    uid: int | None
    strict: bool
    path: str = DEFAULT_PATH


@dataclass(frozen=True, slots=True)
class Report:
    """What a child achieved: how its network is cut off ("" when it is not), its filter, its uid."""

    network: str
    filtered: bool
    uid: int
    own_uid: bool

    @property
    def missing(self) -> list[str]:
        """The guards this child runs without, in words for a log line or an error."""
        gaps = []
        if not self.network and not self.filtered:
            gaps.append("no network isolation (neither a network namespace nor a seccomp filter could be set up)")
        if not self.own_uid:
            gaps.append(f"no uid of its own (it runs as the worker's uid {self.uid}, which is not root)")
        return gaps


def apply(confinement: Confinement) -> Report:
    """Confine this process (a freshly forked parser child) as described in the module's docstring."""
    parent = os.getppid()
    _limits(confinement)
    network = "network namespace" if os.geteuid() == 0 and _unshare(_CLONE_NEWNET) else ""
    _clean_environment(confinement)
    if confinement.uid is not None:
        _drop_to(confinement.uid)
    uid = os.getuid()  # before a user namespace, inside which it would read as the overflow uid
    # Die with the forkserver (which dies with its worker) rather than parse on for nobody. Set after the uid
    # changed, which clears it; a parent gone before that shows as a new parent id.
    _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
    if not network and _unshare(_CLONE_NEWUSER | _CLONE_NEWNET):
        network = "user and network namespaces"
    _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    report = Report(network, seccomp.install(), uid, confinement.uid is not None)
    if confinement.strict and report.missing:
        raise ServiceUnavailable(
            "the parser sandbox cannot confine parsers on this host: " + "; ".join(report.missing),
            details={"sandbox": report.missing},
        )
    return report


def _limits(confinement: Confinement) -> None:
    _limit(resource.RLIMIT_AS, confinement.memory_bytes)
    _limit(resource.RLIMIT_FSIZE, confinement.file_bytes)
    _limit(resource.RLIMIT_CPU, confinement.cpu_seconds)
    _limit(resource.RLIMIT_CORE, 0)
    if confinement.uid is not None:
        # Counted per uid (threads included): the worker's own uid would count the worker too.
        _limit(resource.RLIMIT_NPROC, confinement.processes)
    # A write past RLIMIT_FSIZE then fails with EFBIG (an error the parser reports) instead of killing the child.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _limit(kind: int, value: int) -> None:
    _, hard = resource.getrlimit(kind)
    cap = value if hard == resource.RLIM_INFINITY else min(value, hard)  # never above the hard limit
    resource.setrlimit(kind, (cap, cap))


def _clean_environment(confinement: Confinement) -> None:
    """PATH, HOME, TMPDIR and the parsers' own switches; the inherited strings zeroed where the kernel keeps them."""
    os.environ.clear()
    _libc().clearenv()
    os.environ.update(PATH=confinement.path, HOME=confinement.workdir, TMPDIR=confinement.workdir)
    os.environ.update(_PARSER_ENVIRONMENT)
    scrub.zero_initial_block()  # empty already when the forkserver scrubbed itself (scrub.py)
    tempfile.tempdir = confinement.workdir  # the forkserver may have cached another one
    os.chdir(confinement.workdir)


def _drop_to(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups():
        raise ServiceUnavailable(f"the parser sandbox could not switch to uid {uid}")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise ServiceUnavailable("the parser sandbox could regain root after dropping it")


def _unshare(flags: int) -> bool:
    return _libc().unshare(flags) == 0


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)
