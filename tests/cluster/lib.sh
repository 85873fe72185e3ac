# Shared settings of the tests/cluster scripts. Every value can be overridden from the environment.
# shellcheck shell=bash
KUBE_VERSION=${KUBE_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
KT_CACHE=${KT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/skyhook-test-cluster}
KT_BIN=${KT_BIN:-$KT_CACHE/bin-k$KUBE_VERSION-e$ETCD_VERSION-kwok$KWOK_VERSION}
KT_DIR=${KT_DIR:-${TMPDIR:-/tmp}/skyhook-test-cluster}
KT_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ETCD_PORT=${ETCD_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
API_PORT=${API_PORT:-16443}
KCM_PORT=${KCM_PORT:-20257}
KWOK_PORT=${KWOK_PORT:-20247}
SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16}
# The controller manager's own limits, which bound how fast Jobs can complete (bench/run records them).
KCM_QPS=${KCM_QPS:-200}
KCM_BURST=${KCM_BURST:-400}
KCM_JOB_SYNCS=${KCM_JOB_SYNCS:-5}
# How long a node may miss heartbeats before the controller manager marks it unreachable (and
# taints it). bench/run raises it: kwok, starved of CPU at thousands of nodes, misses them, and a
# tainted node is one the operator must not touch.
KCM_NODE_GRACE=${KCM_NODE_GRACE:-50s}
# The log agent serves `kubectl logs` for fake pods. bench/run turns it off (KT_LOG_AGENT=0): it
# runs kubectl and jq for every pod, more CPU at a thousand nodes than the operator under test.
KT_LOG_AGENT=${KT_LOG_AGENT:-1}
# kwok's log level (DEBUG, INFO, WARN, ERROR); bench/run keeps it to warnings.
KWOK_LOG_LEVEL=${KWOK_LOG_LEVEL:-INFO}
# true: the API server and controller manager serve /debug/pprof (for profiling a bench run).
KT_PROFILING=${KT_PROFILING:-false}
# An audit policy file: when set, the API server writes an audit log to $KT_DIR/logs/audit.log.
KT_AUDIT_POLICY=${KT_AUDIT_POLICY:-}
# Real nodes (tests/cluster/real-node): a kubelet and kube-scheduler from the same module, a local
# OCI registry, Debian root file systems and images, built once by build-real and cached by version.
KT_REAL=${KT_REAL:-1}
REGISTRY_VERSION=${REGISTRY_VERSION:-v3.1.2}
# The nodes run Debian 12; the agent's image is Debian 13's Python (3.13), as the reference builds
# it (the agent needs Python 3.12 or later).
DEBIAN_SUITE=${DEBIAN_SUITE:-bookworm}
AGENT_DEBIAN_SUITE=${AGENT_DEBIAN_SUITE:-trixie}
KT_REAL_BIN=${KT_REAL_BIN:-$KT_CACHE/real-k$KUBE_VERSION-registry$REGISTRY_VERSION}
KT_ROOTFS_CACHE=${KT_ROOTFS_CACHE:-$KT_CACHE/rootfs}
KT_NODE_ROOTFS=$KT_ROOTFS_CACHE/node-$DEBIAN_SUITE
KT_PYTHON_ROOTFS=$KT_ROOTFS_CACHE/python-$AGENT_DEBIAN_SUITE
KT_IMAGES=${KT_IMAGES:-$KT_CACHE/images}
# Prometheus, built from its Go module, for the alert gate's tests (tests/cluster/build-prometheus).
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
KT_PROMETHEUS=${KT_PROMETHEUS:-$KT_CACHE/prometheus-$PROMETHEUS_VERSION/prometheus}
# Clear of the private clusters' port ranges (tests/e2e: 24000-25999, 27000-28999) and the bench's.
REGISTRY_PORT=${REGISTRY_PORT:-21500}
# Images name the registry without a port (a package image could not carry one in the reference
# before its v0.18, delta D29); each node's containerd maps the name, and 127.0.0.1:REGISTRY_PORT
# too, to the registry over plain HTTP (a mirror), so no DNS is involved.
REGISTRY_HOST=registry.skyhook.test
SCHEDULER_PORT=${SCHEDULER_PORT:-20259}
# The scheduler places only pods that name it: the kwok-only tests rely on pods without a node
# staying Pending (no default scheduler), and pods meant for real nodes opt in.
TEST_SCHEDULER=skyhook-test-scheduler
PAUSE_TAG=3.10
KUBE_SERVICE_IP=${SERVICE_CIDR%.*/*}.1
REAL_KUBELET_PORT_BASE=11250
REAL_HEALTHZ_PORT_BASE=12250
bridge_name() { echo "skyhook-rn$1"; }
PKI=$KT_DIR/pki
KUBECONFIG_FILE=$KT_DIR/kubeconfig
# Components in start order; `down` stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kwok log-agent kwok-reboots registry kube-scheduler)

log() { printf '[test-cluster] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
kc() { "$KT_BIN/kubectl" --kubeconfig="$KUBECONFIG_FILE" "$@"; }

# wait_for <description> <timeout-seconds> <command...>
wait_for() {
  local desc=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $desc"
      if [[ -z ${KT_QUIET_WAIT:-} ]]; then
        log "last lines of the logs in $KT_DIR/logs:"
        tail -n 20 "$KT_DIR"/logs/*.log >&2 2>/dev/null || true
      fi
      return 1
    fi
    sleep 0.3
  done
}

pid_alive() { # <component>
  local f=$KT_DIR/pids/$1.pid
  [[ -f $f ]] && kill -0 "$(<"$f")" 2>/dev/null
}

# KWOK_CMD: kwok's command line (`up` starts it, `restart-kwok` restarts it alone).
kwok_command() {
  KWOK_CMD=("$KT_BIN/kwok"
    --kubeconfig="$KUBECONFIG_FILE"
    --config="$KT_DIR/kwok.yaml"
    --enable-crds=Logs
    --manage-all-nodes=false
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake
    --node-name=localhost
    --node-port="$KWOK_PORT"
    --server-address="127.0.0.1:$KWOK_PORT"
    --tls-cert-file="$PKI/admin.crt"
    --tls-private-key-file="$PKI/admin.key"
    --node-lease-duration-seconds=40
    --v="$KWOK_LOG_LEVEL"
    --cidr=10.244.0.0/16)
}

kwok_ready() { curl -fsS --max-time 2 "http://127.0.0.1:$KWOK_PORT/healthz" >/dev/null; }

api_ready() {
  curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz" >/dev/null
}

# Fake node manifests: node-<first> .. node-<last>, in one List so thousands apply in one request.
node_manifests() { # <first> <last>
  local i
  printf 'apiVersion: v1\nkind: List\nitems:\n'
  for ((i = $1; i <= $2; i++)); do
    cat <<NODE
- apiVersion: v1
  kind: Node
  metadata:
    name: node-$i
    annotations:
      kwok.x-k8s.io/node: fake
      node.alpha.kubernetes.io/ttl: "0"
    labels:
      type: kwok
      kubernetes.io/hostname: node-$i
      kubernetes.io/os: linux
      kubernetes.io/arch: amd64
NODE
  done
}

# Highest N among existing node-N nodes (0 when none).
last_node_index() {
  kc get nodes -o name 2>/dev/null | sed -n 's#^node/node-\([0-9][0-9]*\)$#\1#p' | sort -n | tail -n 1 | grep . || echo 0
}

# nodes_ready <first> <last>: nodes node-<first>..node-<last> all report Ready and carry no taint
# (the node lifecycle controller's not-ready taint goes a moment after Ready). One list, not
# `kubectl wait`, whose single timeout covers its objects one after the other and so cannot
# check hundreds of nodes in time.
nodes_ready() {
  local ready
  ready=$(kc get nodes -l type=kwok -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{" "}{.spec.taints[*].key}{"\n"}{end}' |
    awk -v a="$1" -v b="$2" '{ n = substr($1, 6) + 0; if (n >= a && n <= b && $2 == "True" && NF == 2) c++ } END { print c + 0 }')
  ((ready == $2 - $1 + 1))
}

# nodes_gone <name>...: none of the named nodes exists any more.
nodes_gone() {
  local names
  names=$(kc get nodes -o name) || return 1
  ! grep -qxF -f <(printf 'node/%s\n' "$@") <<<"$names"
}

add_nodes() { # <count>
  local first last
  # Parallel tests add nodes at once: numbering and creation must not interleave.
  exec 9>"$KT_DIR/nodes.lock"
  flock 9
  first=$(($(last_node_index) + 1))
  last=$((first + $1 - 1))
  node_manifests "$first" "$last" | kc create -f - >/dev/null
  flock -u 9
  wait_for "nodes node-$first..node-$last to be Ready" $((60 + $1 / 20)) nodes_ready "$first" "$last"
  for ((i = first; i <= last; i++)); do echo "node-$i"; done
}
