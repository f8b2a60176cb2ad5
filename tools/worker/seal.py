"""The candidate worker's filesystem, sealed before any candidate code runs: every mount read-only except
the job's own folder and the build cache seen through an overlay whose writes land in the job's staging
folder; a /dev that holds only what a kernel needs (null, zero, random, the GPU's nodes, an empty /dev/shm);
and the folders that hold other jobs (the warm pool's jobs and prepared jobs, /dev/shm, the cache's staging)
covered, so that only its own job (and the harness it imports) is there: what candidates evaluated at once
could read of one another's (docs/containment.md).

Runs in a mount namespace of the worker's own whose propagation is private (the zygote's children and
`unshare --mount-proc` both make one), as root or with CAP_SYS_ADMIN there, before the capabilities go:
nothing here reaches the host's mount table (a mount marked `shared:` stops it before it changes
anything). The harness publishes what the overlay's upper folder holds into the real cache afterwards, as
trusted code (tools/cache/staged.py). Each step the machine refuses is skipped, named on stderr, and seen
missing by the harness in /proc (tools/supervise/isolation.py): never a silent pass.

Stdlib only: the cold path runs this file as a script between `unshare` and `setpriv`:

  python3 seal.py SPEC_JSON -- COMMAND...      (seals, then execs COMMAND)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 1 << 14
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
MS_MOVE = 8192
MNT_DETACH = 2
_PER_MOUNT_FLAGS = {
    "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME,
}  # fmt: skip
# What stays under /dev: character devices a torch process or a CUDA kernel opens, and the GPU's nodes.
DEVICE_NAMES = ("null", "zero", "full", "random", "urandom")
GPU_PREFIX = "nvidia"
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
# Mounts that stay as they are: the worker's own /proc (its PID namespace's), and what the seal made writable;
# but the host-wide knobs under it are read-only (as container runtimes do).
KEEP = ("/proc",)
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger")
PUBLISHED_ENV = "KERNEL_AGENT_PUBLISHED_CACHE"  # a candidate worker's view of the real cache (`published`)


@dataclass(frozen=True)
class SealSpec:
    """What the worker may write: `writable` folders, and `cache` through an overlay onto `upper`."""

    writable: list[str] = field(default_factory=list)
    cache: str = ""
    upper: str = ""
    overlay_work: str = ""  # overlayfs's own scratch folder, beside `upper` on the same filesystem
    hide_devices: bool = True
    published: str = ""  # where the real cache is shown too, read-only (what the trusted builder publishes)
    hidden: list[str] = field(default_factory=list)  # folders covered by an empty read-only mount
    # Folders that hold other jobs (the pool's jobs and prepared jobs, /dev/shm): each covered by an empty
    # read-only tmpfs into which only the `keep` paths under it are bound back (its own job, its harness).
    private: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> SealSpec:
        return cls(**json.loads(raw))

    def writable_paths(self) -> list[str]:
        """Where a sealed worker may write (its /dev/shm aside): the harness checks the worker's mounts
        against these."""
        return [*self.writable, *([self.cache] if self.cache else [])]


def writable_mounts(mounts: list[Mount], spec: SealSpec) -> list[str]:
    """The mounts a sealed worker could write that the seal does not allow (the harness reads the worker's
    mountinfo): only its writable folders, the cache through an overlay onto its staging and its own /proc
    (the host-wide knobs under it read-only)."""
    allowed = [*spec.writable, *KEEP]
    wrong = []
    for m in visible(mounts):
        if "ro" in m.options or under(m.target, allowed) and not under(m.target, list(PROC_READ_ONLY)):
            continue
        if (
            spec.cache
            and m.target == spec.cache
            and m.fstype == "overlay"
            and f"upperdir={spec.upper}," in f"{m.super_options},"
        ):
            continue
        wrong.append(m.target)
    return wrong


def private_view(spec: SealSpec, root: str = "") -> list[str]:
    """What a sealed worker sees in its private folders beyond the paths kept there (`root`: the worker's root
    as the harness reaches it, `/proc/PID/root`). Empty where only its own job (and harness) is visible."""
    extras: list[str] = []
    for folder in spec.private:
        kept = [k for k in spec.keep if under(k, [folder]) and k != folder]
        extras += _extras(root, folder, kept)
    return extras


def _extras(root: str, folder: str, kept: list[str]) -> list[str]:
    try:
        names = [p.name for p in Path(root + folder).iterdir()]
    except FileNotFoundError:  # nothing there to see
        return []
    except OSError as exc:
        return [f"{folder} ({exc.strerror})"]
    toward: dict[str, list[str]] = {}
    for path in kept:
        toward.setdefault(path[len(folder.rstrip("/")) + 1 :].split("/")[0], []).append(path)
    extras = []
    for name in sorted(names):
        inner = f"{folder.rstrip('/')}/{name}"
        if name not in toward:
            extras.append(inner)
        elif inner not in toward[name]:  # a folder on the way to a kept path: only that path in it
            extras += _extras(root, inner, toward[name])
    return extras


def private_uncovered(mounts: list[Mount], spec: SealSpec, root: str = "") -> list[str]:
    """The private folders a worker can reach whose contents no read-only tmpfs of a private folder covers
    (the deepest mount holding each is that tmpfs: its own, or one over a private folder above it)."""
    seen = visible(mounts)
    wrong = []
    for folder in spec.private:
        if not Path(root + folder).is_dir():
            continue
        holders = [m for m in seen if under(folder, [m.target])]
        deepest = max(holders, key=lambda m: len(m.target.rstrip("/")), default=None)
        if deepest is None or deepest.fstype != "tmpfs" or "ro" not in deepest.options:
            wrong.append(folder)
        elif deepest.target not in spec.private:
            wrong.append(folder)
    return wrong


def unexpected_devices(names: list[str]) -> list[str]:
    """What a sealed worker's /dev holds beyond the allowlist."""
    allowed = {*DEVICE_NAMES, *DEV_LINKS, "shm"}
    return sorted(n for n in names if n not in allowed and not n.startswith(GPU_PREFIX))


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return libc


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()  # ctypes passes None as NULL


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc().mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _umount(target: str) -> None:
    ctypes.CDLL(None, use_errno=True).umount2(target.encode(), MNT_DETACH)


@dataclass(frozen=True)
class Mount:
    id: int
    parent: int
    target: str
    options: list[str]  # per-mount options (ro/rw, nosuid, ...)
    optional: str  # the optional fields: `shared:N` means propagation to other namespaces
    fstype: str = ""
    super_options: str = ""  # the filesystem's own (an overlay's lowerdir, upperdir, ...)


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        path = path.replace(code, chr(int(code[1:], 8)))
    return path


def read_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[Mount]:
    found = []
    with open(mountinfo) as fh:
        for line in fh:
            fields = line.split()
            sep = fields.index("-")
            ids, target, opts, optional = (
                (int(fields[0]), int(fields[1])),
                _unescape(fields[4]),
                fields[5],
                fields[6:sep],
            )
            tail = [*fields[sep + 1 :], "", "", ""]
            found.append(
                Mount(*ids, target, opts.split(","), " ".join(optional), tail[0], _unescape(tail[2]))
            )
    return found


def visible(mounts: list[Mount]) -> list[Mount]:
    """The mounts a path can reach: not covered by a mount stacked on the same place, nor by one a sibling
    mount made over a folder above it (a private folder's tmpfs over what was mounted inside that folder),
    nor under one that is."""
    by_id = {m.id: m for m in mounts}
    covered = {m.parent for m in mounts if m.parent in by_id and by_id[m.parent].target == m.target}
    siblings: dict[int, list[Mount]] = {}
    for m in mounts:
        siblings.setdefault(m.parent, []).append(m)
    shadowed = {
        m.id
        for group in siblings.values()
        for m in group
        if any(d.target != m.target and under(m.target, [d.target]) for d in group)
    }

    def reachable(m: Mount, depth: int = 0) -> bool:
        if m.id in covered or m.id in shadowed:
            return False
        up = by_id.get(m.parent)
        while up is not None and up.target == m.target and up.id != up.parent:  # stacked: what it sits on
            up = by_id.get(up.parent)
        return up is None or up.id == m.id or depth > 64 or reachable(up, depth + 1)

    return [m for m in mounts if reachable(m)]


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _check_private() -> None:
    shared = [m.target for m in read_mounts() if "shared:" in m.optional]
    if shared:
        raise OSError(0, f"mounts propagate to other namespaces ({shared[0]}): sealing would reach the host")


def _overlay_cache(spec: SealSpec) -> None:
    if spec.published:  # first, while the path still leads to the real cache; read-only below
        _mount(spec.cache, spec.published, None, MS_BIND)
    opts = f"lowerdir={spec.cache},upperdir={spec.upper},workdir={spec.overlay_work}"
    _mount("overlay", spec.cache, "overlay", 0, opts)


def _device_nodes() -> list[tuple[str, int, int]]:
    """(path under /dev, mode, rdev) of every node that stays, read before /dev is covered."""
    dev = Path("/dev")
    candidates = [dev / name for name in DEVICE_NAMES] + sorted(dev.glob(f"{GPU_PREFIX}*"))
    candidates += sorted(p for d in dev.glob(f"{GPU_PREFIX}*/") if d.is_dir() for p in d.iterdir())
    nodes = []
    for path in candidates:
        with contextlib.suppress(OSError):
            st = path.lstat()
            if stat.S_ISCHR(st.st_mode):
                nodes.append((str(path.relative_to(dev)), st.st_mode, st.st_rdev))
    return nodes


def _hide_devices(scratch: Path) -> None:
    """A /dev of its own: a tmpfs made on `scratch`, the kept nodes made again in it, the machine's /dev/shm
    bound into it (the harness's warm jobs may live there: covered next as a private folder, but for its own
    job), then moved onto /dev."""
    nodes = _device_nodes()
    scratch.mkdir(parents=True, exist_ok=True)
    _mount("tmpfs", str(scratch), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=64k")
    try:
        for rel, mode, rdev in nodes:
            (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
            os.mknod(scratch / rel, mode, rdev)
        for name, target in DEV_LINKS.items():
            (scratch / name).symlink_to(target)
        if Path("/dev/shm").is_dir():
            (scratch / "shm").mkdir(0o1777)
            _mount("/dev/shm", str(scratch / "shm"), None, MS_BIND | MS_REC)
        _mount(str(scratch), "/dev", None, MS_MOVE)
    except OSError:
        _umount(str(scratch))  # the machine's /dev stays rather than a /dev without null
        raise


def _outermost(paths: list[str]) -> list[str]:
    return [p for p in paths if not any(q != p and under(p, [q]) for q in paths)]


def _private_folders(spec: SealSpec) -> list[str]:
    """Each private folder covered by an empty tmpfs, the kept paths under it bound back: first those outside
    every kept path, then those inside one (its own job's truth folder). Returns the ones that refused."""
    folders = [f for f in spec.private if Path(f).is_dir() and f not in spec.keep]
    inside = [f for f in folders if under(f, spec.keep)]
    refused = []
    for folder in _outermost([f for f in folders if f not in inside]) + _outermost(inside):
        try:
            _cover(folder, [k for k in spec.keep if under(k, [folder]) and k != folder])
        except OSError as exc:
            refused.append(f"{folder}: {exc.strerror}")
    return refused


def _cover(folder: str, keep: list[str]) -> None:
    """An empty tmpfs over `folder`, `keep` bound back into it (through file descriptors opened before the
    cover: their paths no longer lead anywhere), then the tmpfs made read-only."""
    fds = [(path, os.open(path, os.O_PATH)) for path in _outermost([k for k in keep if Path(k).exists()])]
    try:
        _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=64k")
        for path, fd in fds:
            if Path(f"/proc/self/fd/{fd}").is_dir():
                Path(path).mkdir(parents=True)
            else:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).touch()
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        _mount(None, folder, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    finally:
        for _, fd in fds:
            os.close(fd)


def _hide(spec: SealSpec) -> list[str]:
    """An empty read-only tmpfs over each hidden folder; returns the ones that refused (and why)."""
    refused = []
    for path in spec.hidden:
        if not Path(path).is_dir():
            continue
        try:
            _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=555,size=4k")
        except OSError as exc:
            refused.append(f"hiding {path}: {exc.strerror}")
    return refused


def _bind_writable(spec: SealSpec) -> None:
    for path in spec.writable:
        _mount(path, path, None, MS_BIND | MS_REC)


def _remount_read_only(spec: SealSpec) -> list[str]:
    """Every mount but the kept ones read-only; returns the ones that refused (and why)."""
    keep = [*KEEP, *spec.writable_paths()]
    refused = []
    for path in PROC_READ_ONLY:
        if not Path(path).exists():
            continue
        try:
            _mount(path, path, None, MS_BIND)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except OSError as exc:
            refused.append(f"{path}: {exc.strerror}")
    for m in visible(read_mounts()):
        if under(m.target, keep) or "ro" in m.options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for opt in m.options:
            flags |= _PER_MOUNT_FLAGS.get(opt, 0)
        try:
            _mount(None, m.target, None, flags)
        except OSError as exc:
            refused.append(f"{m.target}: {exc.strerror}")
    return refused


def seal(spec: SealSpec) -> dict[str, str]:
    """Seal this process's filesystem. For each guard ("mounts", "cache", "devices", "jobs"): "" where it
    took, else why not."""
    why = {"mounts": "", "cache": "", "devices": "", "jobs": ""}
    cwd = Path.cwd()
    try:
        _check_private()
    except OSError as exc:
        return {k: exc.strerror or str(exc) for k in why}
    if spec.cache:
        try:
            _overlay_cache(spec)
        except OSError as exc:  # the cache stays writable, and the result says so
            why["cache"] = f"overlay refused: {exc.strerror}"
            spec = SealSpec(
                [*spec.writable, spec.cache],
                hide_devices=spec.hide_devices,
                hidden=spec.hidden,
                private=spec.private,
                keep=spec.keep,
            )
    if spec.hide_devices and spec.overlay_work:
        try:
            _hide_devices(Path(spec.overlay_work).parent / "dev")
        except OSError as exc:
            why["devices"] = f"{exc.filename or '/dev'}: {exc.strerror}"
    elif spec.hide_devices:
        why["devices"] = "no staging folder to build /dev in"
    why["jobs"] = "; ".join(_private_folders(spec))  # after /dev is made: /dev/shm is one of them
    try:
        refused = _hide(spec)
        _bind_writable(spec)
        refused += _remount_read_only(spec)
        why["mounts"] = "; ".join(refused[:3]) + (f" (+{len(refused) - 3})" if len(refused) > 3 else "")
    except OSError as exc:
        why["mounts"] = exc.strerror or str(exc)
    try:  # a working dir bound onto itself: the path now leads to the writable mount
        os.chdir(cwd)
    except OSError:  # one now covered (the zygote's home): no handle on what was there
        os.chdir("/")
    return why


def report(why: dict[str, str]) -> None:
    for guard, reason in why.items():
        if reason:
            print(f"kernel-agent seal: {guard} not sealed: {reason}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
    """`seal.py SPEC_JSON -- COMMAND...`: seal, then exec COMMAND (the cold path)."""
    sep = argv.index("--")
    report(seal(SealSpec.from_json(argv[1])))
    os.execvp(argv[sep + 1], argv[sep + 1 :])


if __name__ == "__main__":
    main(sys.argv)
