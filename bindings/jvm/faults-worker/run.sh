#!/usr/bin/env bash
# Runs the JVM worker of the fault suite (JSON lines on stdin/stdout: tests/faults/README.md).
# build.sh builds it (tests/faults/run.sh calls it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/../../../target/jvm-faults-worker"
[[ -f $out/java-args ]] || { echo "the JVM worker is not built: run bindings/jvm/faults-worker/build.sh" >&2; exit 1; }

# Start-up first: a run starts its workers one after another. C1 only (no C2 compiles on a 2-core
# machine), the serial GC (no GC threads), a small heap, no perf-data file, the class-data archive
# build.sh made (skipped if it does not match), and the JVM's own messages on stderr, never on the
# protocol's stdout.
opts=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m -XX:-UsePerfData -Xshare:auto
      -Xlog:all=warning:stderr)
if [[ -n ${FENCELOCK_FAULTS_JVM_ARCHIVE_AT_EXIT:-} ]]; then
  opts+=(-XX:ArchiveClassesAtExit="$FENCELOCK_FAULTS_JVM_ARCHIVE_AT_EXIT")
elif [[ -f $out/worker.jsa ]]; then
  opts+=(-XX:SharedArchiveFile="$out/worker.jsa")
fi
# exec: the harness signals (SIGSTOP, SIGKILL) and proxies this very process.
exec java "${opts[@]}" "@$out/java-args" FaultsWorker
