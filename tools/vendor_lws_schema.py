"""Vendor the LeaderWorkerSet CRD schema for the offline manifest tests.

``python tools/vendor_lws_schema.py CRD.yaml VERSION COMMIT`` reads the CRD
(config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml of
kubernetes-sigs/lws at tag VERSION), drops the ``description`` strings and
writes tests/emit/lws_crd_<VERSION>.json with its source URL, version and commit.
It is the LeaderWorkerSet case of tools/vendor_crd_schemas.py, kept for the
file name and keys tests/emit/test_k8s_manifests.py reads.
"""

from __future__ import annotations

import sys

from vendor_crd_schemas import REPO, load_crd, version_schema, write_json

CRD_PATH = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"


def main(crd: str, version: str, commit: str) -> int:
    out = {"source": f"https://github.com/kubernetes-sigs/lws/blob/{version}/{CRD_PATH}", "version": version,
           "commit": commit, "note": "spec.versions[name=v1].schema.openAPIV3Schema of the LeaderWorkerSet CRD, "
                                     "'description' strings removed (tools/vendor_lws_schema.py)",
           "openAPIV3Schema": version_schema(load_crd(crd), "v1")}
    write_json(REPO / "tests" / "emit" / f"lws_crd_{version}.json", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
