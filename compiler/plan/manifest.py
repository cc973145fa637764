"""The artifact manifest: every file of a plan directory with its size and sha256, checked before anything runs.

``DIR/manifest.json``::

    {"schema_version": 1, "runnable": true, "reason": null,
     "files": {"plan.json": {"bytes": 1234, "sha256": "..."}, "stages/pool0/s0_tp0.py": {...}, ...}}

`write_manifest` hashes every file a run loads (`HASHED`: plan.json, stages, weights, onnx, model, drafts; not the
report, the Kubernetes manifests, ``status.json`` or itself), sorted by path, so equal directories give equal
bytes. `verify_manifest`
re-hashes each listed file and raises `BadInput` naming the first file that is
missing or changed, and the fix; a plan whose generated Python or weights were
edited after compile therefore never executes. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from compiler.ir.errors import BadInput

MANIFEST = "manifest.json"
#: What the manifest covers: what a run loads. The report and the Kubernetes manifests are written beside it, in
#: any order, and are not hashed (a run reads neither).
HASHED = ("plan.json", "stages", "weights", "onnx", "model", "drafts")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(root: Path, *, runnable: bool, reason: str | None) -> dict:
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] in HASHED):
        rel = path.relative_to(root).as_posix()
        files[rel] = {"bytes": path.stat().st_size, "sha256": sha256_of(path)}
    manifest = {"schema_version": 1, "runnable": runnable, "reason": reason, "files": files}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def verify_manifest(root: str | Path) -> dict:
    """Check every listed file's sha256; return the manifest. Raises `BadInput` on any mismatch."""
    root = Path(root)
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        raise BadInput(f"plan {root}: no {MANIFEST}; recompile with `gimletc compile ... --out {root}`") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"plan {root}/{MANIFEST}: not valid JSON ({e.msg}); recompile the plan") from None
    for rel, entry in sorted(manifest.get("files", {}).items()):
        path = root / rel
        if not path.is_file():
            raise BadInput(f"plan {root}: {rel} is listed in {MANIFEST} but missing; recompile the plan")
        if sha256_of(path) != entry["sha256"]:
            raise BadInput(f"plan {root}: {rel} does not match its sha256 in {MANIFEST} (edited after compile?); "
                           f"recompile the plan rather than editing its files")
    return manifest


def verified_text(root: Path, rel: str, manifest: dict) -> str:
    """Read a listed text file, re-checking its hash at the moment of reading (generated code runs from this)."""
    entry = manifest["files"].get(rel)
    if entry is None:
        raise BadInput(f"plan {root}: {rel} is not in {MANIFEST}; recompile the plan")
    data = (root / rel).read_bytes()
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise BadInput(f"plan {root}: {rel} changed since the manifest was checked; recompile the plan")
    return data.decode()
