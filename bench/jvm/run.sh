#!/usr/bin/env bash
# One run of the JVM comparison: fencelock (release build) against Redisson RLock and RFencedLock
# on Redis, and Curator InterProcessMutex on ZooKeeper, on the same servers.
#
#   bash bench/jvm/run.sh [redis host:port] [zookeeper host:port]
#
# Servers: `bash tests/servers.sh start redlock zookeeper` (7001: a Redis master without replicas;
# 2181: the standalone ZooKeeper). Prints a markdown table for bench/RESULTS.md.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# FENCELOCK_PROFILE=dev uses a debug native library (fast to build, slower to run).
if [ "${FENCELOCK_PROFILE:-release}" = dev ]; then
    lib_args=(-Dcargo.profile=dev -Dcargo.profile.dir=debug)
else
    lib_args=()
fi
mvn -B -q -f "$here/../../bindings/jvm/pom.xml" install -DskipTests "${lib_args[@]}"
mvn -B -q -f "$here/pom.xml" compile exec:java -Dexec.args="${1:-127.0.0.1:7001} ${2:-127.0.0.1:2181}"
