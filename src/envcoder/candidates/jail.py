"""The operating system's jail around candidate code (Linux, no root needed).

The validation worker (`envcoder.candidates.sandbox`) starts in new user and network namespaces (`unshare`: no
network at all) with an environment of its own (no credentials), and every candidate file is checked in a fresh
child process that first locks itself in with Landlock (`lock`): it may read only where Python, its packages and
envcoder live (and its sample states), write only in its own temporary folder, make no TCP connection, signal no
process outside its jail, reach no abstract socket and open no Unix socket (a seccomp filter: Landlock leaves
socket files reachable); then its resource limits are set. No-new-privileges makes the lock permanent. The worker
is the first process of a PID namespace of its own, so nothing a child starts outlives it.

Where the kernel lacks Landlock or `unshare` is refused, the jail is weaker and says so (`Jail.weaker`): the
worker then relies on its empty environment, resource limits and the static checks of `envcoder.candidates.policy`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same numbers on every Linux architecture
_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights (ABI 1: bits 0-12; 2: refer; 3: truncate; 5: ioctl on devices).
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | (1 << 14) | (1 << 15)  # the rights a rule on a file may hold
_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect (ABI 4)
_SCOPES = (1 << 0) | (1 << 1)  # abstract unix sockets, signals (ABI 6)

READABLE_FILES = ("/dev/null", "/dev/urandom", "/dev/random", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat",
                  "/etc/ld.so.cache", "/etc/localtime")
"""Single files a candidate's process may read (besides Python and the folders of `readable_folders`)."""
READABLE_FOLDERS = ("/proc/self", "/sys/devices/system/cpu", "/sys/fs/cgroup", "/usr/lib", "/lib", "/lib64",
                    "/usr/lib64", "/usr/share/zoneinfo")
"""System folders it may read: its own /proc entry (resolved when the lock is made), the CPU's description that
XLA reads, and the system's shared libraries."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.lru_cache(maxsize=None)
def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(abi), 0)


@functools.lru_cache(maxsize=None)
def unshare_command() -> tuple[str, ...]:
    """The command prefix that starts a process in new user, network, mount and PID namespaces (the process is the
    first of its PID namespace: whatever it or its children start, a daemon too, dies with it; what it mounts only it
    sees), or () where that is refused."""
    tool = shutil.which("unshare")
    if tool is None:
        return ()
    pid = ("--pid", "--fork", "--kill-child")
    for extra in (("--mount", *pid), pid, ()):  # without a mount or a PID namespace where it is refused
        for mapping in ("--map-current-user", "--map-root-user"):
            command = (tool, "--user", mapping, "--net", *extra, "--")
            try:
                if subprocess.run(command + ("true",), capture_output=True, timeout=10).returncode == 0:
                    return command
            except (OSError, subprocess.TimeoutExpired):
                pass
    return ()


@dataclasses.dataclass(frozen=True)
class Jail:
    """What the jail of this machine holds."""

    namespaces: bool
    landlock: int
    pid_namespace: bool = True
    mount_namespace: bool = True

    @classmethod
    def here(cls) -> "Jail":
        command = unshare_command()
        return cls(bool(command), landlock_abi(), "--pid" in command, "--mount" in command)

    @property
    def weaker(self) -> str | None:
        """None for the full jail, else what is missing, in words."""
        missing = ([] if self.namespaces else ["no user/network/PID namespaces (unshare refused): the worker can "
                                                "reach the network, and a process a candidate starts can outlive it"])
        if self.namespaces and not self.pid_namespace:
            missing.append("no PID namespace (unshare --pid refused): a process a candidate starts can outlive the "
                           "worker")
        if self.namespaces and not self.mount_namespace:
            missing.append("no mount namespace (unshare --mount refused): a candidate's scratch folder has no size "
                           "limit but the one on each file")
        if not unix_sockets_deniable():
            missing.append(f"no filter of Unix sockets on {os.uname().machine}: a candidate's process can connect to "
                           "a socket file it can reach")
        if self.landlock == 0:
            missing.append("no Landlock in this kernel: the worker can read and write whatever this user can")
        elif self.landlock < 4:
            missing.append(f"Landlock ABI {self.landlock} (< 4) cannot refuse TCP connections")
        return "; ".join(missing) or None


SCRATCH_BYTES = 256 * 2**20
"""The size of the private temporary folder in which a candidate's process may write (a tmpfs of the worker's mount
namespace): 8 files of 63 MiB filled the disk's temporary folder before."""


def mount_scratch(folder: str, size: int = SCRATCH_BYTES) -> bool:
    """In the worker, in its own mount namespace: a tmpfs of `size` bytes on `folder` (the candidates' scratch
    folder), which only this namespace sees. False where it cannot be mounted (no mount namespace)."""
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"size={size},mode=0700".encode()
    return libc.mount(b"tmpfs", folder.encode(), b"tmpfs", 0, options) == 0


def readable_folders(extra: tuple[str, ...] = ()) -> list[str]:
    """Where Python, its packages and envcoder live, plus `extra`: the folders a jailed process may read."""
    here = Path(__file__).resolve().parents[2]  # the folder that holds the envcoder package
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(here), *READABLE_FOLDERS, *extra}
    folders |= {p for p in sys.path if p and os.path.isdir(p) and os.path.abspath(p) != os.getcwd()}
    return sorted(f for f in folders if os.path.exists(f))


def lock(writable: str, readable: tuple[str, ...] = ()) -> int:
    """Lock this process (and its future children) in: read only `readable_folders(readable)` and
    `READABLE_FILES`, write only beneath `writable`, no TCP, no signals or abstract sockets outside. Returns the
    Landlock ABI used (0: none available, nothing locked)."""
    abi = landlock_abi()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if abi == 0:
        return 0
    fs = _FS_BY_ABI.get(abi, _FS_BY_ABI[5])
    attr = _RulesetAttr(fs, _NET_TCP if abi >= 4 else 0, _SCOPES if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        read = _EXECUTE | _READ_FILE | _READ_DIR
        for path in readable_folders(readable):
            _allow(libc, ruleset, path, read)
        for path in READABLE_FILES:
            if os.path.exists(path):
                _allow(libc, ruleset, path, _READ_FILE)
        _allow(libc, ruleset, writable, fs)
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    deny_unix_sockets(libc)
    return abi


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


_SOCKET_CALL = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
"""Per machine: the seccomp audit architecture and the number of the `socket` system call."""


def unix_sockets_deniable() -> bool:
    """Whether `deny_unix_sockets` has a filter for this machine's architecture."""
    return sys.platform.startswith("linux") and os.uname().machine in _SOCKET_CALL


def deny_unix_sockets(libc=None) -> bool:
    """Refuse new Unix-domain sockets to this thread and the processes it starts (a seccomp filter: `socket(AF_UNIX,
    ...)` fails with EACCES). Landlock does not cover connecting to a socket file: an ssh-agent's, docker's or
    dbus's would be reachable. Needs no-new-privileges (`lock` sets it); False where this architecture has no
    filter here."""
    if not unix_sockets_deniable():
        return False
    libc = libc or ctypes.CDLL(None, use_errno=True)
    arch, socket_call = _SOCKET_CALL[os.uname().machine]
    load, jump_equal, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    allow, refuse = 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EACCES
    program = (_SockFilter * 8)(
        _SockFilter(load, 0, 0, 4),                  # the architecture
        _SockFilter(jump_equal, 0, 5, arch),
        _SockFilter(load, 0, 0, 0),                  # the system call's number
        _SockFilter(jump_equal, 0, 3, socket_call),
        _SockFilter(load, 0, 0, 16),                 # its first argument: the address family
        _SockFilter(jump_equal, 0, 1, 1),            # AF_UNIX
        _SockFilter(ret, 0, 0, refuse),
        _SockFilter(ret, 0, 0, allow))
    fprog = _SockFprog(len(program), program)
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
    return True


def _allow(libc, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            access &= _FILE_RIGHTS
        rule = _PathBeneathAttr(access, fd)
        if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                        ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)
