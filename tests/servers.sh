#!/usr/bin/env bash
# tests/servers.sh: install (from Debian's packages) and run fencelock's real
# test servers on loopback, for the tests of every language. See
# tests/SERVERS.md and docs/design.md §10.
#
#   tests/servers.sh install [NAME...]  apt-get what is missing (default: all)
#   tests/servers.sh start   [NAME...]  start groups/servers (default: all)
#   tests/servers.sh stop    [NAME...]  stop them and wait until they exit
#   tests/servers.sh restart  NAME...   stop + start (a server name wins here)
#   tests/servers.sh status  [NAME...]  what runs and whether it answers
#   tests/servers.sh env                FENCELOCK_TEST_*_URL=... lines
#   tests/servers.sh clean              stop all and delete the state folder
#
# Groups: redis redlock cluster zookeeper zk-ensemble zk-follower postgres mariadb (all).
# Servers: redis redis-replica redis-tls redis-acl redlock-1..5 cluster-1..3
#          zookeeper zk-ensemble-1..3 zk-follower-proxy zk-follower-1..3 postgres mariadb.
#
# Test servers trade durability for speed; they hold nothing worth keeping.
# Needs root (apt-get, runuser); no systemd: every server is started by hand,
# detached, with its pid file and log under the state folder.

set -euo pipefail
umask 022

# --------------------------------------------------------------- settings
S=${FENCELOCK_SERVERS_DIR:-/tmp/fencelock-servers}
TIMEOUT=${FENCELOCK_SERVERS_TIMEOUT:-60}   # seconds to wait for a server
LOCK_TIMEOUT=${FENCELOCK_SERVERS_LOCK_TIMEOUT:-600}

P_REDIS=${FENCELOCK_TEST_REDIS_PORT:-6379}
P_REDIS_TLS=${FENCELOCK_TEST_REDIS_TLS_PORT:-6380}
P_REDIS_ACL=${FENCELOCK_TEST_REDIS_ACL_PORT:-6381}
P_REDIS_REPLICA=${FENCELOCK_TEST_REDIS_REPLICA_PORT:-6382}
REDLOCK_BASE=${FENCELOCK_TEST_REDLOCK_PORT_BASE:-7000}          # 7001-7005
CLUSTER_BASE=${FENCELOCK_TEST_REDIS_CLUSTER_PORT_BASE:-7100}    # 7101-7103, bus +10000
P_ZK=${FENCELOCK_TEST_ZK_PORT:-2181}
ZKE_BASE=${FENCELOCK_TEST_ZK_ENSEMBLE_PORT_BASE:-2280}          # 2281-2283
ZKE_PEER_BASE=${FENCELOCK_TEST_ZK_ENSEMBLE_PEER_PORT_BASE:-2880}          # 2881-2883
ZKE_ELECTION_BASE=${FENCELOCK_TEST_ZK_ENSEMBLE_ELECTION_PORT_BASE:-3880}  # 3881-3883
# zk-follower: a 3-node ensemble whose node 3 reaches its peers only through a proxy that the
# tests can pause (tests/partition_proxy.py): control on base, links on base+1..base+4.
ZKF_BASE=${FENCELOCK_TEST_ZK_FOLLOWER_PORT_BASE:-2380}                    # 2381-2383
ZKF_PEER_BASE=${FENCELOCK_TEST_ZK_FOLLOWER_PEER_PORT_BASE:-2980}          # 2981-2983
ZKF_ELECTION_BASE=${FENCELOCK_TEST_ZK_FOLLOWER_ELECTION_PORT_BASE:-3980}  # 3981-3983
ZKF_PROXY_BASE=${FENCELOCK_TEST_ZK_FOLLOWER_PROXY_PORT_BASE:-2390}        # 2390-2394
P_POSTGRES=${FENCELOCK_TEST_POSTGRES_PORT:-5432}
P_MARIADB=${FENCELOCK_TEST_MARIADB_PORT:-3306}

HOST=127.0.0.1
ACL_USER=fencelock ACL_PASS=fencelock-test ACL_ADMIN_PASS=fencelock-admin
DB_NAME=fencelock_test
DB_USER=fencelock DB_PASS=fencelock-test
DB_APP_USER=fencelock_app DB_APP_PASS=fencelock-app

# The commands (and nothing else) that the ACL user on the ACL redis may run: the smallest
# set fencelock needs, as documented in docs/redis.md. Redis checks the commands a script
# calls against the caller's ACL too, so the scripts' commands are listed.
ACL_COMMANDS='+evalsha +eval +script|load +ping +hello +auth +select +client|setname
 +subscribe +unsubscribe +ssubscribe +sunsubscribe +publish +spublish
 +time +pttl +get +set +hget +hset +del +pexpire +wait +info +config|get
 +hdel +zadd +zrem +zscore +zcard +zrange +zrangebyscore +zremrangebyscore'

ZK_JAVA_OPTS=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
  -Djava.net.preferIPv4Stack=true -Dzookeeper.snapshot.trust.empty=true
  -Dzookeeper.jmx.log4j.disable=true
  -Dorg.slf4j.simpleLogger.showDateTime=true)
ZK_CLASSPATH=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar

die() { echo "servers.sh: error: $*" >&2; exit 1; }
say() { echo "servers.sh: $*"; }

for v in P_REDIS P_REDIS_TLS P_REDIS_ACL P_REDIS_REPLICA REDLOCK_BASE CLUSTER_BASE \
         P_ZK ZKE_BASE ZKE_PEER_BASE ZKE_ELECTION_BASE ZKF_BASE ZKF_PEER_BASE ZKF_ELECTION_BASE \
         ZKF_PROXY_BASE P_POSTGRES P_MARIADB TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done
# The folder goes into URLs, config files and command lines: keep it plain.
[[ $S =~ ^/[A-Za-z0-9/._-]+$ && $S != / ]] ||
  die "FENCELOCK_SERVERS_DIR must be an absolute path of [A-Za-z0-9/._-], got '$S'"
S=${S%/}

# ---------------------------------------------------------------- servers
SERVERS=()
declare -A KIND PORT GROUP
add() { SERVERS+=("$1"); KIND[$1]=$2; PORT[$1]=$3; }
add redis         redis         "$P_REDIS"
add redis-replica redis-replica "$P_REDIS_REPLICA"
add redis-tls     redis-tls     "$P_REDIS_TLS"
add redis-acl     redis-acl     "$P_REDIS_ACL"
for i in 1 2 3 4 5; do add "redlock-$i" redis $((REDLOCK_BASE + i)); done
for i in 1 2 3; do add "cluster-$i" redis-cluster $((CLUSTER_BASE + i)); done
add zookeeper     zk            "$P_ZK"
for i in 1 2 3; do add "zk-ensemble-$i" zk-ensemble $((ZKE_BASE + i)); done
add zk-follower-proxy partition-proxy "$ZKF_PROXY_BASE"   # its control port
for i in 1 2 3; do add "zk-follower-$i" zk-follower $((ZKF_BASE + i)); done
add postgres      postgres      "$P_POSTGRES"
add mariadb       mariadb       "$P_MARIADB"

GROUPS_ORDER=(redis redlock cluster zookeeper zk-ensemble zk-follower postgres mariadb)
GROUP[redis]="redis redis-replica redis-tls redis-acl"
GROUP[redlock]="redlock-1 redlock-2 redlock-3 redlock-4 redlock-5"
GROUP[cluster]="cluster-1 cluster-2 cluster-3"
GROUP[zookeeper]="zookeeper"
GROUP[zk-ensemble]="zk-ensemble-1 zk-ensemble-2 zk-ensemble-3"
GROUP[zk-follower]="zk-follower-proxy zk-follower-1 zk-follower-2 zk-follower-3"
GROUP[postgres]="postgres"
GROUP[mariadb]="mariadb"
GROUP[all]="${SERVERS[*]}"
# a few other spellings
GROUP[redis-cluster]=${GROUP[cluster]}
GROUP[zk]=${GROUP[zookeeper]}
GROUP[postgresql]=${GROUP[postgres]}

usage() {
  cat <<EOF
usage: tests/servers.sh install [NAME...]   install what is missing from Debian's packages
       tests/servers.sh start [NAME...]     start (installs what is missing first); default: all
       tests/servers.sh stop [NAME...]      stop and wait until they exit; default: all
       tests/servers.sh restart NAME...     stop + start; NAME may be one server (redis, redlock-3)
       tests/servers.sh status [NAME...]    show what runs (exit 3 if something is not running)
       tests/servers.sh env                 print FENCELOCK_TEST_<NAME>_URL=... lines
       tests/servers.sh clean               stop all, delete the state folder ($S)
groups:  ${GROUPS_ORDER[*]} all
servers: ${SERVERS[*]}
EOF
}

# resolve MODE NAME... -> unique server names in canonical order, in RESOLVED.
# MODE=group: a group name wins (start redis = the whole redis group);
# MODE=server: a server name wins (restart redis = only the 6379 server).
resolve() {
  local mode=$1 n s; shift
  local -A want=()
  (($#)) || set -- all
  for n in "$@"; do
    if [[ $mode == server && -n ${KIND[$n]:-} ]]; then want[$n]=1
    elif [[ -n ${GROUP[$n]:-} ]]; then for s in ${GROUP[$n]}; do want[$s]=1; done
    elif [[ -n ${KIND[$n]:-} ]]; then want[$n]=1
    else usage >&2; die "unknown server or group '$n'"
    fi
  done
  RESOLVED=()
  for s in "${SERVERS[@]}"; do [[ -n ${want[$s]:-} ]] && RESOLVED+=("$s"); done
  return 0
}

# ---------------------------------------------------------------- helpers
dir_of() { echo "$S/$1"; }
log_of() { echo "$S/$1/server.log"; }

pid_of() {
  local f=$S/$1/pid
  [[ ${KIND[$1]} == postgres ]] && f=$S/$1/data/postmaster.pid
  if [[ -r $f ]]; then head -n1 "$f" 2>/dev/null || true; fi
}

comm_of_kind() {
  case $1 in
    redis*) echo redis-server ;;
    zk*) echo java ;;
    postgres) echo postgres ;;
    mariadb) echo mariadbd ;;
  esac
}

# alive PID: the process exists and is not a zombie
alive() {
  local st
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $st && $st != Z ]]
}

running() {
  local pid
  pid=$(pid_of "$1")
  alive "$pid" || return 1
  if [[ ${KIND[$1]} == partition-proxy ]]; then # python3 may be a shim: match the script
    [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") == *partition_proxy.py* ]]
  else
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$(comm_of_kind "${KIND[$1]}")" ]]
  fi
}

# shellcheck disable=SC2016 # $0 and $1 belong to the inner bash
port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$HOST" "$1" 2>/dev/null; }

# Servers keep no file descriptor of ours (nor of whoever called us: a
# pipe held open by a server would hang a caller reading our output).
# shellcheck disable=SC2016 # expanded by the inner bash
CLOSE_FDS='for f in /proc/$$/fd/*; do f=${f##*/}; if ((f > 2)); then eval "exec $f>&-"; fi; done 2>/dev/null'

# spawn PIDFILE LOG CMD...: run CMD detached (own session, no terminal, stdin
# from /dev/null, output to LOG, other descriptors closed), record its pid.
spawn() {
  local pidf=$1 log=$2; shift 2
  rm -f "$pidf"
  # shellcheck disable=SC2016 # $$ and $@ belong to the inner bash
  setsid bash -c "$CLOSE_FDS"'; echo $$ > "$0"; exec "$@"' "$pidf" "$@" </dev/null >>"$log" 2>&1 &
}

# detached CMD...: run CMD (which leaves a daemon behind) in its own session
# with no descriptor of ours but its stdout/stderr; wait for CMD itself.
detached() {
  # shellcheck disable=SC2016
  setsid bash -c "$CLOSE_FDS"'; exec "$@"' _ "$@" </dev/null
}

show_log() {
  local f
  for f in "$@"; do
    [[ -s $f ]] || continue
    echo "----- last lines of $f -----" >&2
    tail -n 40 "$f" >&2
  done
}

# fail_server NAME MESSAGE: print the message and the server's logs, return 1
fail_server() {
  local d; d=$(dir_of "$1")
  echo "servers.sh: error: $1 (port ${PORT[$1]}): $2" >&2
  show_log "$d/init.log" "$d/server.log"
  return 1
}

rcli() { # rcli NAME redis-cli-args...
  local name=$1; shift
  local args=(-h "$HOST" -p "${PORT[$name]}")
  case ${KIND[$name]} in
    redis-tls) args+=(--tls --cacert "$S/redis-tls/ca.crt") ;;
    redis-acl) args+=(--user "$ACL_USER" --pass "$ACL_PASS" --no-auth-warning) ;;
  esac
  timeout 5 redis-cli "${args[@]}" "$@" 2>/dev/null
}

proxy_ctl() { # proxy_ctl PORT COMMAND: a command to tests/partition_proxy.py, print its answer
  # shellcheck disable=SC2016
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "%s\n" "$2" >&3 && head -n1 <&3' \
    "$HOST" "$1" "$2" 2>/dev/null || true
}

zk4() { # zk4 PORT WORD: send a four-letter word, print the answer
  # shellcheck disable=SC2016
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf %s "$2" >&3 && cat <&3' \
    "$HOST" "$1" "$2" 2>/dev/null || true
}

pg_bin() {
  local d
  if [[ -x /usr/lib/postgresql/15/bin/postgres ]]; then echo /usr/lib/postgresql/15/bin; return; fi
  while read -r d; do
    [[ -x $d/postgres ]] && { echo "$d"; return; }
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r)
  die "no PostgreSQL server binaries under /usr/lib/postgresql"
}

# answers NAME: does the server really answer on its port?
answers() {
  local name=$1 port=${PORT[$1]}
  case ${KIND[$name]} in
    redis*) [[ $(rcli "$name" ping) == PONG ]] ;;
    zk*) [[ $(zk4 "$port" ruok) == imok ]] ;;
    partition-proxy) [[ $(proxy_ctl "$port" status) =~ ^(running|paused)$ ]] ;;
    postgres) "$(pg_bin)/pg_isready" -q -h "$HOST" -p "$port" -t 2 ;;
    mariadb) port_open "$port" &&
      timeout 5 mariadb-admin --no-defaults -S "$S/mariadb/mysqld.sock" -uroot \
        --connect-timeout=2 ping >/dev/null 2>&1 ;;
  esac
}

# wait_until NAME DESCRIPTION CMD...: poll CMD until it succeeds; fail if the
# server's process dies or TIMEOUT passes.
wait_until() {
  local name=$1 what=$2 pid; shift 2
  local deadline=$((SECONDS + TIMEOUT))
  while :; do
    "$@" && return 0
    pid=$(pid_of "$name")
    if [[ -n $pid ]] && ! alive "$pid"; then
      fail_server "$name" "the server exited while waiting for: $what"; return 1
    fi
    ((SECONDS < deadline)) || { fail_server "$name" "no $what within ${TIMEOUT}s"; return 1; }
    sleep 0.1
  done
}

# ---------------------------------------------------------------- install
# packages needed by each group
pkgs_for() {
  case $1 in
    redis) echo redis-server redis-tools openssl faketime ;;
    redlock | cluster) echo redis-server redis-tools openssl ;;
    zookeeper | zk-ensemble) echo zookeeper libslf4j-java libcurator-recipes-java ;;
    zk-follower) echo zookeeper libslf4j-java python3 ;;
    postgres) echo postgresql-15 ;;
    mariadb) echo mariadb-server mariadb-client ;;
  esac
}

installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }

# ensure_installed SERVER...: apt-get the packages those servers need, if missing
ensure_installed() {
  local -A need=()
  local s g p missing=()
  for s in "$@"; do
    for g in "${GROUPS_ORDER[@]}"; do
      [[ " ${GROUP[$g]} " == *" $s "* ]] && for p in $(pkgs_for "$g"); do need[$p]=1; done
    done
  done
  for p in "${!need[@]}"; do
    if [[ $p == postgresql-15 ]]; then
      installed postgresql-15 || installed postgresql || missing+=("$p")
    else
      installed "$p" || missing+=("$p")
    fi
  done
  ((${#missing[@]})) || return 0
  [[ $(id -u) == 0 ]] || die "installing ${missing[*]} needs root"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -q -y -o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0
             -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  # Keep the packages' own init scripts from starting servers on our ports.
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# made by fencelock tests/servers.sh during apt-get\nexit 101\n' >"$policy"
    chmod 755 "$policy"; made_policy=1
  fi
  local rc=0 log
  log=$(mktemp /tmp/fencelock-servers-apt.XXXXXX)
  {
    "${apt[@]}" update &&
    if [[ " ${missing[*]} " == *" postgresql-15 "* ]] && ! apt-cache show postgresql-15 >/dev/null 2>&1; then
      missing=("${missing[@]/postgresql-15/postgresql}")
    fi &&
    "${apt[@]}" install --no-install-recommends "${missing[@]}"
  } >"$log" 2>&1 || rc=$?
  ((made_policy)) && rm -f "$policy"
  if ((rc)); then tail -n 40 "$log" >&2; rm -f "$log"; die "apt-get failed (exit $rc)"; fi
  rm -f "$log"
  say "installed ${missing[*]}"
}

# ---------------------------------------------------------------- redis
redis_conf() { # redis_conf NAME: write NAME's redis.conf
  local name=$1 d port=${PORT[$1]}; d=$(dir_of "$1")
  {
    cat <<EOF
# generated by tests/servers.sh: a test server, nothing worth keeping
bind $HOST
protected-mode yes
daemonize no
dir $d
logfile ""
save ""
appendonly no
shutdown-timeout 2
enable-debug-command local
repl-diskless-sync yes
repl-diskless-sync-delay 0
EOF
    case ${KIND[$name]} in
      redis-tls)
        cat <<EOF
port 0
tls-port $port
tls-cert-file $d/server.crt
tls-key-file $d/server.key
tls-ca-cert-file $d/ca.crt
tls-auth-clients no
EOF
        ;;
      redis-acl)
        echo "port $port"
        echo "user default on >$ACL_ADMIN_PASS ~* &* +@all"
        echo "user $ACL_USER on >$ACL_PASS resetkeys ~fencelock:* resetchannels &fencelock:* -@all ${ACL_COMMANDS//$'\n'/}"
        ;;
      redis-replica)
        echo "port $port"
        echo "replicaof $HOST ${PORT[redis]}"
        ;;
      redis-cluster)
        echo "port $port"
        echo "cluster-enabled yes"
        echo "cluster-config-file nodes.conf"
        echo "cluster-node-timeout 5000"
        ;;
      *) echo "port $port" ;;
    esac
  } >"$d/redis.conf"
}

make_tls_cert() { # a throwaway CA and a server certificate for 127.0.0.1
  local d=$1
  [[ -s $d/ca.crt && -s $d/server.crt && -s $d/server.key ]] && return 0
  (
    cd "$d"
    openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
      -keyout ca.key -out ca.crt -days 3650 -subj "/CN=fencelock test CA" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
      -keyout server.key -out server.csr -subj "/CN=$HOST"
    printf '%s\n' "subjectAltName=IP:$HOST,DNS:localhost" "basicConstraints=critical,CA:FALSE" \
      "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out server.crt -days 3650 -extfile server.ext
    chmod 644 ca.crt server.crt
  ) >>"$d/init.log" 2>&1
}

launch_redis() {
  local name=$1 d; d=$(dir_of "$1")
  if [[ ${KIND[$name]} == redis-tls ]]; then
    make_tls_cert "$d" || { fail_server "$name" "could not make the TLS certificate"; return 1; }
  fi
  redis_conf "$name"
  spawn "$d/pid" "$d/server.log" redis-server "$d/redis.conf"
}

# --------------------------------------------------------------- zookeeper
zk_conf() { # zk_conf NAME
  local name=$1 d i sync_limit=10; d=$(dir_of "$1")
  # zk-follower: a follower cut off from its leader serves its clients for syncLimit x tickTime
  # (6 s) before it notices, clearly longer than the 3 s sessions of the test that cuts it.
  [[ ${KIND[$name]} == zk-follower ]] && sync_limit=12
  mkdir -p "$d/data"
  {
    cat <<EOF
# generated by tests/servers.sh: a test server, nothing worth keeping
tickTime=500
initLimit=20
syncLimit=$sync_limit
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$d/data
clientPort=${PORT[$name]}
clientPortAddress=$HOST
forceSync=no
maxClientCnxns=0
4lw.commands.whitelist=ruok,srvr,stat,mntr
admin.enableServer=false
EOF
    if [[ ${KIND[$name]} == zk-ensemble ]]; then
      for i in 1 2 3; do
        echo "server.$i=$HOST:$((ZKE_PEER_BASE + i)):$((ZKE_ELECTION_BASE + i))"
      done
    fi
    if [[ ${KIND[$name]} == zk-follower ]]; then
      for i in 1 2 3; do
        if [[ $name == zk-follower-3 && $i != 3 ]]; then
          # node 3's own links (it connects out: to the leader's quorum port, and to the lower
          # sids' election ports) go through the proxy; see zkf_proxy_links
          echo "server.$i=$HOST:$((ZKF_PROXY_BASE + i)):$((ZKF_PROXY_BASE + 2 + i))"
        else
          echo "server.$i=$HOST:$((ZKF_PEER_BASE + i)):$((ZKF_ELECTION_BASE + i))"
        fi
      done
    fi
  } >"$d/zoo.cfg"
  if [[ ${KIND[$name]} == zk-ensemble || ${KIND[$name]} == zk-follower ]]; then
    echo "${name##*-}" >"$d/data/myid"
  fi
}

launch_zk() {
  local name=$1 d main=org.apache.zookeeper.server.ZooKeeperServerMain java; d=$(dir_of "$1")
  [[ ${KIND[$name]} == zk-ensemble || ${KIND[$name]} == zk-follower ]] &&
    main=org.apache.zookeeper.server.quorum.QuorumPeerMain
  [[ -r /usr/share/java/zookeeper.jar ]] || { fail_server "$name" "/usr/share/java/zookeeper.jar is missing"; return 1; }
  java=$(command -v java) || { fail_server "$name" "no java on PATH"; return 1; }
  zk_conf "$name"
  local opts=("${ZK_JAVA_OPTS[@]}")
  # A node back from a partition retries the election every 2 s at most (60 s by default).
  [[ ${KIND[$name]} == zk-follower ]] && opts+=(-Dzookeeper.fastleader.maxNotificationInterval=2000)
  spawn "$d/pid" "$d/server.log" "$java" "${opts[@]}" -cp "$ZK_CLASSPATH" "$main" "$d/zoo.cfg"
}

# --------------------------------------------------------- partition proxy
# zkf_proxy_links: LISTEN:TARGET for zk-follower-3's links to nodes 1 and 2 (quorum, election)
zkf_proxy_links() {
  local i
  for i in 1 2; do echo "$((ZKF_PROXY_BASE + i)):$((ZKF_PEER_BASE + i))"; done
  for i in 1 2; do echo "$((ZKF_PROXY_BASE + 2 + i)):$((ZKF_ELECTION_BASE + i))"; done
}

launch_proxy() {
  local name=$1 d py script links; d=$(dir_of "$1")
  script=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/partition_proxy.py
  [[ -r $script ]] || { fail_server "$name" "$script is missing"; return 1; }
  py=/usr/bin/python3
  [[ -x $py ]] || py=$(command -v python3) || { fail_server "$name" "no python3"; return 1; }
  mapfile -t links < <(zkf_proxy_links)
  spawn "$d/pid" "$d/server.log" "$py" -u "$script" "${PORT[$name]}" "${links[@]}"
}

# ---------------------------------------------------------------- postgres
launch_postgres() {
  local name=$1 d bin port=${PORT[$1]}; d=$(dir_of "$1"); bin=$(pg_bin)
  id postgres >/dev/null 2>&1 || { fail_server "$name" "there is no 'postgres' user"; return 1; }
  chown postgres:postgres "$d"
  if [[ ! -s $d/data/PG_VERSION ]]; then
    rm -rf "$d/data" "$d/.provisioned"
    (cd "$d" && runuser -u postgres -- "$bin/initdb" -D "$d/data" -U postgres -E UTF8 --no-locale \
        --auth-local=trust --auth-host=scram-sha-256 --no-sync --no-instructions) \
      >>"$d/init.log" 2>&1 || { fail_server "$name" "initdb failed"; return 1; }
    cat >>"$d/data/postgresql.conf" <<EOF

# fencelock test server (tests/servers.sh): speed over durability
listen_addresses = '$HOST'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
logging_collector = off
EOF
  fi
  install -d -o postgres -g postgres "$d/sock"
  touch "$d/server.log"; chown postgres:postgres "$d/server.log"
  (cd "$d" && detached runuser -u postgres -- "$bin/pg_ctl" -D "$d/data" -l "$d/server.log" -w -t "$TIMEOUT" \
      -o "-p $port -c listen_addresses=$HOST -c unix_socket_directories=$d/sock" start) \
    >>"$d/init.log" 2>&1 || { fail_server "$name" "pg_ctl start failed"; return 1; }
}

provision_postgres() {
  local name=$1 d; d=$(dir_of "$1")
  [[ -e $d/.provisioned ]] && return 0
  local psql=("$(pg_bin)/psql" -X -q -v ON_ERROR_STOP=1 -h "$d/sock" -p "${PORT[$name]}" -U postgres)
  (cd "$d" && runuser -u postgres -- "${psql[@]}" -d postgres) >>"$d/init.log" 2>&1 <<EOF || { fail_server "$name" "provisioning failed"; return 1; }
CREATE ROLE $DB_USER LOGIN SUPERUSER PASSWORD '$DB_PASS';
CREATE ROLE $DB_APP_USER LOGIN PASSWORD '$DB_APP_PASS';
CREATE DATABASE $DB_NAME OWNER $DB_USER;
REVOKE ALL ON DATABASE $DB_NAME FROM PUBLIC;
REVOKE CONNECT ON DATABASE postgres FROM PUBLIC;
GRANT CONNECT ON DATABASE $DB_NAME TO $DB_APP_USER;
\\connect $DB_NAME
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO $DB_APP_USER;
-- whatever $DB_USER creates later: the app role may read and write rows, nothing more
ALTER DEFAULT PRIVILEGES FOR ROLE $DB_USER GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO $DB_APP_USER;
ALTER DEFAULT PRIVILEGES FOR ROLE $DB_USER GRANT USAGE, SELECT ON SEQUENCES TO $DB_APP_USER;
ALTER DEFAULT PRIVILEGES FOR ROLE $DB_USER GRANT USAGE ON SCHEMAS TO $DB_APP_USER;
EOF
  touch "$d/.provisioned"
}

# ----------------------------------------------------------------- mariadb
launch_mariadb() {
  local name=$1 d; d=$(dir_of "$1")
  cat >"$d/my.cnf" <<EOF
# generated by tests/servers.sh: a test server, nothing worth keeping
[mysqld]
user = root
datadir = $d/data
socket = $d/mysqld.sock
pid-file = $d/mariadbd.pid
port = ${PORT[$name]}
bind-address = $HOST
skip-name-resolve
skip-log-bin
innodb_flush_log_at_trx_commit = 0
innodb_doublewrite = 0
sync_binlog = 0
max_connections = 200
EOF
  if [[ ! -d $d/data/mysql ]]; then
    rm -rf "$d/data" "$d/.provisioned"
    mariadb-install-db --defaults-file="$d/my.cnf" --skip-test-db \
      --auth-root-authentication-method=socket >>"$d/init.log" 2>&1 </dev/null 9>&- ||
      { fail_server "$name" "mariadb-install-db failed"; return 1; }
  fi
  spawn "$d/pid" "$d/server.log" mariadbd --defaults-file="$d/my.cnf"
}

provision_mariadb() {
  local name=$1 d; d=$(dir_of "$1")
  [[ -e $d/.provisioned ]] && return 0
  timeout 30 mariadb --no-defaults -S "$d/mysqld.sock" -uroot >>"$d/init.log" 2>&1 <<EOF || { fail_server "$name" "provisioning failed"; return 1; }
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'$HOST' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'$HOST';
CREATE USER IF NOT EXISTS '$DB_APP_USER'@'$HOST' IDENTIFIED BY '$DB_APP_PASS';
GRANT SELECT, INSERT, UPDATE, DELETE ON $DB_NAME.* TO '$DB_APP_USER'@'$HOST';
EOF
  touch "$d/.provisioned"
}

# ---------------------------------------------------------- start one server
# start_one NAME: launch NAME if it is not running, wait until it answers.
start_one() {
  local name=$1 d t0=$SECONDS; d=$(dir_of "$1")
  if running "$name"; then
    local was; was=$(cat "$d/port" 2>/dev/null || true)
    if [[ -n $was && $was != "${PORT[$name]}" ]]; then
      say "warning: $name already runs on port $was, not ${PORT[$name]}: stop it first to move it"
    fi
    say "$name (port ${was:-${PORT[$name]}}) already running, pid $(pid_of "$name")"
    return 0
  fi
  mkdir -p "$d"
  if port_open "${PORT[$name]}"; then
    fail_server "$name" "port ${PORT[$name]} is taken by another process (set FENCELOCK_TEST_*_PORT to move it)"
    return 1
  fi
  if [[ ${KIND[$name]} == partition-proxy ]]; then
    local link
    for link in $(zkf_proxy_links); do
      if port_open "${link%%:*}"; then
        fail_server "$name" "port ${link%%:*} is taken by another process (set FENCELOCK_TEST_ZK_FOLLOWER_PROXY_PORT_BASE to move it)"
        return 1
      fi
    done
  fi
  : >"$d/init.log"
  echo "=== $(date -Is) start" >>"$d/server.log"
  case ${KIND[$name]} in
    redis*) launch_redis "$name" ;;
    zk*) launch_zk "$name" ;;
    partition-proxy) launch_proxy "$name" ;;
    postgres) launch_postgres "$name" ;;
    mariadb) launch_mariadb "$name" ;;
  esac || return 1
  wait_until "$name" "answer" answers "$name" || return 1
  case ${KIND[$name]} in
    postgres) provision_postgres "$name" || return 1 ;;
    mariadb) provision_mariadb "$name" || return 1 ;;
  esac
  echo "${PORT[$name]}" >"$d/port"
  say "$name (port ${PORT[$name]}) started in $((SECONDS - t0))s, pid $(pid_of "$name")"
}

# --------------------------------------------------- after-start group checks
replica_up() { rcli redis-replica info replication | grep -q '^master_link_status:up'; }

zk_serving() { zk4 "${PORT[$1]}" srvr | grep -Eq '^Mode: (leader|follower|standalone)'; }

cluster_ok() { rcli "$1" cluster info | grep -q '^cluster_state:ok'; }

cluster_consistent() { # every node knows 3 nodes and all 16384 slots are assigned
  local n info
  for n in ${GROUP[cluster]}; do
    info=$(rcli "$n" cluster info) || return 1
    grep -q '^cluster_slots_assigned:16384' <<<"$info" || return 1
    grep -q '^cluster_known_nodes:3' <<<"$info" || return 1
  done
}

cluster_create() {
  local n addrs=()
  for n in ${GROUP[cluster]}; do
    rcli "$n" flushall >/dev/null
    rcli "$n" cluster reset hard >/dev/null
    addrs+=("$HOST:${PORT[$n]}")
  done
  say "creating the redis cluster on ${addrs[*]}"
  timeout "$TIMEOUT" redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
    >>"$S/cluster-1/init.log" 2>&1 </dev/null
}

all_cluster_ok() { local n; for n in ${GROUP[cluster]}; do cluster_ok "$n" || return 1; done; }

ensure_cluster() {
  local n
  for n in ${GROUP[cluster]}; do
    running "$n" || { say "warning: $n is not running; the redis cluster is incomplete"; return 0; }
  done
  if ! cluster_consistent; then
    cluster_create || { fail_server cluster-1 "redis-cli --cluster create failed"; return 1; }
  fi
  local saved=$TIMEOUT
  if ! TIMEOUT=$((saved / 2)) wait_until cluster-1 "cluster_state:ok on all nodes" all_cluster_ok 2>/dev/null; then
    # nodes.conf files that no longer agree: start the cluster afresh
    TIMEOUT=$saved
    cluster_create || { fail_server cluster-1 "redis-cli --cluster create failed"; return 1; }
    wait_until cluster-1 "cluster_state:ok on all nodes" all_cluster_ok || return 1
  fi
  TIMEOUT=$saved
  say "redis cluster: cluster_state:ok on ${GROUP[cluster]}"
}

ensure_ensemble() {
  local n up=()
  for n in ${GROUP[zk-ensemble]}; do running "$n" && up+=("$n"); done
  if ((${#up[@]} < 2)); then
    ((${#up[@]})) && say "warning: only ${up[*]} of the zk ensemble runs: no quorum"
    return 0
  fi
  for n in "${up[@]}"; do
    wait_until "$n" "quorum (srvr Mode: leader/follower)" zk_serving "$n" || return 1
  done
  say "zk ensemble: ${up[*]} serve ($(for n in "${up[@]}"; do zk4 "${PORT[$n]}" srvr | sed -n 's/^Mode: //p'; done | sort | uniq -c | xargs))"
}

zk_mode() { zk4 "${PORT[$1]}" srvr | sed -n 's/^Mode: //p'; }
zkf_led() { [[ $(zk_mode zk-follower-1) == leader || $(zk_mode zk-follower-2) == leader ]]; }
zkf_follows() { [[ $(zk_mode zk-follower-3) == follower ]]; }

# ensure_zk_follower: node 1 or 2 leads and node 3 follows (through the proxy, not paused)
ensure_zk_follower() {
  local n p=${PORT[zk-follower-proxy]}
  for n in ${GROUP[zk-follower]}; do
    running "$n" || { say "warning: $n is not running; the zk-follower group is incomplete"; return 0; }
  done
  if [[ $(proxy_ctl "$p" status) == paused ]]; then
    say "zk-follower-proxy was left paused: resuming it"
    proxy_ctl "$p" resume >/dev/null
  fi
  for n in zk-follower-1 zk-follower-2 zk-follower-3; do
    wait_until "$n" "quorum (srvr Mode: leader/follower)" zk_serving "$n" || return 1
  done
  if [[ $(zk_mode zk-follower-3) == leader ]]; then
    say "zk-follower-3 leads: restarting it so that it joins as a follower"
    stop_servers zk-follower-3
    wait_until zk-follower-1 "a leader among zk-follower-1 and -2" zkf_led || return 1
    start_one zk-follower-3 || return 1
  fi
  wait_until zk-follower-3 "srvr Mode: follower" zkf_follows || return 1
  say "zk-follower: $(for n in 1 2 3; do printf '%s ' "$n=$(zk_mode "zk-follower-$n")"; done)(node 3 through the proxy on ${PORT[zk-follower-proxy]})"
}

# start_zk_follower SERVER...: the proxy, then nodes 1 and 2, and node 3 once one of them leads
# (the highest sid wins an election among equals: started with the others, node 3 would lead).
start_zk_follower() {
  local s rc=0 members=" $* "
  local -A pids=()
  if [[ $members == *" zk-follower-proxy "* || $members == *" zk-follower-3 "* ]]; then
    start_one zk-follower-proxy || return 1
  fi
  for s in zk-follower-1 zk-follower-2; do
    [[ $members == *" $s "* ]] || continue
    start_one "$s" >"$S/.out/$s" 2>&1 &
    pids[$s]=$!
  done
  for s in "${!pids[@]}"; do
    wait "${pids[$s]}" || rc=1
    cat "$S/.out/$s"; rm -f "$S/.out/$s"
  done
  ((rc == 0)) || return 1
  if [[ $members == *" zk-follower-3 "* ]] && ! running zk-follower-3; then
    if ! { running zk-follower-1 && running zk-follower-2; }; then
      fail_server zk-follower-3 "it joins only once zk-follower-1 and -2 run (start zk-follower)"
      return 1
    fi
    wait_until zk-follower-1 "a leader among zk-follower-1 and -2" zkf_led || return 1
  fi
  if [[ $members == *" zk-follower-3 "* ]]; then start_one zk-follower-3 || return 1; fi
  ensure_zk_follower
}

# start_group GROUP SERVER...: start the servers (of one group) in parallel,
# then check what the group needs beyond each server answering.
start_group() {
  local g=$1 s rc=0; shift
  local -A pids=()
  if [[ $g == zk-follower ]]; then start_zk_follower "$@"; return; fi
  for s in "$@"; do
    mkdir -p "$S/$s"
    start_one "$s" >"$S/.out/$s" 2>&1 &
    pids[$s]=$!
  done
  for s in "$@"; do
    wait "${pids[$s]}" || rc=1
    cat "$S/.out/$s"; rm -f "$S/.out/$s"
  done
  ((rc == 0)) || return 1
  case $g in
    redis)
      if [[ " $* " == *" redis "* || " $* " == *" redis-replica "* ]] &&
          running redis && running redis-replica; then
        wait_until redis-replica "master_link_status:up" replica_up || return 1
        say "redis-replica: replicating from ${PORT[redis]}"
      fi ;;
    cluster) ensure_cluster || return 1 ;;
    # ruok answers imok before the server takes sessions; srvr reports a mode only once it does.
    zookeeper) wait_until zookeeper "sessions (srvr Mode: standalone)" zk_serving zookeeper || return 1 ;;
    zk-ensemble) ensure_ensemble || return 1 ;;
  esac
  return 0
}

# start_servers SERVER...: one parallel job per group
start_servers() {
  local g s rc=0 members
  local -A pids=()
  mkdir -p "$S/.out"
  for g in "${GROUPS_ORDER[@]}"; do
    members=()
    for s in "$@"; do [[ " ${GROUP[$g]} " == *" $s "* ]] && members+=("$s"); done
    ((${#members[@]})) || continue
    start_group "$g" "${members[@]}" >"$S/.out/group-$g" 2>&1 &
    pids[$g]=$!
  done
  for g in "${GROUPS_ORDER[@]}"; do
    [[ -n ${pids[$g]:-} ]] || continue
    wait "${pids[$g]}" || rc=1
    cat "$S/.out/group-$g"; rm -f "$S/.out/group-$g"
  done
  return "$rc"
}

# stop_servers SERVER...: signal all, then wait until they have exited
stop_servers() {
  local s pid sig
  local -A pids=()
  for s in "$@"; do
    running "$s" || continue
    pid=$(pid_of "$s")
    sig=TERM
    [[ ${KIND[$s]} == postgres ]] && sig=INT   # fast shutdown
    kill -s "$sig" "$pid" 2>/dev/null || true
    pids[$s]=$pid
  done
  local deadline=$((SECONDS + 30))
  for s in "$@"; do
    [[ -n ${pids[$s]:-} ]] || continue
    pid=${pids[$s]}
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    if alive "$pid"; then
      say "warning: $s (pid $pid) did not stop in 30s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      if [[ ${KIND[$s]} == postgres ]]; then pkill -KILL -P "$pid" 2>/dev/null || true; fi
      while alive "$pid"; do sleep 0.1; done
    fi
    [[ ${KIND[$s]} == postgres ]] || rm -f "$S/$s/pid"
    say "$s stopped"
  done
}

status_servers() {
  local s pid state rc=0 extra
  printf '%-17s %-6s %-8s %-8s %s\n' SERVER PORT STATE PID ANSWERS
  for s in "$@"; do
    extra=
    if running "$s"; then
      pid=$(pid_of "$s") state=running
      if answers "$s"; then
        extra=yes
        case $s in
          redis-replica) extra+=" ($(rcli "$s" info replication | tr -d '\r' | grep '^master_link_status'))" ;;
          cluster-*) extra+=" ($(rcli "$s" cluster info | tr -d '\r' | grep '^cluster_state'))" ;;
          zk-follower-proxy) extra+=" ($(proxy_ctl "${PORT[$s]}" status))" ;;
          zookeeper | zk-*) extra+=" ($(zk4 "${PORT[$s]}" srvr | grep '^Mode' || echo 'not serving'))" ;;
        esac
      else
        extra=no rc=3
      fi
    else
      pid=- state=stopped extra=- rc=3
    fi
    printf '%-17s %-6s %-8s %-8s %s\n' "$s" "${PORT[$s]}" "$state" "$pid" "$extra"
  done
  return "$rc"
}

print_env() {
  local i list
  echo "FENCELOCK_TEST_SERVERS_DIR=$S"
  echo "FENCELOCK_TEST_REDIS_URL=redis://$HOST:${PORT[redis]}"
  echo "FENCELOCK_TEST_REDIS_REPLICA_URL=redis://$HOST:${PORT[redis-replica]}"
  echo "FENCELOCK_TEST_REDIS_TLS_URL=rediss://$HOST:${PORT[redis-tls]}?ca=$S/redis-tls/ca.crt"
  echo "FENCELOCK_TEST_REDIS_ACL_URL=redis://$ACL_USER:$ACL_PASS@$HOST:${PORT[redis-acl]}"
  echo "FENCELOCK_TEST_REDIS_ACL_ADMIN_URL=redis://default:$ACL_ADMIN_PASS@$HOST:${PORT[redis-acl]}"
  list=; for i in 1 2 3 4 5; do list+="${list:+,}$HOST:${PORT[redlock-$i]}"; done
  # max_ttl=30s (the default ttl): a master restarted by the fault tests abstains for
  # max_ttl + 2 x max_skew (30.2 s; 61 s with the defaults), which those tests wait out.
  # max_skew=100ms: the five masters share this machine's clock, and the smaller drift margin
  # lets the language suites use their short ttls (500 ms) on Redlock too.
  # Quoted: the output is eval'ed, and & would end the assignment there.
  echo "FENCELOCK_TEST_REDLOCK_URL='redlock://$list?max_ttl=30s&max_skew=100ms'"
  list=; for i in 1 2 3; do list+="${list:+,}$HOST:${PORT[cluster-$i]}"; done
  echo "FENCELOCK_TEST_REDIS_CLUSTER_URL=redis+cluster://$list"
  echo "FENCELOCK_TEST_ZK_URL=zk://$HOST:${PORT[zookeeper]}"
  list=; for i in 1 2 3; do list+="${list:+,}$HOST:${PORT[zk-ensemble-$i]}"; done
  echo "FENCELOCK_TEST_ZK_ENSEMBLE_URL=zk://$list"
  list=; for i in 1 2 3; do list+="${list:+,}$HOST:${PORT[zk-follower-$i]}"; done
  echo "FENCELOCK_TEST_ZK_FOLLOWER_URL=zk://$list"
  echo "FENCELOCK_TEST_ZK_FOLLOWER_PROXY_URL=tcp://$HOST:${PORT[zk-follower-proxy]}"
  echo "FENCELOCK_TEST_POSTGRES_URL=postgres://$DB_USER:$DB_PASS@$HOST:${PORT[postgres]}/$DB_NAME"
  echo "FENCELOCK_TEST_POSTGRES_APP_URL=postgres://$DB_APP_USER:$DB_APP_PASS@$HOST:${PORT[postgres]}/$DB_NAME"
  echo "FENCELOCK_TEST_MARIADB_URL=mariadb://$DB_USER:$DB_PASS@$HOST:${PORT[mariadb]}/$DB_NAME"
  echo "FENCELOCK_TEST_MARIADB_APP_URL=mariadb://$DB_APP_USER:$DB_APP_PASS@$HOST:${PORT[mariadb]}/$DB_NAME"
}

# One start/stop/install at a time (tests of several languages may call us at once).
take_lock() {
  mkdir -p "$S"
  touch "$S/.fencelock-servers"
  exec 9>"$S/.lock"
  flock -w "$LOCK_TIMEOUT" 9 || die "another tests/servers.sh holds $S/.lock"
}

need_root() { [[ $(id -u) == 0 ]] || die "run as root (apt-get, runuser, servers on loopback)"; }

# ------------------------------------------------------------------- main
cmd=${1:-}
(($#)) && shift
case $cmd in
  install)
    need_root; resolve group "$@"; take_lock
    ensure_installed "${RESOLVED[@]}"
    say "packages ready"
    ;;
  start)
    need_root; resolve group "$@"; take_lock
    ensure_installed "${RESOLVED[@]}"
    start_servers "${RESOLVED[@]}" || die "start failed (logs under $S; 'tests/servers.sh clean' starts afresh)"
    ;;
  stop)
    resolve group "$@"
    [[ -d $S ]] || exit 0
    take_lock
    stop_servers "${RESOLVED[@]}"
    ;;
  restart)
    (($#)) || die "usage: tests/servers.sh restart NAME..."
    need_root; resolve server "$@"; take_lock
    ensure_installed "${RESOLVED[@]}"
    stop_servers "${RESOLVED[@]}"
    start_servers "${RESOLVED[@]}" || die "restart failed (logs under $S; 'tests/servers.sh clean' starts afresh)"
    ;;
  status)
    resolve group "$@"
    status_servers "${RESOLVED[@]}"
    ;;
  env)
    (($# == 0)) || die "usage: tests/servers.sh env"
    print_env
    ;;
  clean)
    (($# == 0)) || die "usage: tests/servers.sh clean"
    [[ -d $S ]] || exit 0
    [[ -e $S/.fencelock-servers ]] || die "$S was not made by this script; not deleting it"
    take_lock
    stop_servers "${SERVERS[@]}"
    rm -rf "$S"
    say "deleted $S"
    ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
