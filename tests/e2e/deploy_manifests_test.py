#!/usr/bin/env python3
"""The deploy recipes parse and say what the README promises: every Kubernetes manifest is valid
YAML with apiVersion/kind, the per-node pods ask the AMD GPU device plugin for one GPU and mount
the reports volume, the merge Job runs `sdpa-doctor merge`. Exit 77 (skip) without PyYAML."""
import pathlib
import sys

try:
    import yaml
except ImportError:
    print("PyYAML is not installed (scripts/setup.sh installs it into .venv); skipping")
    sys.exit(77)

root = pathlib.Path(sys.argv[1])
docs = {}
for path in sorted((root / "deploy" / "k8s").glob("*.yaml")):
    for doc in yaml.safe_load_all(path.read_text()):
        assert doc and "apiVersion" in doc and "kind" in doc, f"{path}: no apiVersion/kind"
        docs[(doc["kind"], doc["metadata"]["name"])] = doc
        print(f"ok {path.name}: {doc['kind']} {doc['metadata']['name']}")


def pod(doc):
    return doc["spec"]["template"]["spec"]


for key in [("Job", "sdpa-doctor"), ("DaemonSet", "sdpa-doctor")]:
    spec = pod(docs[key])
    c = spec["containers"][0]
    assert c["resources"]["limits"]["amd.com/gpu"] == 1, key
    assert any(m["mountPath"] == "/reports" for m in c["volumeMounts"]), key
    assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == "sdpa-doctor-reports", key
    assert "sdpa-doctor check" in " ".join(c["args"]), key
job = docs[("Job", "sdpa-doctor")]
assert job["spec"]["completionMode"] == "Indexed"
merge = pod(docs[("Job", "sdpa-doctor-merge")])["containers"][0]
assert "sdpa-doctor merge" in " ".join(merge["args"])
assert ("PersistentVolumeClaim", "sdpa-doctor-reports") in docs
dockerfile = (root / "deploy" / "Dockerfile").read_text()
assert "rocm/pytorch:latest" in dockerfile and "cmake --build" in dockerfile
print("deploy manifests ok")
