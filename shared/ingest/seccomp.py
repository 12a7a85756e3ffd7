"""A seccomp filter for the parser child: no sockets, no namespaces, no ptrace, no escaping its process group.

Written as classic BPF by hand (no libseccomp needed) for x86_64 and aarch64; elsewhere `install` reports that it
cannot filter. What it refuses, with EPERM unless noted:

- socket() of every family: no TCP/UDP (network), and no Unix socket either, since a network namespace does
  not hide path-bound ones (a database's or Docker's socket on the host). socketpair() stays allowed;
- io_uring, which could open sockets without the socket() system call;
- ptrace and process_vm_readv/writev (reading another process's memory), bpf, perf_event_open, userfaultfd
  and the kernel keyring: attack surface no parser needs;
- setsid and setpgid, so no descendant leaves the process group the sandbox kills at the end;
- unshare, setns and clone with a namespace flag (clone3 answers ENOSYS, so the C library falls back to clone);
- any system call made through another architecture's entry point (i386's int 0x80, x32).

The filter is installed by the child after its own namespaces are set up, with no_new_privs, and is inherited
by everything it starts (pandoc).
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JUMP_ANY_BIT = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (the low word of args[0]).
_NR, _ARCH, _ARG0 = 0, 4, 16

_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET

# machine → (AUDIT_ARCH_*, first number of a foreign ABI sharing the arch or None, system call numbers).
_TABLES: dict[str, tuple[int, int | None, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        0x40000000,  # x32
        {
            "socket": 41,
            "ptrace": 101,
            "setpgid": 109,
            "setsid": 112,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "unshare": 272,
            "perf_event_open": 298,
            "setns": 308,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "bpf": 321,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "clone": 56,
            "clone3": 435,
        },
    ),
    "aarch64": (
        0xC00000B7,
        None,
        {
            "socket": 198,
            "ptrace": 117,
            "setpgid": 154,
            "setsid": 157,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "unshare": 97,
            "perf_event_open": 241,
            "setns": 268,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "bpf": 280,
            "userfaultfd": 282,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "clone": 220,
            "clone3": 435,
        },
    ),
}
_MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}


class _Filter(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def supported() -> bool:
    """Whether this machine's architecture has a filter here."""
    return _machine() in _TABLES


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for `machine` as BPF instructions (code, jump if true, jump if false, constant)."""
    arch, foreign_abi, numbers = _TABLES[machine]
    # Jumps name their target ("allow", "deny", "absent": the three verdicts at the end); None falls through.
    steps: list[tuple[int, str | None, str | None, int]] = [
        (_LOAD_WORD, None, None, _ARCH),
        (_JUMP_EQUAL, None, "deny", arch),
        (_LOAD_WORD, None, None, _NR),
    ]
    if foreign_abi is not None:
        steps.append((_JUMP_AT_LEAST, "deny", None, foreign_abi))
    steps += [(_JUMP_EQUAL, "deny", None, n) for name, n in numbers.items() if name not in ("clone", "clone3")]
    steps += [
        (_JUMP_EQUAL, "absent", None, numbers["clone3"]),
        (_JUMP_EQUAL, None, "allow", numbers["clone"]),
        (_LOAD_WORD, None, None, _ARG0),
        (_JUMP_ANY_BIT, "deny", "allow", _NAMESPACE_FLAGS),
    ]
    verdicts = {"allow": _ALLOW, "deny": _ERRNO | errno.EPERM, "absent": _ERRNO | errno.ENOSYS}
    where = {label: len(steps) + offset for offset, label in enumerate(verdicts)}
    instructions = [
        (code, where[true] - index - 1 if true else 0, where[false] - index - 1 if false else 0, k)
        for index, (code, true, false, k) in enumerate(steps)
    ]
    return instructions + [(_RETURN, 0, 0, verdict) for verdict in verdicts.values()]


def install() -> bool:
    """Apply the filter to this process (and what it starts from now on); False where it cannot be applied."""
    machine = _machine()
    if machine not in _TABLES:
        return False
    instructions = program(machine)
    packed = b"".join(struct.pack("HBBI", *instruction) for instruction in instructions)
    buffer = ctypes.create_string_buffer(packed, len(packed))
    prog = _Filter(len(instructions), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        return False
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) == 0


def _machine() -> str:
    machine = platform.machine().lower()
    return _MACHINES.get(machine, machine)
