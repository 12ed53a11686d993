#!/usr/bin/env bash
# Validates deploy/kubernetes/ as far as can be done without a cluster:
#   1. `kubectl kustomize` renders it (what `kubectl apply -k` would send),
#      and renders it again with both optional components on
#      (components/tls, components/service-monitor) through an overlay made
#      for the check outside this directory (kustomize refuses an overlay
#      inside its base); 2 and 3 check both renderings;
#   2. kubernetes-validate --strict checks every object against the
#      Kubernetes API schemas (an unknown field or a wrong type fails). It
#      has no schema for the ServiceMonitor (the Prometheus Operator's CRD):
#      that one object is rendered, not checked;
#   3. checkov's Kubernetes policies all pass, but those skipped with a reason:
#      in the manifests (checkov.io/skipN annotations beside the object) and
#      the one below.
#   4. agent.toml and master.toml pass `sonde --check-config` (the debug
#      binary, or $SONDE_BIN), as each role.
# `./dev manifests` runs it with both tools from a virtual environment.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rendered="$(mktemp --suffix=.yaml)"
overlay="$(mktemp -d)"
trap 'rm -f "$rendered"; rm -rf "$overlay"' EXIT
base="$(realpath --relative-to="$overlay" "$here")"
cat >"$overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $base
components:
  - $base/components/tls
  - $base/components/service-monitor
EOF

for variant in default with-components; do
    if [ "$variant" = default ]; then
        kubectl kustomize "$here" >"$rendered"
    else
        kubectl kustomize "$overlay" >"$rendered"
    fi
    out="$(kubernetes-validate --strict --quiet "$rendered" 2>&1)" \
        || { echo "$out" >&2; echo "kubernetes-validate refused the $variant rendering" >&2; exit 1; }
    printf '%s\n' "$out" | grep -v "Couldn't find schema for kind ServiceMonitor" | grep . || true
    all="$(grep -c '^kind:' "$rendered")"
    crd="$(grep -c '^kind: ServiceMonitor$' "$rendered" || true)"
    echo "kubernetes-validate ($variant): $((all - crd)) objects valid, $crd ServiceMonitor rendered only"
    # CKV2_K8S_6 (a pod without a NetworkPolicy): the agents run in the nodes'
    # network (hostNetwork), where a NetworkPolicy does not apply; every request
    # to an agent needs its token. (A graph check: the annotation on the pod
    # template does not reach it, so it is skipped here.)
    checkov -f "$rendered" --framework kubernetes --compact --quiet --skip-download --skip-check CKV2_K8S_6
done

sonde="${SONDE_BIN:-$here/../../target/debug/sonde}"
if [ -x "$sonde" ]; then
    data="$(mktemp -d)"
    # The token files the Secret would mount, somewhere that exists here.
    echo check >"$data/api-token"
    echo check >"$data/cluster-token"
    for role in agent master; do
        SONDE_API__TOKEN_FILE="$data/api-token" SONDE_CLUSTER__TOKEN_FILE="$data/cluster-token" \
            "$sonde" --config "$here/$role.toml" --role "$role" --data-dir "$data" --check-config >/dev/null \
            || { rm -rf "$data"; echo "deploy/kubernetes/$role.toml does not pass --check-config" >&2; exit 1; }
    done
    echo "sonde --check-config: agent.toml and master.toml valid"
    # components/tls sets these variables: with a throwaway certificate in
    # place of the Secret's files, each role must still pass.
    if command -v openssl >/dev/null 2>&1; then
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
            -subj /CN=sonde-master.sonde.svc -addext subjectAltName=DNS:sonde-master.sonde.svc \
            -keyout "$data/tls.key" -out "$data/tls.crt" 2>/dev/null
        tokens=(SONDE_API__TOKEN_FILE="$data/api-token" SONDE_CLUSTER__TOKEN_FILE="$data/cluster-token")
        # A variable that names no setting is only a warning to sonde: here it fails.
        check_tls() {
            local role="$1" out
            shift
            out="$(env "${tokens[@]}" "$@" "$sonde" --config "$here/$role.toml" --role "$role" \
                --data-dir "$data" --check-config 2>&1)" && ! grep -q "ignoring SONDE_" <<<"$out" \
                || { rm -rf "$data"; echo "$out" >&2; echo "$role.toml with components/tls does not pass --check-config" >&2; exit 1; }
        }
        check_tls master SONDE_INGEST__TLS__CERT="$data/tls.crt" SONDE_INGEST__TLS__KEY="$data/tls.key" \
            SONDE_API__TLS__CERT="$data/tls.crt" SONDE_API__TLS__KEY="$data/tls.key"
        check_tls agent SONDE_CLUSTER__MASTER=https://sonde-master.sonde.svc:4317 SONDE_EXPORT__TLS__CA="$data/tls.crt"
        echo "sonde --check-config: both roles valid with components/tls's settings"
    fi
    rm -rf "$data"
elif [ "${CI:-false}" != false ] && [ "${CI:-0}" != 0 ] || [ "${REQUIRE_TOOLCHAINS:-0}" != 0 ]; then
    echo "$sonde is missing: build it (cargo build -p sonde) to check the TOML files" >&2
    exit 1
else
    echo "(no $sonde: the TOML files were not checked; cargo build -p sonde)"
fi
