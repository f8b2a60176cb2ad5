"""Builds a sealed worker staged, published into the build cache by the harness (trusted code).

A sealed candidate worker sees the build cache through an overlay (tools/worker/seal.py): it reads every
published entry, and whatever it writes lands in its job's staging folder (`upper`), never in the cache.
After the worker is gone, `publish_staged` moves each new, well-formed entry from there into the cache by
one rename: an extension build (`<name>-<key>/` with its done marker naming the same key), a compiled object
or a precompiled header (`.objects/<key>/`, `.pch/<key>/`: it links the real header; the header builder's
small notes beside it go too). What cannot be an entry — a symlink, a device
node (overlayfs's whiteouts: the worker's own evictions), a loose file, a folder the cache has already —
is left behind and removed with the staging folder. An entry the job only used (its pin, its last-use time:
overlayfs copies the folder up) marks that use on the real entry, for the cache's LRU order; one it changed
(a file written, renamed, chmodded or deleted in it, or the entry itself deleted or moved) is `tampered`:
the change is dropped with the staging folder, the real entry never saw it, and the judge flags it.

What this cannot check is that a staged binary is what its recorded sources compile to: the worker built
it. A candidate can stage, under its own key or another's, a binary of its choosing; whoever later loads
that key runs it, and is judged on what it runs (docs/exploits.md, "Build cache").
Stdlib only, like tools/cache/builds.py.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tools.cache import builds

DONE_MARKER = "kernel_agent_build.json"  # tools/worker/build.py writes it last into a finished build
PCH_MARKERS = (".seen-", ".failed-")  # tools/worker/ccshim.py: a flag set's first sighting, a failed build
MARKER_MAX_BYTES = 8192


@dataclass
class Published:
    """What one job's staging folder gave the cache."""

    entries: list[str] = field(default_factory=list)
    used: list[str] = field(default_factory=list)  # existing entries whose use was marked
    rejected: list[str] = field(default_factory=list)  # "<name>: why"
    removed: list[str] = field(default_factory=list)  # precompiled headers found unusable
    tampered: list[str] = field(default_factory=list)  # "<entry>: what the worker changed" (all dropped)


def _is_whiteout(path: Path) -> bool:
    """overlayfs's mark of a lower file or folder the worker deleted or moved away: a 0/0 character device."""
    st = path.lstat()
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _changes(staged: Path, real: Path) -> list[str]:
    """What a worker changed in an existing cache entry, as its overlay copied it up: every file but its pin
    (opening the pin copies it up), a deletion or move (a whiteout), or the folder's own permissions."""
    changed = ["(permissions)"] if staged.lstat().st_mode != real.lstat().st_mode else []
    for path in sorted(staged.rglob("*")):
        rel = path.relative_to(staged)
        if str(rel) == builds.PIN or path.is_dir() and not path.is_symlink():
            continue
        changed.append(f"{rel} (deleted or moved)" if _is_whiteout(path) else str(rel))
    return changed


def _only_plain_files(folder: Path, links_out: bool = False) -> str:
    """Empty where `folder` holds only folders and regular files (and, with `links_out`, symlinks to
    regular files outside it: a precompiled header's entry links the real header), else what else it holds."""
    for path in folder.rglob("*"):
        mode = path.lstat().st_mode
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            continue
        if links_out and stat.S_ISLNK(mode):
            target = path.resolve()
            if target.is_file() and not target.is_relative_to(folder.resolve()):
                continue
        return f"{path.relative_to(folder)} is not a plain file"
    return ""


def _why_not_a_build(entry: Path) -> str:
    marker = entry / DONE_MARKER
    if not marker.is_file():
        return "no done marker (an unfinished build)"
    try:
        key = json.loads(marker.read_text()).get("key")
    except (OSError, ValueError, AttributeError):
        return "unreadable done marker"
    if not key or not entry.name.endswith(f"-{key}"):
        return f"its done marker names another key ({key!r})"
    return ""


def _why_not(entry: Path, kind: str) -> str:
    if entry.is_symlink() or not entry.is_dir():
        return "not a folder"
    if why := _only_plain_files(entry, links_out=kind == "pch"):
        return why
    return _why_not_a_build(entry) if kind == "build" else ""


def publish_staged(upper: Path, cache: Path) -> Published:
    """Move every new well-formed entry from a staging folder's `upper` into `cache`."""
    done = Published()
    kinds = [(upper, cache, "build"), (upper / builds.OBJECTS, cache / builds.OBJECTS, "object")]
    kinds.append((upper / builds.PCH, cache / builds.PCH, "pch"))
    for source, target, kind in kinds:
        if source.is_symlink() or not source.is_dir():
            continue
        for entry in sorted(source.iterdir()):
            if kind == "pch" and entry.name.startswith(PCH_MARKERS):
                _publish_marker(entry, target / entry.name, cache, done)
            elif not entry.name.startswith("."):  # .tmp, .objects, .pch, locks, .trash: not entries
                _publish_entry(entry, target, kind, done)
    done.tampered += _changed_cache_files(upper, cache)
    return done


def _changed_cache_files(upper: Path, cache: Path) -> list[str]:
    """The cache's own files and folders beside its entries (its locks, `.objects`, `.pch`) that the worker
    deleted, moved, chmodded or wrote into. Opening a lock copies it up unchanged: that is no change."""
    changed = []
    for staged in sorted(upper.glob(".*")) if upper.is_dir() else []:
        real = cache / staged.name
        if not real.exists() or real.is_symlink() or staged.is_symlink():
            continue
        if _is_whiteout(staged):
            changed.append(f"{staged.name}: deleted or moved")
        elif staged.lstat().st_mode != real.lstat().st_mode:
            changed.append(f"{staged.name}: (permissions)")
        elif real.is_file() and staged.read_bytes() != real.read_bytes():
            changed.append(f"{staged.name}: written")
    return changed


def _publish_entry(entry: Path, target: Path, kind: str, done: Published) -> None:
    final = target / entry.name
    if final.is_dir() and _is_whiteout(entry):
        done.tampered.append(f"{entry.name}: deleted or moved")
    elif final.is_dir() and not entry.is_symlink() and (changed := _changes(entry, final)):
        done.tampered.append(f"{entry.name}: {', '.join(changed[:4])}" + (" ..." if len(changed) > 4 else ""))
    elif final.is_dir():
        builds.touch(final)
        done.used.append(entry.name)
    elif why := _why_not(entry, kind):
        done.rejected.append(f"{entry.name}: {why}")
    else:
        target.mkdir(parents=True, exist_ok=True)
        (entry / builds.PIN).unlink(missing_ok=True)  # the worker's pin file: the cache makes its own
        if builds.publish(entry, final):
            done.entries.append(entry.name)


def _publish_marker(marker: Path, final: Path, cache: Path, done: Published) -> None:
    """A precompiled header's notes (seen once, failed to build): small plain files, the first one stays.
    A header gcc found unusable is removed here: the worker could not delete it from under its overlay."""
    if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > MARKER_MAX_BYTES:
        return
    if not final.exists():
        with contextlib.suppress(OSError):
            final.parent.mkdir(parents=True, exist_ok=True)
            marker.rename(final)
    unusable = final.with_name(marker.name.removeprefix(".failed-"))
    if marker.name.startswith(".failed-") and unusable.is_dir() and builds.remove(unusable, cache):
        done.removed.append(unusable.name)


def remove_staging(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
