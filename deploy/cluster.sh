#!/bin/sh
# cluster.sh: N kvloom replicas behind HAProxy on this machine (docs/scale-out.md).
#
#   deploy/cluster.sh start N [kvloom serve arguments]   start; the front URL is the last line
#   deploy/cluster.sh add [kvloom serve arguments]       one more replica, HAProxy not restarted
#   deploy/cluster.sh kill I                             kill -9 replica I (tests: a crash)
#   deploy/cluster.sh drain I                            SIGTERM replica I: its graceful shutdown
#   deploy/cluster.sh status                             the replicas: name, address, pid, state
#   deploy/cluster.sh ctl "COMMAND"                      one HAProxy runtime API command ("show stat")
#   deploy/cluster.sh stop                               ends everything `start` and `add` started
#   deploy/cluster.sh config N                           prints the HAProxy configuration for N
#                                                        replicas on 127.0.0.1:8081.. (no start)
#
# Environment:
#   DEPLOY_POLICY  roundrobin | hash | dualmap (default)
#   DEPLOY_DIR     state directory: pids, logs, haproxy.cfg (default /tmp/kvloom-cluster)
#   DEPLOY_PORT    the front port on 127.0.0.1 (default: a free one)
#   DEPLOY_SLOTS   server slots in the backend (default 8, at least N): `add` fills the next
#   DEPLOY_NETNS   1: each replica in its own network namespace (default when root and
#                  `ip netns` works), 0: each on its own port of 127.0.0.1
#   DEPLOY_TTFT_SLO_S, DEPLOY_POLL_MS   dualmap's TTFT SLO and load poll period (kvloom.lua)
#   DEPLOY_SPILL   dualmap: a new session leaves its prefix's replicas past SPILL x SLO (0.5)
#   KVLOOM_BIN     the kvloom binary (default build/kvloom)
# `start` returns once every replica answers /health and HAProxy routes to all of them.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${KVLOOM_BIN:-build/kvloom}
case "$BIN" in /*) ;; *) BIN="$(pwd)/$BIN" ;; esac
DIR=${DEPLOY_DIR:-/tmp/kvloom-cluster}
POLICY=${DEPLOY_POLICY:-dualmap}
SLOTS=${DEPLOY_SLOTS:-8}

die() { echo "cluster.sh: $*" >&2; exit 1; }

case "$POLICY" in roundrobin | hash | dualmap) ;; *) die "DEPLOY_POLICY=$POLICY: use roundrobin, hash or dualmap" ;; esac

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Talks to HAProxy's runtime API (the stats socket).
hactl() { python3 - "$DIR/haproxy.sock" "$1" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
out = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    out += d
sys.stdout.write(out.decode())
EOF
}

# config SLOTS POLICY FRONT_PORT: the whole haproxy.cfg on stdout, a server
# for each address of $ADDRS;
# slots without an address are declared disabled (filled by `add`).
config() {
    n_slots=$1; policy=$2; front=$3
    cat <<EOF
# HAProxy (2.6) in front of kvloom replicas: written by deploy/cluster.sh
# (policy $policy). docs/scale-out.md explains every choice.
global
    # the router's settings (kvloom.lua reads them; before lua-load)
    setenv KVLOOM_POLICY $policy
    setenv KVLOOM_BACKEND kvloom
    setenv KVLOOM_TTFT_SLO_S ${DEPLOY_TTFT_SLO_S:-1.0}
    setenv KVLOOM_POLL_MS ${DEPLOY_POLL_MS:-200}
    setenv KVLOOM_SPILL ${DEPLOY_SPILL:-0.5}
    lua-load $HERE/haproxy/kvloom.lua
    # request bodies are read whole to find the affinity key (and retried
    # whole on another replica): the buffer holds the largest routed body
    tune.bufsize 1048576
    stats socket $DIR/haproxy.sock mode 600 level admin
    nbthread 2

defaults
    mode http
    log stdout format raw local0 err
    timeout connect 2s
    timeout client 600s
    timeout server 600s
    timeout queue 60s
    timeout http-request 30s
    # a replica that refuses or drops a request before answering it (dead,
    # draining, restarting): the request goes to another one
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response junk-response 503
    option http-buffer-request

frontend kvloom_front
    bind 127.0.0.1:$front
    http-request lua.kvloom_route
    default_backend kvloom

backend kvloom
EOF
    case $policy in
    roundrobin) echo "    balance roundrobin" ;;
    hash)
        echo "    # consistent hashing of the affinity key, no server above 1.5x the mean load"
        echo "    balance hash var(txn.kvloom_key)"
        echo "    hash-type consistent"
        echo "    hash-balance-factor 150" ;;
    dualmap)
        echo "    # kvloom.lua picks (txn.kvloom_srv); leastconn when it did not"
        echo "    balance leastconn" ;;
    esac
    cat <<EOF
    option httpchk GET /health
    http-check expect status 200
    default-server check inter 500ms fall 2 rise 1 observe layer4 error-limit 1 on-error mark-down
    http-response set-header X-Kvloom-Replica %s
    http-response lua.kvloom_done
EOF
    i=1
    while [ $i -le "$n_slots" ]; do
        [ "$policy" = dualmap ] && echo "    use-server r$i if { var(txn.kvloom_srv) -m str r$i }"
        i=$((i + 1))
    done
    i=1
    # shellcheck disable=SC2086
    set -- $ADDRS
    while [ $i -le "$n_slots" ]; do
        if [ $# -gt 0 ]; then echo "    server r$i $1"; shift
        else echo "    server r$i 127.0.0.1:9 disabled"; fi
        i=$((i + 1))
    done
}

netns_ok() {
    [ "$(id -u)" = 0 ] || return 1
    command -v ip >/dev/null 2>&1 || return 1
    ip netns add kvl-probe-$$ 2>/dev/null || return 1
    ip netns del kvl-probe-$$
}

# start_replica I ARGS...: starts replica I; writes $DIR/rI.{pid,addr,log}
start_replica() {
    i=$1; shift
    if [ "$(cat "$DIR/netns")" = 1 ]; then
        tag=$(cat "$DIR/tag")
        ns=kvl$tag-r$i
        ip netns add "$ns"
        ip link add "kv$tag-$i" type veth peer name eth0 netns "$ns"
        ip addr add "10.$((100 + tag)).$i.1/24" dev "kv$tag-$i"
        ip link set "kv$tag-$i" up
        ip netns exec "$ns" ip addr add "10.$((100 + tag)).$i.2/24" dev eth0
        ip netns exec "$ns" ip link set eth0 up
        ip netns exec "$ns" ip link set lo up
        echo "$ns" >> "$DIR/namespaces"
        ip netns exec "$ns" "$BIN" serve --host "10.$((100 + tag)).$i.2" --port 8080 --max-conns-per-ip 1024 \
            --ready-file "$DIR/r$i.port" "$@" > "$DIR/r$i.log" 2>&1 &
        echo $! > "$DIR/r$i.pid"
        echo "10.$((100 + tag)).$i.2:8080" > "$DIR/r$i.addr"
    else
        "$BIN" serve --port 0 --ready-file "$DIR/r$i.port" "$@" > "$DIR/r$i.log" 2>&1 &
        echo $! > "$DIR/r$i.pid"
    fi
}

# wait_replica I: until it listens and answers /health (60 s)
wait_replica() {
    i=$1; k=0
    while [ ! -s "$DIR/r$i.port" ]; do
        kill -0 "$(cat "$DIR/r$i.pid")" 2>/dev/null || { tail -5 "$DIR/r$i.log" >&2; die "replica r$i exited"; }
        k=$((k + 1)); [ $k -lt 600 ] || die "replica r$i did not start in 60 s"
        sleep 0.1
    done
    [ -s "$DIR/r$i.addr" ] || echo "127.0.0.1:$(cat "$DIR/r$i.port")" > "$DIR/r$i.addr"
    addr=$(cat "$DIR/r$i.addr")
    k=0
    until curl -s -m 2 -o /dev/null "http://$addr/health"; do
        k=$((k + 1)); [ $k -lt 100 ] || die "replica r$i ($addr) does not answer /health"
        sleep 0.1
    done
}

# wait_routed I: until HAProxy sees replica I up
wait_routed() {
    k=0
    while :; do
        st=$(hactl "show servers state kvloom" | awk -v s="r$1" '$4 == s {print $6}')
        [ "$st" = 2 ] && return 0 # SRV_ST_RUNNING
        k=$((k + 1)); [ $k -lt 100 ] || die "HAProxy does not see r$1 up"
        sleep 0.1
    done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
config)
    n=${1:?config N}
    ADDRS=""
    i=1
    while [ $i -le "$n" ]; do ADDRS="$ADDRS 127.0.0.1:$((8080 + i))"; i=$((i + 1)); done
    s=$SLOTS; [ "$s" -ge "$n" ] || s=$n
    config "$s" "$POLICY" "${DEPLOY_PORT:-8080}"
    ;;
start)
    n=${1:?start N [serve arguments]}
    shift
    [ "$n" -ge 1 ] 2>/dev/null || die "start N: N must be a number >= 1"
    [ -x "$BIN" ] || die "no kvloom binary at $BIN (KVLOOM_BIN)"
    command -v haproxy >/dev/null || die "haproxy is not installed (tools/setup.sh)"
    [ ! -e "$DIR/haproxy.pid" ] || die "$DIR: a cluster runs there (stop it first, or set DEPLOY_DIR)"
    mkdir -p "$DIR"
    rm -f "$DIR"/r*.port "$DIR"/r*.addr "$DIR"/r*.pid "$DIR/namespaces"
    if [ "${DEPLOY_NETNS:-auto}" = 1 ] || { [ "${DEPLOY_NETNS:-auto}" = auto ] && netns_ok; }; then
        echo 1 > "$DIR/netns"
        echo $(( $$ % 100 )) > "$DIR/tag"
    else
        echo 0 > "$DIR/netns"
    fi
    printf '%s\n' "$@" > "$DIR/serve_args"
    s=$SLOTS; [ "$s" -ge "$n" ] || s=$n
    echo "$s" > "$DIR/slots"
    echo "$POLICY" > "$DIR/policy"
    i=1
    while [ $i -le "$n" ]; do start_replica $i "$@"; i=$((i + 1)); done
    ADDRS=""
    i=1
    while [ $i -le "$n" ]; do wait_replica $i; ADDRS="$ADDRS $(cat "$DIR/r$i.addr")"; i=$((i + 1)); done
    echo "$n" > "$DIR/n"
    front=${DEPLOY_PORT:-$(free_port)}
    config "$s" "$POLICY" "$front" > "$DIR/haproxy.cfg"
    haproxy -c -q -f "$DIR/haproxy.cfg" || die "haproxy rejects $DIR/haproxy.cfg"
    haproxy -D -p "$DIR/haproxy.pid" -f "$DIR/haproxy.cfg" > "$DIR/haproxy.log" 2>&1 || die "haproxy did not start ($DIR/haproxy.log)"
    k=0
    until [ -S "$DIR/haproxy.sock" ]; do k=$((k + 1)); [ $k -lt 50 ] || die "no HAProxy socket"; sleep 0.1; done
    i=1
    while [ $i -le "$n" ]; do wait_routed $i; i=$((i + 1)); done
    echo "http://127.0.0.1:$front" > "$DIR/url"
    cat "$DIR/url"
    ;;
add)
    [ -s "$DIR/haproxy.pid" ] || die "no cluster in $DIR"
    n=$(($(cat "$DIR/n") + 1))
    [ "$n" -le "$(cat "$DIR/slots")" ] || die "all $(cat "$DIR/slots") server slots are used (DEPLOY_SLOTS)"
    if [ $# -eq 0 ]; then
        # the same serve arguments as `start`
        # shellcheck disable=SC2046
        set -- $(cat "$DIR/serve_args")
    fi
    start_replica $n "$@"
    wait_replica $n
    addr=$(cat "$DIR/r$n.addr")
    hactl "set server kvloom/r$n addr ${addr%:*} port ${addr##*:}" > /dev/null
    hactl "enable health kvloom/r$n" > /dev/null
    hactl "set server kvloom/r$n state ready" > /dev/null
    echo "$n" > "$DIR/n"
    wait_routed $n
    echo "r$n $addr"
    ;;
kill | drain)
    i=${1:?$cmd I}
    [ -s "$DIR/r$i.pid" ] || die "no replica r$i"
    if [ "$cmd" = kill ]; then kill -9 "$(cat "$DIR/r$i.pid")"; else kill -TERM "$(cat "$DIR/r$i.pid")"; fi
    ;;
status)
    n=$(cat "$DIR/n" 2>/dev/null || echo 0)
    i=1
    while [ $i -le "$n" ]; do
        p=$(cat "$DIR/r$i.pid")
        st=dead; kill -0 "$p" 2>/dev/null && st=running
        echo "r$i $(cat "$DIR/r$i.addr") pid $p $st"
        i=$((i + 1))
    done
    ;;
ctl)
    [ -S "$DIR/haproxy.sock" ] || die "no HAProxy socket in $DIR"
    hactl "${1:?ctl COMMAND}"
    ;;
stop)
    [ -d "$DIR" ] || exit 0
    if [ -s "$DIR/haproxy.pid" ]; then
        for p in $(cat "$DIR/haproxy.pid"); do kill -TERM "$p" 2>/dev/null || true; done
    fi
    for f in "$DIR"/r*.pid; do
        [ -s "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true
    done
    # the graceful shutdown gets --shutdown-timeout (10 s); then kill -9
    k=0
    for f in "$DIR"/r*.pid; do
        [ -s "$f" ] || continue
        p=$(cat "$f")
        while kill -0 "$p" 2>/dev/null && [ $k -lt 150 ]; do sleep 0.1; k=$((k + 1)); done
        kill -9 "$p" 2>/dev/null || true
    done
    if [ -s "$DIR/namespaces" ]; then
        tag=$(cat "$DIR/tag")
        i=1
        for ns in $(cat "$DIR/namespaces"); do
            ip netns del "$ns" 2>/dev/null || true
            ip link del "kv$tag-$i" 2>/dev/null || true
            i=$((i + 1))
        done
    fi
    rm -f "$DIR"/haproxy.pid "$DIR"/haproxy.sock "$DIR"/r*.pid "$DIR"/r*.port "$DIR"/r*.addr "$DIR"/namespaces
    ;;
*)
    sed -n '2,23p' "$0" >&2
    exit 2
    ;;
esac
