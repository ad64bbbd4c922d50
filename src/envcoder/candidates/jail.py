"""The operating system's jail around candidate code (Linux, no root needed).

The validation worker (`envcoder.candidates.sandbox`) starts in new user and network namespaces (`unshare`: no
network at all) with an environment of its own (no credentials), and every candidate file is checked in a fresh
child process that first locks itself in (`lock`): where this process is root, it becomes a uid that owns nothing of
the host (`drop_privileges`: the worker's namespaces map it to `JAILED_HOST_ID`, `start_jailed`); with Landlock it
may read only where Python, its packages and envcoder live (and its sample states), write only in its own temporary
folder, make no TCP connection, signal no process outside its jail and reach no abstract socket; a seccomp filter
refuses what Landlock does not cover (`filter_system_calls`: other architectures' system calls, io_uring, sockets
but IP's, changes to files' modes, owners, times and attributes, namespaces, mounts, ptrace); then its resource
limits are set. No-new-privileges makes the lock permanent. The worker is the first process of a PID namespace of its
own, and kills whatever a file's child left running when its check ends (`end_descendants`).

Where the kernel lacks Landlock or `unshare` is refused, the jail is weaker and says so (`Jail.weaker`): the
worker then relies on its empty environment, resource limits and the static checks of `envcoder.candidates.policy`.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

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


JAILED_ID = 1
"""The user and group id, in the worker's namespaces, that a candidate's process takes (`drop_privileges`) where the
worker maps one (`start_jailed`: this process is root): mapped to `JAILED_HOST_ID`, it owns nothing of the host, so
that no host file is its to chmod, chown, touch or label, and no capability of the namespace applies to host files
but reading (`CAP_DAC_READ_SEARCH`: the Python and caches of a root user live in folders only root may read)."""
JAILED_HOST_ID = 2_147_483_646
"""The host's uid and gid behind `JAILED_ID`: the last below 2^31, which no distribution allocates."""
_WAIT_FOR_MAPS = ("/bin/sh", "-c", 'read -r _ && exec "$0" "$@"')
"""What runs first inside the namespaces where this process maps the ids itself: it waits for the line that says the
maps are written, then becomes the worker (an `exec` after the maps: a process that execs unmapped loses the
namespace's capabilities, and the worker could mount nothing)."""


@functools.lru_cache(maxsize=None)
def unshare_command() -> tuple[str, ...]:
    """The command prefix that starts a process in new user, network, mount and PID namespaces (the process is the
    first of its PID namespace: whatever it or its children start, a daemon too, dies with it; what it mounts only it
    sees), or () where that is refused. Where this process is root and may write the id maps itself, the prefix maps
    root and `JAILED_ID` (`maps_jailed_id`) and must be started with `start_jailed`."""
    tool = shutil.which("unshare")
    if tool is None:
        return ()
    pid = ("--pid", "--fork", "--kill-child")
    for extra in (("--mount", *pid), pid, ()):  # without a mount or a PID namespace where it is refused
        if os.geteuid() == 0 and os.path.exists(_WAIT_FOR_MAPS[0]):
            command = (tool, "--user", "--net", *extra, "--", *_WAIT_FOR_MAPS)
            if _probe(command, mapped=True):
                return command
        for mapping in ("--map-current-user", "--map-root-user"):
            command = (tool, "--user", mapping, "--net", *extra, "--")
            if _probe(command, mapped=False):
                return command
    return ()


def maps_jailed_id() -> bool:
    """Whether the workers' namespaces map `JAILED_ID` to `JAILED_HOST_ID`, so that a candidate's process runs as a
    uid that owns nothing of the host (this process is root); else it runs as this process's own user."""
    return unshare_command()[-len(_WAIT_FOR_MAPS):] == _WAIT_FOR_MAPS


def _probe(command: tuple[str, ...], mapped: bool) -> bool:
    try:
        proc = (start_jailed(command, ["cat", "/proc/self/uid_map"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                if mapped else subprocess.Popen([*command, "cat", "/proc/self/uid_map"], stdout=subprocess.PIPE,
                                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL))
        out, _ = proc.communicate(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and (not mapped or len(out.split(b"\n")) > 2)


def start_jailed(command: Sequence[str], argv: Sequence[str], **popen) -> subprocess.Popen:
    """Start `argv` behind the namespaces' `command` (`unshare_command()`), writing the id maps first where the
    command leaves them to this process: root as root (the worker, trusted), `JAILED_ID` as `JAILED_HOST_ID` (a
    candidate's process). The started process's standard input then begins with one line of ours."""
    if command[-len(_WAIT_FOR_MAPS):] != tuple(_WAIT_FOR_MAPS):
        return subprocess.Popen([*command, *argv], **popen)
    popen["stdin"] = subprocess.PIPE
    proc = subprocess.Popen([*command, *argv], **popen)
    try:
        mine, deadline = os.readlink("/proc/self/ns/user"), time.monotonic() + 10
        while os.readlink(f"/proc/{proc.pid}/ns/user") == mine:  # until `unshare` has made the namespaces
            if time.monotonic() > deadline or proc.poll() is not None:
                raise OSError(f"{command[0]} made no user namespace")
            time.sleep(0.001)
        for kind in ("uid", "gid"):
            Path(f"/proc/{proc.pid}/{kind}_map").write_text(f"0 0 1\n{JAILED_ID} {JAILED_HOST_ID} 1\n")
        proc.stdin.write(b"mapped\n")
        proc.stdin.flush()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


_CAP_DAC_READ_SEARCH = 2
_PR_SET_KEEPCAPS = 8


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(jailed_id: int = JAILED_ID) -> None:
    """In a candidate's process, as root of the worker's namespaces: become `jailed_id` (no supplementary groups), a
    uid that owns nothing of the host, keeping only the capability to read what Landlock lets it read."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS) failed")
    os.setgroups([])
    os.setresgid(jailed_id, jailed_id, jailed_id)
    os.setresuid(jailed_id, jailed_id, jailed_id)
    data = (_CapData * 2)(_CapData(1 << _CAP_DAC_READ_SEARCH, 1 << _CAP_DAC_READ_SEARCH, 0), _CapData(0, 0, 0))
    if libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data) != 0:  # _LINUX_CAPABILITY_VERSION_3
        raise OSError(ctypes.get_errno(), "capset failed")
    libc.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0)


@dataclasses.dataclass(frozen=True)
class Jail:
    """What the jail of this machine holds."""

    namespaces: bool
    landlock: int
    pid_namespace: bool = True
    mount_namespace: bool = True
    own_uid: bool = True
    """A candidate's process runs as a uid that is not host root (`maps_jailed_id`, or this user is not root)."""

    @classmethod
    def here(cls) -> "Jail":
        command = unshare_command()
        return cls(bool(command), landlock_abi(), "--pid" in command, "--mount" in command,
                   os.geteuid() != 0 or maps_jailed_id())

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
        if not self.own_uid:
            missing.append("the id maps cannot be written: a candidate's process runs as root's uid (its system "
                           "calls that change files' owners, modes, times and attributes are refused)")
        if not system_calls_filterable():
            missing.append(f"no system-call filter on {os.uname().machine}: a candidate's process can connect to "
                           "a socket file it can reach, and change the modes of files it owns")
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


def end_descendants() -> None:
    """In the worker, after a candidate's process ended: kill whatever it left behind (a daemon double-forked out of
    its process group lived through all of training before, 349 MB). The worker is the first process of its PID
    namespace, where `kill(-1)` reaches every other process of the namespace; elsewhere, those reparented to it
    (`PR_SET_CHILD_SUBREAPER`, set the first time) and their children."""
    import signal

    if os.getpid() == 1:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
    else:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: what a candidate's process orphans comes to us
        todo = [os.getpid()]
        while todo:
            pid = todo.pop()
            try:
                children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                            for c in (task / "children").read_text().split()]
            except OSError:
                continue
            for child in children:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(child, signal.SIGKILL)
            todo += children
    with contextlib.suppress(ChildProcessError):  # each of them killed: reaped (the worker has no other child now)
        while True:
            os.waitpid(-1, 0)


def readable_folders(extra: tuple[str, ...] = ()) -> list[str]:
    """Where Python, its packages and envcoder live, plus `extra`: the folders a jailed process may read."""
    here = Path(__file__).resolve().parents[2]  # the folder that holds the envcoder package
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(here), *READABLE_FOLDERS, *extra}
    folders |= {p for p in sys.path if p and os.path.isdir(p) and os.path.abspath(p) != os.getcwd()}
    return sorted(f for f in folders if os.path.exists(f))


def lock(writable: str, readable: tuple[str, ...] = (), jailed_id: int | None = None) -> int:
    """Lock this process (and its future children) in: as `jailed_id` where given (`drop_privileges`), read only
    `readable_folders(readable)` and `READABLE_FILES`, write only beneath `writable`, no TCP, no signals or abstract
    sockets outside, and the system calls `filter_system_calls` refuses. Returns the Landlock ABI used (0: none
    available, nothing locked but the ids and the filter)."""
    if jailed_id is not None:
        drop_privileges(jailed_id)
    abi = landlock_abi()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if abi:
        _restrict(libc, abi, writable, readable)
    filter_system_calls(libc)
    return abi


def _restrict(libc, abi: int, writable: str, readable: tuple[str, ...]) -> None:
    """Landlock's part of `lock`."""
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


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
"""Per machine: the seccomp audit architecture of its native system calls (any other is refused: a 32-bit
`int 0x80` reached `socket` unfiltered before)."""
_CALLS = {  # name: (number on x86_64, on aarch64), None where the architecture lacks the call
    "socket": (41, 198), "clone": (56, 220), "clone3": (435, 435),
    # what changes a file's owner, mode, times or attributes: Landlock does not cover these
    "chmod": (90, None), "fchmod": (91, 52), "fchmodat": (268, 53), "fchmodat2": (452, 452), "chown": (92, None),
    "fchown": (93, 55), "lchown": (94, None), "fchownat": (260, 54), "utime": (132, None), "utimes": (235, None),
    "futimesat": (261, None), "utimensat": (280, 88), "setxattr": (188, 5), "lsetxattr": (189, 6),
    "fsetxattr": (190, 7), "removexattr": (197, 14), "lremovexattr": (198, 15), "fremovexattr": (199, 16),
    "setxattrat": (463, 463), "removexattrat": (466, 466),
    # io_uring runs system calls that seccomp never sees (its socket operation made a Unix socket)
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    # other processes, the kernel's own programs and keys, namespaces and mounts, modules, handles past Landlock
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "pidfd_getfd": (438, 438),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282), "keyctl": (250, 219),
    "add_key": (248, 217), "request_key": (249, 218), "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40),
    "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51), "open_tree": (428, 428),
    "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
    "fspick": (433, 433), "mount_setattr": (442, 442), "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106), "swapon": (167, 224),
    "swapoff": (168, 225), "reboot": (169, 142), "quotactl": (179, 60), "acct": (163, 89),
}
REFUSED_CALLS = tuple(name for name in _CALLS if name not in ("socket", "clone", "clone3"))
"""The system calls a candidate's process may not make at all (EPERM)."""
SOCKET_FAMILIES = (2, 10, 16)
"""The socket families it may open: AF_INET, AF_INET6 (its network namespace holds only `lo`, and Landlock refuses
TCP) and AF_NETLINK; Unix (a socket file outside, an ssh-agent's or docker's), packet, vsock and every other family
are refused (EACCES)."""
_NEW_NAMESPACES = 0x7E020080
"""clone()'s flags that make namespaces (NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME)."""


def system_calls_filterable() -> bool:
    """Whether `filter_system_calls` has a filter for this machine's architecture."""
    return sys.platform.startswith("linux") and os.uname().machine in _AUDIT_ARCH


def _filter_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The seccomp BPF program of `filter_system_calls` for `machine`, as (code, jt, jf, k) rows."""
    load, equal, at_least, any_bit = 0x20, 0x15, 0x35, 0x45  # BPF_LD|W|ABS; BPF_JMP|JEQ, |JGE, |JSET (BPF_K)
    ret, allow = 0x06, 0x7FFF0000  # BPF_RET|BPF_K, SECCOMP_RET_ALLOW
    errno = 0x00050000  # SECCOMP_RET_ERRNO | the error number
    column = 0 if machine == "x86_64" else 1
    number = {name: numbers[column] for name, numbers in _CALLS.items() if numbers[column] is not None}
    # Rows jump to labels resolved below: "allow", "eperm", "eacces", "enosys".
    rows: list = [(load, 0, 0, 4), (equal, None, "eperm", _AUDIT_ARCH[machine]), (load, 0, 0, 0)]
    if machine == "x86_64":
        rows.append((at_least, "eperm", None, 0x40000000))  # the x32 calls
    rows += [(equal, "eperm", None, number[name]) for name in REFUSED_CALLS if name in number]
    rows.append((equal, "enosys", None, number["clone3"]))  # its flags are out of reach: C libraries fall back to clone
    rows += [(equal, None, "socket?", number["clone"]), (load, 0, 0, 16), (any_bit, "eperm", "allow", _NEW_NAMESPACES)]
    rows += ["socket?", (equal, None, "allow", number["socket"]), (load, 0, 0, 16)]
    rows += [(equal, "allow", None, family) for family in SOCKET_FAMILIES]
    rows += [(ret, 0, 0, errno | 13), "allow", (ret, 0, 0, allow), "eperm", (ret, 0, 0, errno | 1),
             "enosys", (ret, 0, 0, errno | 38)]
    labels, program = {}, []
    for row in rows:
        if isinstance(row, str):
            labels[row] = len(program)
        else:
            program.append(row)
    resolved = []
    for i, (code, jt, jf, k) in enumerate(program):
        resolved.append((code, *(labels[j] - i - 1 if isinstance(j, str) else 0 if j is None else j
                                 for j in (jt, jf)), k))
    return resolved


def filter_system_calls(libc=None) -> bool:
    """Refuse to this thread and the processes it starts (a seccomp filter): every system call of another
    architecture than the machine's own (and x86-64's x32 calls), `REFUSED_CALLS`, clone with new namespaces, and
    sockets of families other than `SOCKET_FAMILIES`. Landlock covers neither Unix socket files, nor modes, owners,
    times and attributes of files, nor io_uring. Needs no-new-privileges (`lock` sets it); False where this
    architecture has no filter here."""
    if not system_calls_filterable():
        return False
    libc = libc or ctypes.CDLL(None, use_errno=True)
    rows = _filter_program(os.uname().machine)
    program = (_SockFilter * len(rows))(*(_SockFilter(*row) for row in rows))
    fprog = _SockFprog(len(rows), program)
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
