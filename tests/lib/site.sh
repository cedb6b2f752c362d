# shellcheck shell=bash
# Site descriptions for tests (sourced by tests/lib/harness.sh).
#
# lab_site OUT [--from SITE] EDIT...: a copy of SITE (default
# examples/lab/site.yaml) at OUT, world-readable, its relative paths made
# absolute, and each EDIT applied in order (tests/lib/site.py):
#   key.path=VALUE   set (VALUE is YAML: 2m, true, {start: a, end: b})
#   key.path+=VALUE  append to a list
#   -key.path        delete
# A number indexes a list; a name picks the list item of that name:
#   lab_site "$WORK/site.yaml" host.stateDir="$WORK/state" \
#       host.dhcp.leaseTime=2m networks.lab.pool='{start: 10.77.0.100, end: 10.77.0.220}' \
#       nodes.worker-0.fetchFrom=anyAddress -host.dhcp.interface
# An edit whose path leads nowhere fails the call and writes nothing, so a
# script never runs against a site that silently kept its old value.
lab_site() {
    local out=$1 from=$REPO/examples/lab/site.yaml
    shift
    if [[ ${1:-} == --from ]]; then
        from=$2
        [[ $from == /* ]] || from=$REPO/$from
        shift 2
    fi
    python3 "$HARNESS_LIB/site.py" "$from" "$out" "$@"
}
