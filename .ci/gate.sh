# Sourced by .ci/gates.sh and upstream/check.sh: `gate NAME COMMAND...` runs one check, prints its output, whether it
# passed and its time, and collects the names of failed checks in FAILED; `gates_end LABEL` prints the time since
# START and exits 1 if any check failed.
FAILED=()
gate() {
    local name="$1"; shift
    local t0=$SECONDS
    echo "== $name: $*"
    if "$@"; then
        echo "-- $name: passed ($((SECONDS - t0)) s)"
    else
        echo "-- $name: FAILED ($((SECONDS - t0)) s)"
        FAILED+=("$name")
    fi
}

gates_end() {
    local label="$1"
    echo "== $label: $((SECONDS - START)) s in all"
    if [ ${#FAILED[@]} -gt 0 ]; then
        echo "$label: FAILED gates: ${FAILED[*]}"
        exit 1
    fi
    echo "$label: all gates passed"
}
