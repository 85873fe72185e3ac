# Shared settings of the tests/cluster scripts. Every value can be overridden from the environment.
KUBE_VERSION=${KUBE_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
KT_CACHE=${KT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/skyhook-test-cluster}
KT_BIN=${KT_BIN:-$KT_CACHE/bin-k$KUBE_VERSION-e$ETCD_VERSION-kwok$KWOK_VERSION}
KT_DIR=${KT_DIR:-${TMPDIR:-/tmp}/skyhook-test-cluster}
KUBECONFIG_FILE=$KT_DIR/kubeconfig

log() { printf '[test-cluster] %s\n' "$*" >&2; }
