"""What a sealed candidate worker staged in the build cache, reviewed by the harness (trusted code).

A sealed candidate worker sees the build cache through an overlay (tools/worker/seal.py): it reads every
published entry, and whatever it writes lands in its job's staging folder (`upper`), never in the cache.
Nothing staged there is published: the worker builds nothing itself (its `load_inline` asks the harness's
trusted builder, tools/supervise/builder.py, which alone publishes), so a new entry staged there is the
candidate's own, and is dropped with the staging folder, named in a notice (`Review.rejected`). An
entry the job only used (its last-use time: overlayfs copies the folder up) marks that use on the real
entry, for the cache's LRU order; one it changed (a file written, renamed, chmodded or deleted in it, or
the entry itself deleted or moved), or a change to the cache's own files (its locks, `.objects`, `.pch`),
is `tampered`: dropped with the staging folder, the real entry never saw it, and the judge flags it.
Stdlib only, like tools/cache/builds.py.
"""

from __future__ import annotations

import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tools.cache import builds

DONE_MARKER = "kernel_agent_build.json"  # tools/worker/build.py writes it last into a finished build


@dataclass
class Review:
    """What one job's staging folder held, as the harness judged it."""

    used: list[str] = field(default_factory=list)  # existing entries whose use was marked
    rejected: list[str] = field(default_factory=list)  # "<name>: why" (new entries: never published)
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


NOT_PUBLISHED = "a new entry staged by the candidate's worker (only the harness's builder publishes)"


def review_staged(upper: Path, cache: Path) -> Review:
    """Review a staging folder's `upper` against `cache`: uses marked, changes to existing entries and to the
    cache's own files named as tampering, new entries named as not published. It moves nothing in."""
    done = Review()
    kinds = [
        (upper, cache),
        (upper / builds.OBJECTS, cache / builds.OBJECTS),
        (upper / builds.PCH, cache / builds.PCH),
    ]
    for source, target in kinds:
        if source.is_symlink() or not source.is_dir():
            continue
        for entry in sorted(source.iterdir()):
            if not entry.name.startswith("."):  # .tmp, .objects, .pch, locks, .trash, PCH notes: not entries
                _review_entry(entry, target, done)
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


def _review_entry(entry: Path, target: Path, done: Review) -> None:
    final = target / entry.name
    if final.is_dir() and _is_whiteout(entry):
        done.tampered.append(f"{entry.name}: deleted or moved")
    elif final.is_dir() and not entry.is_symlink() and (changed := _changes(entry, final)):
        done.tampered.append(f"{entry.name}: {', '.join(changed[:4])}" + (" ..." if len(changed) > 4 else ""))
    elif final.is_dir():
        builds.touch(final)
        done.used.append(entry.name)
    else:
        done.rejected.append(f"{entry.name}: {NOT_PUBLISHED}")


def remove_staging(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
