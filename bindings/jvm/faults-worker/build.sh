#!/usr/bin/env bash
# Builds the JVM worker of the fault suite (tests/faults/README.md) into target/jvm-faults-worker/.
#
# It reuses what bindings/jvm/run-tests.sh built (the library's classes in bindings/jvm/target/classes,
# with the debug native library copied into them), so in CI it costs seconds: one javac, two small
# jars, the dependencies' class path (asked of Maven once, then kept), and a class-data archive
# that makes every worker start faster. Without run-tests.sh before it (or when the library's
# sources changed since), it first runs the same `mvn compile` run-tests.sh does (cargo profile
# dev: minutes).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jvm="$(cd "$here/.." && pwd)"
root="$(cd "$jvm/../.." && pwd)"
out="$root/target/jvm-faults-worker"
classes="$jvm/target/classes"
native_dir="$classes/linux-x86-64"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$out"

mvn_jvm() {
  mvn -B -q -f "$jvm/pom.xml" \
    -Dcargo.profile=dev -Dcargo.profile.dir=debug -Dcargo.target.dir="$target_dir" \
    -Dbindgen.target.dir="$target_dir/bindgen" "$@"
}

# Locker.class stands for the library's classes: stale when a source of the library, its native
# side or the core changed since.
stamp="$classes/dev/fencelock/Locker.class"
stale() {
  [[ ! -f $stamp || ! -f $native_dir/libfencelock_jvm.so ]] ||
    [[ -n $( (find "$jvm/src/main" "$root/core/src" -type f -newer "$stamp"
              find "$jvm/src" -maxdepth 1 -name '*.rs' -newer "$stamp") | head -1) ]]
}
if stale; then
  echo "faults: building the JVM library (bindings/jvm, debug native library)"
  mvn_jvm compile
fi

# The runtime dependencies' jars (Kotlin stdlib, coroutines, JNA), as Maven resolves them.
if [[ ! -s $out/classpath.txt || $jvm/pom.xml -nt $out/classpath.txt ]]; then
  mvn_jvm dependency:build-classpath -DincludeScope=runtime -Dmdep.outputFile="$out/classpath.txt" >/dev/null
fi

# Jars, not folders: a class-data archive accepts only jars on the class path. The native library
# stays out of them (JNA would copy 70 MB out of a jar at every start): JNA loads it in place
# from jna.library.path.
if [[ ! -f $out/fencelock-classes.jar || $stamp -nt $out/fencelock-classes.jar ]]; then
  rm -f "$out/worker.jsa"
  jar cf "$out/fencelock-classes.jar" -C "$classes" dev -C "$classes" META-INF
fi
if [[ ! -f $out/worker.jar || $here/FaultsWorker.java -nt $out/worker.jar ]]; then
  rm -rf "$out/classes" "$out/worker.jsa"
  javac -encoding UTF-8 -nowarn --release 17 -cp "$out/fencelock-classes.jar:$(cat "$out/classpath.txt")" -d "$out/classes" \
    "$here/FaultsWorker.java"
  jar cf "$out/worker.jar" -C "$out/classes" .
fi
# run.sh passes these to java as an argument file.
printf '%s\n' "-cp" "$out/worker.jar:$out/fencelock-classes.jar:$(cat "$out/classpath.txt")" \
  "-Djna.library.path=$native_dir" >"$out/java-args"

# A class-data archive of one short run (SQLite: acquire, probe, write, release): the classes of
# Kotlin, coroutines, JNA and fencelock come mapped instead of parsed at every start.
if [[ ! -f $out/worker.jsa ]]; then
  tmp=$(mktemp -d)
  printf '%s\n' \
    "{\"id\":1,\"op\":\"init\",\"worker\":\"A-jvm\",\"lock_url\":\"sqlite://$tmp/locks.db\",\"fence_url\":\"sqlite://$tmp/fence.db\",\"resource\":\"r\",\"lock\":\"l\",\"op_timeout_ms\":3000}" \
    '{"id":2,"op":"acquire","ttl_ms":2000,"wait_ms":1000}' \
    '{"id":3,"op":"probe"}' \
    '{"id":4,"op":"write","mode":"lease"}' \
    '{"id":5,"op":"write","mode":"token"}' \
    '{"id":6,"op":"release"}' \
    '{"id":7,"op":"exit"}' |
    FENCELOCK_FAULTS_JVM_ARCHIVE_AT_EXIT="$out/worker.jsa" "$here/run.sh" >"$tmp/out" 2>"$tmp/err" || true
  # Its writes fail (no fault_writes table there): only the classes they load matter.
  if [[ ! -f $out/worker.jsa ]]; then
    echo "faults: no class-data archive for the JVM worker (it only starts slower); its training run said:" >&2
    cat "$tmp/out" "$tmp/err" >&2
  fi
  rm -rf "$tmp"
fi
