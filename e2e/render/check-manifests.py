#!/usr/bin/python3
"""check-manifests.py -- render the Helm chart and every kustomize overlay and
check that they install the same driver and that every reference resolves.

Renders (each one is a "case"):
  chart            helm template of charts/kegfs-csi (release kegfs-csi in
                   kegfs-system, with a Secret) -- the reference
  chart-kind       the chart with e2e/kind/values-ci.yaml, plus
                   manifests/overlays/ci/redis.yaml as `kubectl apply -n` adds it
  base             kubectl kustomize manifests/base
  overlay-<name>   kubectl kustomize of every manifests/overlays/<name>
                   (dev gets its secret.env from secret.env.example)

Checks:
  same-objects     the driver's objects (label app.kubernetes.io/name=kegfs-csi,
                   without Namespace and Secret) have the same kinds, names and
                   namespaces as the chart's
  same-images      the sidecar images equal the chart's; base uses the chart's
                   driver image; one driver image per render
  namespaces       every namespaced object lands in a namespace the install
                   creates (a Namespace object, or the Helm release namespace)
  references       service accounts of pods and role bindings, role refs,
                   the Secret every StorageClass names, the Service a Secret's
                   metaurl names (*.svc), volumes of every volumeMount, and for
                   a `file` store: its directory mounted in the controller and
                   the node plugin
  self-test        the checks find the known mistakes when they are put back
                   (a Service without namespace, a file store without hostPath)

Needs kubectl (kustomize); helm for the chart.  Looks in $PATH, then in
$KEG_K8S_BIN.  Without kubectl: exit 77.  Without helm: the overlays are
checked against the base, then exit 77 if they pass ("chart not rendered").
Last line: "N passed, M failed".
"""
import base64
import copy
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NS = "kegfs-system"
RELEASE = "kegfs-csi"
NAME_LABEL = "app.kubernetes.io/name"

CLUSTER_KINDS = {"Namespace", "ClusterRole", "ClusterRoleBinding", "StorageClass",
                 "CSIDriver", "PersistentVolume", "PriorityClass"}
POD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}

passed = 0
failed = 0


def report(ok, name, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("PASS %s" % name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, detail))


def find_tool(name):
    p = shutil.which(name)
    if p:
        return p
    d = os.environ.get("KEG_K8S_BIN")
    if d and os.access(os.path.join(d, name), os.X_OK):
        return os.path.join(d, name)
    return None


def run(cmd, cwd=None):
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return r.stdout


def load(text, default_ns=None):
    """YAML stream -> list of objects; namespaced objects without a namespace
    get default_ns (what `kubectl apply -n` or `helm -n` does)."""
    objs = []
    for o in yaml.safe_load_all(text):
        if not o:
            continue
        if o.get("kind") == "List":
            objs.extend(o.get("items") or [])
            continue
        objs.append(o)
    for o in objs:
        md = o.setdefault("metadata", {})
        if o.get("kind") not in CLUSTER_KINDS and not md.get("namespace") and default_ns:
            md["namespace"] = default_ns
    return objs


def key(o):
    md = o.get("metadata", {})
    return (o.get("kind"), md.get("name"), md.get("namespace") or "")


def pod_spec(o):
    if o.get("kind") == "Pod":
        return o.get("spec") or {}
    if o.get("kind") in POD_KINDS:
        return ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
    return None


def containers(o):
    ps = pod_spec(o)
    if ps is None:
        return []
    return (ps.get("initContainers") or []) + (ps.get("containers") or [])


def driver_objects(objs):
    return [o for o in objs
            if ((o.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL) == "kegfs-csi"
            and o.get("kind") not in ("Namespace", "Secret")]


def images(objs):
    """(driver images, other images) of the driver's workloads (the kegfs-csi and
    holder containers run the driver image)."""
    drv, other = set(), set()
    for o in driver_objects(objs):
        for c in containers(o):
            (drv if c.get("name") in ("kegfs-csi", "holder") else other).add(c.get("image"))
    return drv, other


def secret_data(o):
    out = {}
    for k, v in (o.get("data") or {}).items():
        out[k] = base64.b64decode(v).decode()
    for k, v in (o.get("stringData") or {}).items():
        out[k] = str(v)
    return out


def check_namespaces(objs, created_ns):
    errs = []
    have = set(created_ns)
    have |= {o["metadata"]["name"] for o in objs if o.get("kind") == "Namespace"}
    for o in objs:
        k, n, ns = key(o)
        if k in CLUSTER_KINDS:
            if ns:
                errs.append("%s/%s is cluster-scoped but has namespace %s" % (k, n, ns))
            continue
        if not ns:
            errs.append("%s/%s has no namespace (it would land in the user's current one)" % (k, n))
        elif ns not in have:
            errs.append("%s/%s is in namespace %s, which the install does not create" % (k, n, ns))
    return errs


def check_references(objs):
    errs = []
    by_key = {key(o) for o in objs}

    def exists(kind, name, ns=""):
        return (kind, name, ns) in by_key

    for o in objs:
        k, n, ns = key(o)
        ps = pod_spec(o)
        if ps is not None:
            sa = ps.get("serviceAccountName")
            if sa and not exists("ServiceAccount", sa, ns):
                errs.append("%s/%s runs as ServiceAccount %s/%s, which is not defined" % (k, n, ns, sa))
            vols = {v.get("name") for v in ps.get("volumes") or []}
            for c in containers(o):
                for m in c.get("volumeMounts") or []:
                    if m.get("name") not in vols:
                        errs.append("%s/%s container %s mounts volume %s, which is not defined"
                                    % (k, n, c.get("name"), m.get("name")))
                errs += registrar_probe_errors(k, n, c)
        if k in ("RoleBinding", "ClusterRoleBinding"):
            ref = o.get("roleRef") or {}
            rk = ref.get("kind")
            if not exists(rk, ref.get("name"), ns if rk == "Role" else ""):
                errs.append("%s/%s refers to %s %s, which is not defined" % (k, n, rk, ref.get("name")))
            for s in o.get("subjects") or []:
                if s.get("kind") == "ServiceAccount" and not exists("ServiceAccount", s.get("name"),
                                                                      s.get("namespace") or ns):
                    errs.append("%s/%s binds ServiceAccount %s/%s, which is not defined"
                                % (k, n, s.get("namespace") or ns, s.get("name")))
        if k == "StorageClass":
            params = o.get("parameters") or {}
            for what in ("provisioner", "controller-expand", "node-publish"):
                sn = params.get("csi.storage.k8s.io/%s-secret-name" % what)
                sns = params.get("csi.storage.k8s.io/%s-secret-namespace" % what)
                if sn is None:
                    errs.append("StorageClass/%s names no %s Secret" % (n, what))
                elif not exists("Secret", sn, sns or ""):
                    errs.append("StorageClass/%s: %s Secret %s/%s is not defined" % (n, what, sns, sn))
        if k == "Secret" and o.get("metadata", {}).get("name"):
            d = secret_data(o)
            url = d.get("metaurl", "")
            host = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1].rsplit(":", 1)[0]
            if host.endswith(".svc") or host.endswith(".svc.cluster.local"):
                parts = host.split(".")
                if len(parts) < 3 or not exists("Service", parts[0], parts[1]):
                    errs.append("Secret %s/%s: metaurl names Service %s, which is not defined"
                                % (ns, n, host))
            if d.get("storage") == "file":
                errs.extend(check_file_store(objs, d.get("bucket", ""), "Secret %s/%s" % (ns, n)))
    return errs


def check_file_store(objs, bucket, who):
    """A file bucket must be a host directory mounted at the same path in the
    kegfs-csi container of the controller and of the node plugin."""
    errs = []
    if not bucket.startswith("/"):
        return ["%s: file bucket %r is not an absolute directory" % (who, bucket)]
    for o in driver_objects(objs):
        ps = pod_spec(o)
        if ps is None:
            continue
        vols = {v.get("name"): v for v in ps.get("volumes") or []}
        for c in containers(o):
            if c.get("name") != "kegfs-csi":
                continue
            ok = False
            for m in c.get("volumeMounts") or []:
                v = vols.get(m.get("name")) or {}
                if m.get("mountPath") == bucket and "hostPath" in v:
                    ok = True
            if not ok:
                errs.append("%s: file bucket %s is not a hostPath mounted in %s/%s (CreateVolume "
                            "and NodePublish would not find it)" % (who, bucket, o["kind"],
                                                                    o["metadata"]["name"]))
    return errs


def registrar_probe_errors(k, n, c):
    """node-driver-registrar's kubelet-registration-probe checks the file
    `registration` next to --kubelet-registration-path, which the registrar
    creates in its own file system after kubelet registered it: with a
    read-only root that directory must be a writable mount, else the probe
    fails forever and kubelet restarts the registrar every minute."""
    probe = ((c.get("livenessProbe") or {}).get("exec") or {}).get("command") or []
    if "--mode=kubelet-registration-probe" not in probe:
        return []
    env = {e.get("name"): e.get("value") for e in c.get("env") or [] if "value" in e}
    path = ""
    for a in probe:
        if a.startswith("--kubelet-registration-path="):
            path = a.split("=", 1)[1]
    for name, val in env.items():
        path = path.replace("$(%s)" % name, val or "")
    d = path.rsplit("/", 1)[0]
    if any(m.get("mountPath") == d and not m.get("readOnly") for m in c.get("volumeMounts") or []):
        return []
    if not (c.get("securityContext") or {}).get("readOnlyRootFilesystem"):
        return []
    return ["%s/%s container %s: its liveness probe looks for %s/registration, but %s is not a "
            "writable mount and the root file system is read-only" % (k, n, c.get("name"), d, d)]


def render_chart(helm, extra_args):
    out = run([helm, "template", RELEASE, os.path.join(REPO, "charts", "kegfs-csi"),
               "--namespace", NS] + extra_args)
    return load(out, NS)


def render_kustomize(kubectl, path):
    return load(run([kubectl, "kustomize", path]))


def compare(name, ref_objs, objs, same_driver_image):
    ref = {key(o) for o in driver_objects(ref_objs)}
    got = {key(o) for o in driver_objects(objs)}
    report(ref == got, "%s: same-objects" % name,
           "missing %s; extra %s" % (sorted(ref - got), sorted(got - ref)))
    rd, ro = images(ref_objs)
    gd, go = images(objs)
    problems = []
    if ro != go:
        problems.append("sidecar images %s, chart has %s" % (sorted(go), sorted(ro)))
    if len(gd) != 1:
        problems.append("driver images %s (one expected)" % sorted(gd))
    if same_driver_image and gd != rd:
        problems.append("driver image %s, chart has %s" % (sorted(gd), sorted(rd)))
    report(not problems, "%s: same-images" % name, "; ".join(problems))


def check_install(name, objs, created_ns):
    errs = check_namespaces(objs, created_ns)
    report(not errs, "%s: namespaces" % name, "; ".join(errs))
    errs = check_references(objs)
    report(not errs, "%s: references" % name, "; ".join(errs))


def self_test(ci_objs):
    """Put the two known mistakes back and make sure they are found."""
    broken = copy.deepcopy(ci_objs)
    for o in broken:
        if o.get("kind") in ("Service", "Deployment") and o["metadata"].get("name") == "kegfs-redis":
            o["metadata"].pop("namespace", None)
    errs = check_namespaces(broken, []) + check_references(broken)
    report(any("kegfs-redis" in e for e in errs), "self-test: Redis Service without namespace found",
           "no error reported")
    broken = copy.deepcopy(ci_objs)
    for o in broken:
        ps = pod_spec(o)
        if ps is None:
            continue
        ps["volumes"] = [v for v in ps.get("volumes") or [] if v.get("name") != "data"]
        for c in containers(o):
            c["volumeMounts"] = [m for m in c.get("volumeMounts") or [] if m.get("name") != "data"]
    errs = check_references(broken)
    report(any("file bucket" in e for e in errs), "self-test: file store without hostPath found",
           "no error reported")


def check_metrics(objs):
    """metrics.enabled: both kegfs-csi containers serve --metrics on a named port that a
    Service of their component selects, and a ServiceMonitor scrapes it."""
    for comp in ("controller", "node"):
        work = [o for o in driver_objects(objs) if o.get("kind") in ("Deployment", "DaemonSet")
                and ((o.get("metadata") or {}).get("labels") or {})
                .get("app.kubernetes.io/component") == comp]
        cs = [c for o in work for c in containers(o) if c.get("name") == "kegfs-csi"]
        ok = bool(cs) and all(any(a.startswith("--metrics=") for a in c.get("args", [])) and
                              any(p.get("name") == "metrics" for p in c.get("ports", []))
                              for c in cs)
        report(ok, "chart-metrics: %s serves --metrics on a named port" % comp)
        svcs = [o for o in objs if o.get("kind") == "Service" and
                ((o.get("spec") or {}).get("selector") or {}).get("app.kubernetes.io/component")
                == comp and any(p.get("targetPort") == "metrics"
                                for p in (o.get("spec") or {}).get("ports", []))]
        report(bool(svcs), "chart-metrics: a Service selects the %s's metrics port" % comp)
        mons = [o for o in objs if o.get("kind") == "ServiceMonitor" and
                (((o.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})
                .get("app.kubernetes.io/component") == comp]
        report(bool(mons), "chart-metrics: a ServiceMonitor scrapes the %s" % comp)


def main():
    kubectl = find_tool("kubectl")
    helm = find_tool("helm")
    if not kubectl:
        print("SKIP: kubectl not found in PATH or $KEG_K8S_BIN (needed for kubectl kustomize)")
        return 77

    tmp = tempfile.mkdtemp(prefix="kegfs-render.")
    try:
        # kustomize only loads files below the kustomization root: copy the
        # tree so dev can get its secret.env from the example.
        mdir = os.path.join(tmp, "manifests")
        shutil.copytree(os.path.join(REPO, "manifests"), mdir)
        dev = os.path.join(mdir, "overlays", "dev")
        if os.path.exists(os.path.join(dev, "secret.env.example")):
            shutil.copy(os.path.join(dev, "secret.env.example"), os.path.join(dev, "secret.env"))

        renders = {}
        renders["base"] = render_kustomize(kubectl, os.path.join(mdir, "base"))
        overlays = sorted(os.listdir(os.path.join(mdir, "overlays")))
        for ov in overlays:
            try:
                renders["overlay-" + ov] = render_kustomize(kubectl, os.path.join(mdir, "overlays", ov))
                report(True, "overlay-%s: renders" % ov)
            except RuntimeError as e:
                report(False, "overlay-%s: renders" % ov, str(e))

        if helm:
            chart = render_chart(helm, [
                "--set", "secret.create=true", "--set", "secret.metaurl=redis://redis.example:6379/1",
                "--set", "secret.bucket=https://s3.example.com/kegfs",
                "--set", "secret.accessKey=AK", "--set", "secret.secretKey=SK"])
            report(True, "chart: renders")
            kind = render_chart(helm, ["-f", os.path.join(REPO, "e2e", "kind", "values-ci.yaml")])
            with open(os.path.join(REPO, "manifests", "overlays", "ci", "redis.yaml")) as f:
                kind += load(f.read(), NS)
            report(True, "chart-kind: renders")
            metrics = render_chart(helm, [
                "--set", "secret.create=true", "--set", "secret.metaurl=redis://r:6379/1",
                "--set", "secret.bucket=https://s3.example.com/kegfs",
                "--set", "metrics.enabled=true", "--set", "metrics.serviceMonitor.enabled=true"])
            check_metrics(metrics)
            check_install("chart", chart, [NS])
            check_install("chart-kind", kind, [NS])
            compare("chart-kind", chart, kind, False)
            reference = chart
        else:
            reference = renders["base"]

        if helm:
            compare("base", reference, renders["base"], True)
        for ov in overlays:
            name = "overlay-" + ov
            if name not in renders:
                continue
            compare(name, reference, renders[name], False)
            check_install(name, renders[name], [])
        if "overlay-ci" in renders:
            self_test(renders["overlay-ci"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("%d passed, %d failed" % (passed, failed))
    if failed:
        return 1
    if not helm:
        print("SKIP: helm not found in PATH or $KEG_K8S_BIN: the chart was not rendered "
              "(overlays were checked against the base)")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
