"""The Kubernetes manifests (deploy/): every kustomization renders with kustomize, every object
validates offline against the Kubernetes schemas (kubernetes-validate), the names they refer to
exist, every corral.toml in their ConfigMaps passes `corral check-config` where the pod would
read it, and the pod's shell command gives each node the id and address its config expects.
The Dockerfile copies everything the build reads.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import REPO

DEPLOY = REPO / "deploy"
KUSTOMIZATIONS = ["base", "overlays/single-node", "overlays/three-node", "overlays/in-front-of-kafka", "sidecar"]
# Native sidecars (restartPolicy on an init container) are on by default from 1.29.
K8S_VERSIONS = ["1.29.0", "1.37.0"]
# Custom resources have no schema in kubernetes-validate; each is checked by hand below.
CUSTOM_KINDS = {"ServiceMonitor": "monitoring.coreos.com/v1, Prometheus Operator's CRD"}
# The one name the base refers to and does not define: operators supply the Raft secret.
EXTERNAL = {"base": {("Secret", "corral-cluster-secret")}}


def kustomize_bin() -> list[str]:
    explicit = os.environ.get("KUSTOMIZE")
    if explicit:
        return [explicit]
    found = shutil.which("kustomize")
    if not found and shutil.which("go"):
        gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip()
        candidate = Path(gopath) / "bin" / "kustomize"
        found = str(candidate) if candidate.is_file() else None
    assert found, "kustomize not found: scripts/test.sh installs it (go install sigs.k8s.io/kustomize/kustomize/v5), or set KUSTOMIZE"
    return [found]


_RENDERED: dict[str, list[dict]] = {}


def render(name: str) -> list[dict]:
    if name not in _RENDERED:
        out = subprocess.run([*kustomize_bin(), "build", str(DEPLOY / name)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, f"kustomize build deploy/{name}:\n{out.stderr}"
        _RENDERED[name] = [d for d in yaml.safe_load_all(out.stdout) if d]
    return _RENDERED[name]


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict], kind: str) -> dict:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def test_every_kustomization_is_tested():
    found = sorted(str(p.parent.relative_to(DEPLOY)) for p in DEPLOY.rglob("kustomization.yaml"))
    assert found == sorted(KUSTOMIZATIONS)


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_renders_and_validates_against_the_kubernetes_schemas(name):
    objects = render(name)
    assert objects, f"deploy/{name} rendered nothing"
    errors, custom = [], []
    for obj in objects:
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in CUSTOM_KINDS:
            custom.append(what)
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{what} (Kubernetes {version}): {'.'.join(map(str, e.path))}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                errors.append(f"{what}: {e.message}")
    assert not errors, "\n".join(errors)
    if custom:
        kinds = "; ".join(CUSTOM_KINDS.values())
        print(f"deploy/{name}: no schema for {custom} ({kinds}): checked by test_the_servicemonitor_selects_the_admin_port")


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_name_referred_to_is_rendered(name):
    objects = render(name)
    defined = {(o["kind"], o["metadata"]["name"]) for o in objects}
    wanted = set()
    for w in of_kind(objects, "StatefulSet") + of_kind(objects, "Deployment"):
        for v in pod_spec(w).get("volumes", []):
            if "configMap" in v:
                wanted.add(("ConfigMap", v["configMap"]["name"]))
            if "secret" in v:
                wanted.add(("Secret", v["secret"]["secretName"]))
        if w["kind"] == "StatefulSet":
            wanted.add(("Service", w["spec"]["serviceName"]))
    missing = wanted - defined - EXTERNAL.get(name, set())
    assert not missing, f"deploy/{name} refers to objects it does not render: {sorted(missing)}"
    # Every selector selects the pods.
    pods = [w["spec"]["template"]["metadata"]["labels"] for w in of_kind(objects, "StatefulSet") + of_kind(objects, "Deployment")]
    for o in of_kind(objects, "Service"):
        assert any(o["spec"]["selector"].items() <= p.items() for p in pods), f"Service {o['metadata']['name']} selects no pod"
    for o in of_kind(objects, "PodDisruptionBudget"):
        assert any(o["spec"]["selector"]["matchLabels"].items() <= p.items() for p in pods), "the PodDisruptionBudget selects no pod"


@pytest.mark.parametrize("name,replicas", [("base", 3), ("overlays/three-node", 3), ("overlays/single-node", 1)])
def test_the_statefulset(name, replicas):
    objects = render(name)
    sts = one(objects, "StatefulSet")
    spec = pod_spec(sts)
    assert sts["spec"]["replicas"] == replicas
    headless = next(s for s in of_kind(objects, "Service") if s["metadata"]["name"] == sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    client = next(s for s in of_kind(objects, "Service") if s["spec"].get("clusterIP") != "None")
    assert [p["port"] for p in client["spec"]["ports"]] == [9092]
    (c,) = spec["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"kafka": 9092, "raft": 9094, "admin": 9095}
    assert (c["readinessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["port"]) == ("/health/ready", "admin")
    assert (c["livenessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["port"]) == ("/health/live", "admin")
    assert c["resources"]["requests"] and c["resources"]["limits"]
    # SIGTERM hands Raft leadership over (up to 3 s), then connections get shutdown_grace_ms (10 s).
    assert spec["terminationGracePeriodSeconds"] >= 30
    assert spec["securityContext"]["runAsNonRoot"] is True
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert {m["mountPath"] for m in c["volumeMounts"] if m["name"] == claim["metadata"]["name"]} == {"/var/lib/corral"}
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_the_servicemonitor_selects_the_admin_port():
    objects = render("base")
    sm = one(objects, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    labels = sm["spec"]["selector"]["matchLabels"]
    services = [s for s in of_kind(objects, "Service") if labels.items() <= s["metadata"].get("labels", {}).items()]
    assert [s["metadata"]["name"] for s in services] == ["corral-headless"], "it scrapes every pod, through the headless Service"
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert {p["name"]: p["port"] for p in services[0]["spec"]["ports"]}[endpoint["port"]] == 9095


def shell_argv(container: dict, env: dict) -> list[str]:
    """What the container's command runs, with /bin/sh doing the expansion as in the pod."""
    command = container.get("command", []) + container.get("args", [])
    assert command[:2] == ["/bin/sh", "-c"], command
    script = command[2].replace("exec /usr/local/bin/corral", "exec printf '%s\\n'")
    assert script != command[2], f"the command does not exec corral: {command[2]}"
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, env=env, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("name", ["overlays/three-node", "overlays/single-node"])
def test_each_pod_gets_its_node_id_and_address(name):
    objects = render(name)
    sts = one(objects, "StatefulSet")
    (c,) = pod_spec(sts)["containers"]
    namespace = sts["metadata"]["namespace"]
    config = tomllib.loads(one(objects, "ConfigMap")["data"]["corral.toml"])
    nodes = {n["id"]: n for n in config.get("cluster", {}).get("nodes", [])}
    for ordinal in range(sts["spec"]["replicas"]):
        pod = f"{sts['metadata']['name']}-{ordinal}"
        argv = shell_argv(c, {"HOSTNAME": pod, "POD_NAMESPACE": namespace, "PATH": "/usr/bin:/bin"})
        assert argv[0] == "serve"
        assert flag(argv, "--node-id") == str(ordinal)
        assert (flag(argv, "--listen"), flag(argv, "--admin-listen")) == ("0.0.0.0:9092", "0.0.0.0:9095")
        dns = f"{pod}.{sts['spec']['serviceName']}.{namespace}.svc.cluster.local"
        assert flag(argv, "--advertised") == f"{dns}:9092"
        config_path = flag(argv, "--config")
        assert any(m["mountPath"] == config_path for m in c["volumeMounts"]), f"{config_path} is not mounted"
        if nodes:
            assert nodes[ordinal] == {"id": ordinal, "raft": f"{dns}:9094", "kafka": f"{dns}:9092", "admin": f"{dns}:9095"}
    if nodes:
        assert sorted(nodes) == list(range(sts["spec"]["replicas"])), "one node per pod"
        assert config["cluster"]["raft_listen"] == "0.0.0.0:9094"


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_corral_toml_passes_check_config(name, corral_bin, tmp_path):
    objects = render(name)
    configs = [
        (cm["metadata"]["name"], cm["data"]["corral.toml"]) for cm in of_kind(objects, "ConfigMap") if "corral.toml" in cm.get("data", {})
    ]
    assert configs, f"deploy/{name} has no corral.toml"
    secrets = {s["metadata"]["name"]: s for s in of_kind(objects, "Secret")}
    workloads = of_kind(objects, "StatefulSet") + of_kind(objects, "Deployment")
    for cm_name, text in configs:
        config = tomllib.loads(text)
        secret_file = config.get("cluster", {}).get("secret_file")
        if secret_file:
            # Where the pod mounts the Secret, the test writes its key; the config names that file.
            (pod,) = [
                pod_spec(w) for w in workloads if any(v.get("configMap", {}).get("name") == cm_name for v in pod_spec(w)["volumes"])
            ]
            volumes = {v["name"]: v for v in pod["volumes"]}
            mounts = [m for c in pod["containers"] for m in c["volumeMounts"] if "secret" in volumes.get(m["name"], {})]
            (mount,) = [m for m in mounts if secret_file.startswith(m["mountPath"].rstrip("/") + "/")]
            secret_name = volumes[mount["name"]]["secret"]["secretName"]
            key = secret_file[len(mount["mountPath"].rstrip("/")) + 1 :]
            if secret_name in secrets:
                value = base64.b64decode(secrets[secret_name]["data"][key])
            else:
                assert ("Secret", secret_name) in EXTERNAL.get(name, set()), secret_name
                value = b"a test secret of at least 16 bytes"
            local = tmp_path / "secret" / key
            local.parent.mkdir(exist_ok=True)
            local.write_bytes(value)
            assert text.count(f'"{secret_file}"') == 1
            text = text.replace(f'"{secret_file}"', f'"{local}"')
        path = tmp_path / f"{cm_name}.toml"
        path.write_text(text)
        out = subprocess.run([str(corral_bin), "check-config", str(path)], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"deploy/{name}: ConfigMap {cm_name}: corral check-config:\n{out.stdout}{out.stderr}"


def test_the_sidecar_is_a_native_sidecar_on_localhost():
    objects = render("sidecar")
    spec = pod_spec(one(objects, "Deployment"))
    (sidecar,) = [c for c in spec["initContainers"] if c["name"] == "corral"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/health/ready", "the application starts once corral is ready"
    config = tomllib.loads(one(objects, "ConfigMap")["data"]["corral.toml"])
    assert config["kafka"]["listen"] == "127.0.0.1:9092" and not config.get("cluster", {}).get("nodes")
    assert config["role"] == "sidecar" and config["storage"]["backend"] == "upstream"
    # Its groups go to the corral cluster that is in front of the same Kafka.
    in_front = tomllib.loads((DEPLOY / "overlays/in-front-of-kafka/corral.toml").read_text())
    assert in_front["upstream"]["bootstrap"] == config["upstream"]["bootstrap"]
    assert config["sidecar"]["group_bootstrap"] == [n["kafka"] for n in in_front["cluster"]["nodes"]]
    (app,) = spec["containers"]
    assert {e["name"]: e["value"] for e in app["env"]}["KAFKA_BOOTSTRAP_SERVERS"] == "localhost:9092"


def test_the_dockerfile_copies_what_the_build_reads():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    assert len(stages) == 2, "a build stage and a runtime stage"
    build, runtime = stages
    assert "cargo build --release" in build and "--bin corral" in build
    copied = [src for line in re.findall(r"^COPY (?!--from)(.+)$", build, re.M) for src in shlex.split(line)[:-1]]
    for src in copied:
        assert (REPO / src).exists(), f"COPY {src}: not in the repository"
    # What the build reads: the manifest's paths and every file the sources embed.
    cargo = tomllib.loads((REPO / "Cargo.toml").read_text())
    needed = [cargo["lib"]["path"], *(b["path"] for b in cargo.get("bin", []))]
    needed += [p["path"] for p in cargo.get("patch", {}).get("crates-io", {}).values() if "path" in p]
    if "build" in cargo["package"]:
        needed.append(cargo["package"]["build"])
    for rs in (REPO / "src").rglob("*.rs"):
        for embedded in re.findall(r'include_(?:str|bytes)!\("([^"]+)"\)', rs.read_text()):
            needed.append(str((rs.parent / embedded).resolve().relative_to(REPO)))
    for path in needed:
        assert any(path == src or path.startswith(src.rstrip("/") + "/") for src in copied), (
            f"the build reads {path}; the Dockerfile does not copy it"
        )
    # The build context sends what the build stage copies.
    ignore = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines() if not line.startswith("#")]
    for src in copied:
        assert f"!{src}" in ignore or f"!{src}/" in ignore, f"Dockerfile.dockerignore leaves out {src}"
    user = re.findall(r"^USER (\S+)", runtime, re.M)
    assert user and user[-1].split(":")[0] not in ("root", "0"), "the runtime image runs as a non-root user"
    exposed = {p for line in re.findall(r"^EXPOSE (.+)$", runtime, re.M) for p in line.split()}
    assert exposed == {"9092", "9094", "9095"}
    assert "VOLUME /var/lib/corral" in runtime
