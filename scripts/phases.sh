# Sourced by .ci/run, scripts/setup and scripts/test: `timed NAME COMMAND...` runs COMMAND and
# keeps how long it took; `phases_summary TITLE` prints those times (each script does on exit,
# so a failed run still says where its time went).
#
# `start_job NAME COMMAND...` runs COMMAND in the background, its output to a file of its own
# (`live_job` instead leaves it on the terminal: one such job at a time); `await_jobs` waits
# for them all and prints each captured output whole, so the logs of jobs that run at once
# never interleave: when a job ends, or, while a live job runs, once it has ended. Each job's
# time joins the phases; `await_jobs` fails if any job did. At most JOBS_AT_ONCE captured jobs
# run at once (default 2: the machine has 2 cores, and the live job is the heavy one).
phases=()
# COMMAND runs in a subshell under `set -e`, so a shell function stops at its first failing
# command; what it assigns stays there. Bash ignores set -e, down through functions, under
# `timed ... || status=$?`: call it so with a program only, or use a job (below).
timed() {
    local name=$1 begun rc line errexit=$-
    shift
    begun=$(date +%s)
    set +e
    (
        set -e
        "$@"
    )
    rc=$?
    if [[ $errexit == *e* ]]; then set -e; fi
    line=$(printf '%-34s %5d s' "$name" $(($(date +%s) - begun)))
    [ "$rc" -eq 0 ] || line="$line (failed: exit $rc)"
    phases+=("$line")
    return "$rc"
}
phases_summary() {
    echo "== $1"
    [ ${#phases[@]} -eq 0 ] || printf '%s\n' "${phases[@]}"
}

jobs_dir=""
jobs_count=0
declare -A job_log=()   # pid -> the file its output (and then its phase line) goes to
queued=()               # `printf %q`-quoted commands of captured jobs not started yet
live_pid=""
unprinted=()            # logs of jobs that ended while the live job ran

_job() {  # _job LOG NAME COMMAND...: in a background subshell; the phase line to LOG.phase
    local log=$1 rc
    shift
    set +e
    timed "$@"
    rc=$?
    printf '%s\n' "${phases[-1]}" >"$log.phase"
    return "$rc"
}
start_job() {
    [ -n "$jobs_dir" ] || jobs_dir=$(mktemp -d)
    queued+=("$(printf '%q ' "$@")")
    _start_queued
}
live_job() {
    [ -n "$jobs_dir" ] || jobs_dir=$(mktemp -d)
    local log="$jobs_dir/$((jobs_count += 1))"
    _job "$log" "$@" &
    live_pid=$!
    job_log[$live_pid]=$log
}
_start_queued() {
    local log running=${#job_log[@]}
    [ -z "$live_pid" ] || running=$((running - 1))
    while [ ${#queued[@]} -gt 0 ] && [ "$running" -lt "${JOBS_AT_ONCE:-2}" ]; do
        log="$jobs_dir/$((jobs_count += 1))"
        eval "_job \"\$log\" ${queued[0]}" >"$log" 2>&1 &
        job_log[$!]=$log
        queued=("${queued[@]:1}")
        running=$((running + 1))
    done
}
await_jobs() {
    local pid rc status=0 log
    while [ ${#job_log[@]} -gt 0 ]; do
        rc=0
        wait -n -p pid "${!job_log[@]}" || rc=$?
        [ "$rc" -eq 0 ] || status=1
        log=${job_log[$pid]}
        unset "job_log[$pid]"
        phases+=("$(cat "$log.phase" 2>/dev/null || echo "(job $pid left no time: exit $rc)")")
        if [ "$pid" = "$live_pid" ]; then
            live_pid=""
            [ ${#unprinted[@]} -eq 0 ] || cat "${unprinted[@]}"
            unprinted=()
        elif [ -n "$live_pid" ]; then
            unprinted+=("$log")
        else
            cat "$log"
        fi
        _start_queued
    done
    rm -rf "$jobs_dir"
    jobs_dir=""
    return "$status"
}
