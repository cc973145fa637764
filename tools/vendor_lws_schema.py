"""Vendor the LeaderWorkerSet CRD schema for the offline manifest tests.

``python tools/vendor_lws_schema.py CRD.yaml VERSION COMMIT`` reads the CRD
(config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml of
kubernetes-sigs/lws at tag VERSION), drops the ``description`` strings and
writes tests/emit/lws_crd_<VERSION>.json with its source URL, version and commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CRD_PATH = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def main(crd: str, version: str, commit: str) -> int:
    doc = yaml.safe_load(Path(crd).read_text())
    schema = next(v for v in doc["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    out = {"source": f"https://github.com/kubernetes-sigs/lws/blob/{version}/{CRD_PATH}", "version": version,
           "commit": commit, "note": "spec.versions[name=v1].schema.openAPIV3Schema of the LeaderWorkerSet CRD, "
                                     "'description' strings removed (tools/vendor_lws_schema.py)",
           "openAPIV3Schema": _strip(schema)}
    path = REPO / "tests" / "emit" / f"lws_crd_{version}.json"
    path.write_text(json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
