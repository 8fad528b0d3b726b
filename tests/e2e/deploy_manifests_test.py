#!/usr/bin/env python3
"""The deploy recipes parse and say what the README promises: every Kubernetes manifest is valid
YAML with apiVersion/kind, the per-node pods ask the AMD GPU device plugin for one GPU and mount
the reports volume, the merge Job runs `sdpa-doctor merge`, every container names the image the
Dockerfile's comment builds (this version's tag, never :latest) with a pull policy, and the
Dockerfile needs no GPU and no arch list at build time. Exit 77 (skip) without PyYAML."""
import pathlib
import re
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

# The image: this version's tag, as the Dockerfile's build command tags it, and a pull policy (a
# local image tagged :latest or untagged defaults to Always and fails with ErrImagePull).
cmake_lists = (root / "CMakeLists.txt").read_text()
version = re.search(r"project\(sdpa-doctor VERSION ([0-9.]+)", cmake_lists).group(1)
image = f"sdpa-doctor:{version}"
for (kind, name), doc in docs.items():
    if kind == "PersistentVolumeClaim":
        continue
    for c in pod(doc)["containers"]:
        assert c["image"] == image, f"{kind} {name}: image {c['image']!r}, expected {image!r}"
        assert c.get("imagePullPolicy") == "IfNotPresent", f"{kind} {name}: imagePullPolicy"
print(f"ok every container runs {image} with imagePullPolicy IfNotPresent")

dockerfile = (root / "deploy" / "Dockerfile").read_text()
assert f"-t {image} " in dockerfile, f"the Dockerfile's build command does not tag {image}"
assert "FROM ${BASE}" in dockerfile
# Installed as users install it: a wheel built against the image's torch, pip-installed there.
assert re.search(r"pip wheel --no-build-isolation .* /src", dockerfile), "the Dockerfile builds no wheel"
assert re.search(r"pip install .*\.whl", dockerfile), "the Dockerfile installs no wheel"
# Nothing at build time may need a GPU or name GPU archs: docker build has no GPU.
code = "\n".join(line for line in dockerfile.splitlines() if not line.lstrip().startswith("#"))
for needs_gpu in ["HIP_ARCHITECTURES", "HIP_ARCHS", "GPU_TARGETS", "PYTORCH_ROCM_ARCH",
                  "rocm_agent_enumerator", "cmake_prefix_path", "gfx"]:
    assert needs_gpu not in code, f"the Dockerfile's build needs a GPU or an arch list: {needs_gpu}"
# Nothing of ROCm or torch is chosen at build time by an option either.
for option in ["SDPA_DOCTOR_WITH_HIP", "SDPA_DOCTOR_WITH_ROCM_SMI", "CMAKE_PREFIX_PATH"]:
    assert option not in code, f"the Dockerfile still sets {option}"
# The build context leaves this machine's build trees out: their CMake caches name its paths.
ignored = (root / ".dockerignore").read_text().split()
assert "build*/" in ignored and ".venv" in ignored, ".dockerignore keeps build trees or .venv"
print("ok the Dockerfile builds with no GPU and no arch list")
print("deploy manifests ok")
