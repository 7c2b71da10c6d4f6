# Sourced by .ci/run and scripts/test: `timed NAME COMMAND...` runs COMMAND and keeps how
# long it took; `phases_summary TITLE` prints those times (each script does on exit, so a
# failed run still says where its time went).
phases=()
timed() {
    local name=$1 begun rc=0 line
    shift
    begun=$(date +%s)
    "$@" || rc=$?
    line=$(printf '%-34s %5d s' "$name" $(($(date +%s) - begun)))
    [ "$rc" -eq 0 ] || line="$line (failed: exit $rc)"
    phases+=("$line")
    return "$rc"
}
phases_summary() {
    echo "== $1"
    [ ${#phases[@]} -eq 0 ] || printf '%s\n' "${phases[@]}"
}
