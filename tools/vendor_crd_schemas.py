"""Vendor a published CRD schema for the offline manifest tests.

``python tools/vendor_crd_schemas.py CRD.yaml NAME VERSION_NAME SOURCE_URL COMMIT`` reads the
CustomResourceDefinition in CRD.yaml (the file at SOURCE_URL, a GitHub blob URL at COMMIT), takes
spec.versions[name=VERSION_NAME].schema.openAPIV3Schema, drops the ``description`` strings and
writes tests/emit/crds/<NAME>.json with its source URL, commit, CRD version, group and kind.
``tools/vendor_lws_schema.py`` is the LeaderWorkerSet case of it, kept for its file name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "tests" / "emit" / "crds"


def strip_descriptions(value):
    """``value`` without its ``description`` strings (a property named ``description`` stays)."""
    if isinstance(value, dict):
        return {k: strip_descriptions(v) for k, v in value.items()
                if not (k == "description" and isinstance(v, str))}
    if isinstance(value, list):
        return [strip_descriptions(v) for v in value]
    return value


def load_crd(path: str | Path) -> dict:
    """The CustomResourceDefinition document of a (possibly multi-document) YAML file."""
    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if isinstance(d, dict)]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    if len(crds) != 1:
        raise SystemExit(f"{path}: expected one CustomResourceDefinition, found {len(crds)}")
    return crds[0]


def version_schema(crd: dict, version_name: str) -> dict:
    """spec.versions[name=version_name].schema.openAPIV3Schema, descriptions removed."""
    versions = crd["spec"]["versions"]
    for version in versions:
        if version["name"] == version_name:
            return strip_descriptions(version["schema"]["openAPIV3Schema"])
    raise SystemExit(f"no version {version_name!r} in the CRD; it has {[v['name'] for v in versions]}")


def write_json(path: Path, obj: dict) -> None:
    """Sorted keys, compact separators and a trailing newline, so a re-run gives the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {path}")


def main(crd_path: str, name: str, version_name: str, source: str, commit: str) -> int:
    crd = load_crd(crd_path)
    kind = crd["spec"]["names"]["kind"]
    out = {"source": source, "commit": commit, "version": version_name, "group": crd["spec"]["group"],
           "kind": kind, "openAPIV3Schema": version_schema(crd, version_name),
           "note": f"spec.versions[name={version_name}].schema.openAPIV3Schema of the {kind} CRD, "
                   "'description' strings removed (tools/vendor_crd_schemas.py)"}
    write_json(OUT_DIR / f"{name}.json", out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 6:
        raise SystemExit(__doc__)
    sys.exit(main(*sys.argv[1:6]))
