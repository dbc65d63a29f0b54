"""Checks on rendered Kubernetes manifests that the OpenAPI schemas cannot
express. Run by deploy/check.sh on each kustomize target's output:

    check_manifests.py NAME RENDERED.yaml

Fails (exit 1, every problem listed) unless:

- every Deployment has a PodDisruptionBudget whose selector matches its pods;
- every container and init container requests CPU and memory and has CPU and
  memory limits, requests within limits, and memory limits above the bench's
  largest resident figure (README, Performance: every ithaca process stays
  under 27 MiB under load);
- every Ithaca pod carries the labels the NetworkPolicies admit traffic from;
- every Ithaca service with a database (ITHACA_DATABASE_URL) runs
  `ithaca migrate <service>` as an init container, is ready only through its
  own gRPC health service name (which follows the schema), keeps liveness on
  the server as a whole, and rolls out without taking a pod away first;
- in the otel-collector overlay, every Ithaca container exports to a Service
  of the render that selects the collector's pods, on its OTLP gRPC port.
"""

import sys

import yaml

# Largest resident memory of an ithaca process under the bench's load
# (README, Performance), in MiB; a memory limit must leave room above it.
BENCH_PEAK_MIB = 27

UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}


def mib(quantity):
    text = str(quantity)
    for suffix, factor in UNITS.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text) / (1024 * 1024)


def cores(quantity):
    text = str(quantity)
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    return float(text)


def selects(selector, labels):
    wanted = (selector or {}).get("matchLabels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def env_of(container):
    return {e["name"]: e for e in container.get("env") or []}


def check(name, docs):
    problems = []
    by_kind = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    deployments = by_kind.get("Deployment", [])
    if not deployments:
        problems.append("no Deployment rendered")
    pdbs = by_kind.get("PodDisruptionBudget", [])
    services = by_kind.get("Service", [])

    for d in deployments:
        dname = d["metadata"]["name"]
        spec = d["spec"]
        pod = spec["template"]
        labels = pod["metadata"].get("labels") or {}
        if not any(selects(p["spec"].get("selector"), labels) for p in pdbs):
            problems.append(f"{dname}: no PodDisruptionBudget selects its pods")
        containers = pod["spec"].get("containers") or []
        inits = pod["spec"].get("initContainers") or []
        for c in containers + inits:
            where = f"{dname}/{c['name']}"
            res = c.get("resources") or {}
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            for kind in ("cpu", "memory"):
                if kind not in req:
                    problems.append(f"{where}: no {kind} request")
                if kind not in lim:
                    problems.append(f"{where}: no {kind} limit")
            if "memory" in req and "memory" in lim and mib(req["memory"]) > mib(lim["memory"]):
                problems.append(f"{where}: memory request above its limit")
            if "cpu" in req and "cpu" in lim and cores(req["cpu"]) > cores(lim["cpu"]):
                problems.append(f"{where}: cpu request above its limit")
            if "memory" in lim and mib(lim["memory"]) < 2 * BENCH_PEAK_MIB:
                problems.append(
                    f"{where}: memory limit {lim['memory']} leaves less than 2x the bench's "
                    f"{BENCH_PEAK_MIB} MiB peak"
                )

        main = containers[0] if containers else {}
        args = main.get("args") or []
        is_ithaca = d["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "ithaca"
        if is_ithaca:
            for np in by_kind.get("NetworkPolicy", []):
                for rule in np["spec"].get("ingress") or []:
                    for peer in rule.get("from") or []:
                        sel = peer.get("podSelector")
                        if sel is not None and not selects(sel, labels):
                            problems.append(
                                f"{dname}: its pods lack the labels NetworkPolicy "
                                f"{np['metadata']['name']} admits ({sel}), so they cannot "
                                "reach the services"
                            )
        if is_ithaca and "ITHACA_DATABASE_URL" in env_of(main):
            service = args[1] if len(args) > 1 and args[0] == "serve" else None
            migrate = [i for i in inits if (i.get("args") or [])[:2] == ["migrate", service]]
            if not migrate:
                problems.append(f"{dname}: no init container runs `ithaca migrate {service}`")
            elif "ITHACA_DATABASE_URL" not in env_of(migrate[0]):
                problems.append(f"{dname}: the migrate init container has no ITHACA_DATABASE_URL")
            ready = ((main.get("readinessProbe") or {}).get("grpc") or {}).get("service")
            if not ready:
                problems.append(
                    f"{dname}: readiness must ask the service's own gRPC health name "
                    "(it follows the schema version)"
                )
            live = (main.get("livenessProbe") or {}).get("grpc") or {}
            if live.get("service"):
                problems.append(
                    f"{dname}: liveness must ask the server as a whole (no service name), "
                    "so an old replica leaves rotation instead of restarting"
                )
            rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
            if str(rolling.get("maxUnavailable")) != "0":
                problems.append(f"{dname}: rollingUpdate.maxUnavailable must be 0")

        if name.endswith("otel-collector") and is_ithaca:
            for c in containers:
                endpoint = env_of(c).get("OTEL_EXPORTER_OTLP_ENDPOINT", {}).get("value", "")
                host_port = endpoint.split("://", 1)[-1]
                host, _, port = host_port.partition(":")
                svc = [s for s in services if s["metadata"]["name"] == host]
                if not svc:
                    problems.append(f"{dname}/{c['name']}: exports to {endpoint!r}, no such Service")
                    continue
                sel = svc[0]["spec"].get("selector") or {}
                targets = [
                    x for x in deployments
                    if all((x["spec"]["template"]["metadata"].get("labels") or {}).get(k) == v
                           for k, v in sel.items())
                ]
                ports = [str(p["port"]) for p in svc[0]["spec"].get("ports") or []]
                if not targets or port not in ports:
                    problems.append(f"{dname}/{c['name']}: {endpoint!r} reaches no collector pod")
    if name.endswith("otel-collector") and not any(
        "collector" in d["metadata"]["name"] for d in deployments
    ):
        problems.append("the otel-collector overlay renders no collector Deployment")
    return problems


def main():
    name, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    problems = check(name, docs)
    for p in problems:
        print(f"{name}: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    kinds = sorted({d["kind"] for d in docs})
    print(f"{name}: {len(docs)} resources ({', '.join(kinds)}) pass the policy checks")


if __name__ == "__main__":
    main()
