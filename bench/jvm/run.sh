#!/usr/bin/env bash
# The JVM comparison: fencelock (release build) against Redisson (RLock, RFencedLock,
# RPermitExpirableSemaphore, RReadWriteLock) on Redis, and Curator (InterProcessMutex,
# InterProcessSemaphoreV2, InterProcessReadWriteLock) on ZooKeeper, on the same servers.
#
#   bash bench/jvm/run.sh [redis host:port] [zookeeper host:port] [-Dbench.property=value ...]
#
# Servers: `bash tests/servers.sh start redlock zookeeper` (7001: a Redis master without replicas;
# 2181: the standalone ZooKeeper). Prints markdown tables for bench/RESULTS.md. The -D options
# go to the benchmark (Bench.java): e.g. -Dbench.suites=semaphore,rwlock -Dbench.runs=4 for the
# semaphore and read-lock section of bench/RESULTS.md (default: every suite, one run).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# FENCELOCK_PROFILE=dev uses a debug native library (fast to build, slower to run).
if [ "${FENCELOCK_PROFILE:-release}" = dev ]; then
    lib_args=(-Dcargo.profile=dev -Dcargo.profile.dir=debug)
else
    lib_args=()
fi
hosts=()
props=()
for arg in "$@"; do
    case "$arg" in
        -D*) props+=("$arg") ;;
        *) hosts+=("$arg") ;;
    esac
done
# maven.test.skip: no test compilation either (the tests call the test-hooks entry points, which a
# release native library does not have).
mvn -B -q -f "$here/../../bindings/jvm/pom.xml" install -Dmaven.test.skip=true "${lib_args[@]}"
mvn -B -q -f "$here/pom.xml" compile exec:java "${props[@]}" \
    -Dexec.args="${hosts[0]:-127.0.0.1:7001} ${hosts[1]:-127.0.0.1:2181}"
