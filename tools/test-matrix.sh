#!/bin/sh
# make test-matrix: for each Kubernetes minor given (default: every supported one), bring up
# the embedded provider at that minor and run conformance plus the suites that need no newer
# minor's features; one JUnit report per minor and a results table (docs/testing.md).
#   tools/test-matrix.sh [1.N ...]      PYTEST_ARGS adds pytest arguments to every run
# KIND_MINORS (default 1.34, the oldest) runs the same suites on kind at those minors too, a
# row "kind-1.N" each; KIND_MINORS= leaves kind out.
# Binaries missing from fakegpu's cache are obtained first, through `fakegpu cluster
# binaries` (with its progress; a Go build is ~10 min of both cores per minor here).
set -u
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=reports/matrix
# Arguments, else $MINORS (set but empty: no embedded run), else every supported minor.
MINORS=${*:-${MINORS-"1.34 1.35 1.36 1.37 1.38"}}
KIND_MINORS=${KIND_MINORS-1.34}
# Each needs only what 1.34 has (basic allocation, partitionable devices, device taints, admin
# access, prioritized lists, device status) or no Kubernetes feature (the plugin upgrade; the
# tests without a pod load: the load ones belong to test_upgrade's own runs).
SUITES="fakegpu/conformance e2e/test_basic_allocation.py e2e/test_partitioning.py
e2e/test_taints.py e2e/test_admin_access.py e2e/test_prioritized_list.py
e2e/test_claim_status.py e2e/test_upgrade.py"
mkdir -p "$OUT"
status=0
# run PROVIDER MINOR ROW WORKERS: one minor's suites on one provider, its report as ROW.
run() {
    provider=$1 minor=$2 row=$3 workers=$4
    echo ">>> Kubernetes $minor: binaries"
    if ! .venv/bin/fakegpu cluster binaries --k8s-version "$minor" --no-images >/dev/null; then
        echo ">>> Kubernetes $minor: binaries could not be obtained" >&2
        status=1; return
    fi
    name="fakegpu-m$(echo "$row" | tr -d .)"
    echo ">>> Kubernetes $minor: suites on $provider cluster $name"
    started=$(date +%s)
    # shellcheck disable=SC2086  # SUITES and PYTEST_ARGS are word lists
    $PY -m pytest -n "$workers" --dist load $SUITES -m e2e \
        -k "not under_load" --fakegpu-provider "$provider" --fakegpu-k8s-version "$minor" \
        --fakegpu-cluster-name "$name" --junitxml="$OUT/$row.xml" ${PYTEST_ARGS:-} \
        || status=1
    echo "$(( $(date +%s) - started ))" > "$OUT/$row.seconds"
}
for minor in $MINORS; do
    run embedded "$minor" "$minor" "${PYTEST_WORKERS:-4}"
done
# kind nodes are heavier: as many workers as the kind pass of make test.
for minor in $KIND_MINORS; do
    run kind "$minor" "kind-$minor" "${KIND_WORKERS:-2}"
done
rows="$MINORS $(for m in $KIND_MINORS; do printf 'kind-%s ' "$m"; done)"
# shellcheck disable=SC2086  # a word list
$PY tools/matrix_table.py "$OUT" $rows | tee "$OUT/results.md"
exit $status
