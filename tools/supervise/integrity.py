"""The harness's own files, read once: workers run from that snapshot, and changes on disk are reported.

Every `tools/**/*.py` is read when this module is first imported (with the rest of the harness, before any
candidate runs). Each job writes the snapshot into its own folder and the workers import from there, so
a file changed on disk later (by a candidate that escaped its guards, or anyone) has no effect on what
computes the truth or runs the candidate. The parent compares the disk with the snapshot around every
candidate run: a change while the candidate ran is a disqualifying flag, any other change a notice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parents[1]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Snapshot:
    """Sources of the harness package as read at load time, and the hash of each watched file."""

    sources: dict[str, bytes]
    hashes: dict[Path, str]

    @classmethod
    def take(cls, tools_dir: Path = TOOLS_DIR) -> Snapshot:
        sources = {
            p.relative_to(tools_dir).as_posix(): p.read_bytes()
            for p in sorted(tools_dir.rglob("*.py"))
            if "__pycache__" not in p.parts
        }
        hashes = {tools_dir / name: _digest(data) for name, data in sources.items()}
        return cls(sources, hashes)

    def write_package(self, root: Path) -> Path:
        """`root/tools/**/*.py` from the snapshot; put `root` first on the workers' import path."""
        pkg = root / "tools"
        for name, data in self.sources.items():
            path = pkg / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return root

    def changed(self, extra: dict[Path, str] | None = None) -> list[str]:
        """Watched files whose content on disk differs from the snapshot (missing counts as changed)."""
        out = []
        for path, digest in {**self.hashes, **(extra or {})}.items():
            try:
                raw = path.read_bytes()
            except OSError:
                raw = b""
            # A reference is hashed as the text it was read as (universal newlines): accept either form.
            if digest not in (
                _digest(raw),
                _digest(raw.decode(errors="replace").replace("\r\n", "\n").encode()),
            ):
                out.append(str(path))
        return out


def text_hash(text: str) -> str:
    return _digest(text.encode())


HARNESS = Snapshot.take()
