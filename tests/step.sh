#!/usr/bin/env bash
# Runs one step of the test run with a time limit, in a session of its own:
#
#   tests/step.sh LIMIT_SECONDS command [args...]
#
# A step that hangs fails after LIMIT_SECONDS with what was running and where it waited (a
# process listing, the kernel's wait channel of each process, and the threads' stacks of the
# test processes), instead of CI's limit on the whole run ending it without a word.
#
# The session of its own also means the step has no controlling terminal, whether or not CI
# gives the run one: `fencelock run` hands a terminal it finds to CMD, and the tests that want
# a terminal make their own (a pseudo-terminal), so every machine runs the tests alike.
set -uo pipefail

limit="$1"
shift

# setsid: the step leads a new session and process group (bash runs a background job in its
# own group only with job control, so setsid does not fork here and $! is the step itself).
# env --default-signal: a background job of a shell without job control starts with SIGINT and
# SIGQUIT ignored, which every process of the step would inherit (a Ctrl-C test would hang).
setsid env --default-signal=INT,QUIT "$@" </dev/null &
step=$!

started=$SECONDS
# The time limit runs beside the step, and `wait -n` returns with whichever ends first: the
# step's end is seen at once, not at the next turn of a polling loop.
sleep "$limit" &
limit_timer=$!
wait -n "$step" "$limit_timer"
if kill -0 "$step" 2>/dev/null; then
    printf '\n!!! step still running after %ss, stopping it: %s\n' "$limit" "$*"
    echo "--- processes of the step (process group $step), and where each waits:"
    ps -o pid,ppid,stat,etimes,wchan:32,args -g "$step" --forest || true
    echo "--- threads' stacks of the test processes (gdb):"
    for pid in $(ps -o pid= -g "$step"); do
        comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
        case "$comm" in
            bash | sh | sleep | timeout | tee | cat | "") continue ;;
        esac
        printf '\n--- %s %s\n' "$pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-200)"
        if command -v gdb >/dev/null; then
            timeout 60 gdb -p "$pid" -batch -nx -ex 'thread apply all bt 12' 2>/dev/null |
                grep -E '^(Thread|#)' | head -150 || true
        fi
    done
    kill -TERM -- "-$step" 2>/dev/null
    sleep 10
    kill -KILL -- "-$step" 2>/dev/null
    wait "$step" 2>/dev/null
    exit 124
fi
wait "$step"
rc=$?
kill "$limit_timer" 2>/dev/null
# Each step's wall time, for finding where CI's time goes (tests/CI.md has the sections').
printf '(step: %ss, exit %s: %s)\n' $((SECONDS - started)) "$rc" "$(printf '%s ' "$@" | cut -c1-100)" >&2
exit "$rc"
