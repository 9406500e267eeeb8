#!/usr/bin/env bash
# cluster.sh — an emulated cluster of N hosts with slow links on one machine.
#
#   scripts/cluster.sh up N RATE [LATENCY]   N hosts, each link shaped to RATE
#                                            (tc rate: 1gbit, 10gbit, 100mbit, or
#                                            "none" for unthrottled); LATENCY is
#                                            tbf's queueing bound (default 10ms)
#   scripts/cluster.sh run CMD...            mpirun CMD with one rank per host, or
#                                            ZCL_RANKS_PER_HOST=k ranks on each
#                                            (ranks 0..k-1 on h0, k..2k-1 on h1, ...)
#   scripts/cluster.sh bw [MB]               TCP transfer host1 -> host0, prints MB/s
#   scripts/cluster.sh status                what exists now
#   scripts/cluster.sh down                  remove everything up made (idempotent)
#
# Each host is a network namespace ${ZCL_PREFIX}-h0..h{N-1} with one veth pair
# whose other end sits on a bridge in its own namespace ${ZCL_PREFIX}-br, so the
# root namespace's network is never touched.  A token-bucket filter shapes both
# directions of every host's link (host egress on the host end, host ingress on
# the bridge end), like a switch port: a host can neither send nor receive
# faster than RATE.  Addresses ${ZCL_SUBNET}.10+i/24 are used only inside these
# namespaces; host names go into a marked block of /etc/hosts.
#
# `run` starts Open MPI inside the first host, with one rank per host.  The
# hosts share this machine's few cores, so a rank waiting for data must give
# its core away (mpi_yield_when_idle): busy-polling ranks made 4 KiB
# collectives ~10x slower here, a cost no real cluster has.  The TCP
# transport runs with btl_tcp_flags=send (ZCL_BTL_TCP_FLAGS; "default" keeps
# Open MPI's, which add "put"): with put, a large message whose receive is
# already posted goes as one emulated RDMA write of the whole message, and
# pipelined point-to-point lost ~25% of the link.  4 ranks each sending 16
# MiB to every other rank in pairs, receives posted first, moved 90 MB/s per
# 119 MB/s link with put and 117 MB/s without (docs/COLLECTIVES.md, "Open
# MPI over TCP"); MPI's own collectives were not slower without it.  Open MPI
# launches its daemons on the other hosts through a "remote shell" agent
# script that enters the host's namespace instead of using ssh; TCP (btl tcp)
# carries MPI traffic and the out-of-band channel, restricted to the cluster
# subnet.
#
# The token bucket holds 256 KB (ZCL_BURST; a real 1 Gbit/s switch port
# buffers more): with a 64 KB bucket this VM's timers refill it too late
# once several flows share a host's link, so four concurrent flows got ~42
# MB/s each against ~79 MB/s with 256 KB, and the comm-bound training step
# took 1.7 s instead of 0.9 s, while one bulk stream gets ~119 MB/s with
# either (docs/lab/collectives_history.md; docs/BENCHMARKS.md, End-to-end).
#
# Environment: ZCL_PREFIX (default zcl) and ZCL_SUBNET (default 10.77.0; a /24
# as three octets) let a test run its own cluster next to a benchmark's.
# ZCL_MPIRUN_ARGS adds mpirun options to `run`; ZCL_BTL_TCP_FLAGS sets Open
# MPI's btl_tcp_flags (default "send"; "default" leaves Open MPI's own).
#
# Several ranks per host (ZCL_RANKS_PER_HOST=k, read by `run`): Open MPI
# gets each host with k slots and maps ranks by slot, so a host's ranks are
# consecutive (0..k-1 on h0, ...); between them TCP goes to the host's own
# address, which the kernel carries over loopback, where no shaper sits: the
# fast link inside a node, while hosts talk over their shaped links.  Shared
# memory (btl vader) segfaulted here at start, maybe since every host has
# the same kernel hostname; not pursued.  Open MPI knows which ranks share a
# host from its launcher (the --host names), and MPI_Comm_split_type(
# MPI_COMM_TYPE_SHARED) did return the right pairs on the first host, but on
# the second host's ranks it segfaults in Open MPI 4.1.4 (ob1's fragment
# matching; a ten-line MPI program does the same; one rank per host is
# fine).  So `run` sets the documented override ZIPCCL_NODE_SIZE=k
# (comm/zipccl.h) unless it is set already: ZipCCL then skips that call and
# its nodes are the hosts (zipccl-bench prints the node size it sees).
#
# Leaves out: propagation delay (the netem qdisc is not available on these
# machines), and non-root use (namespaces need root).
set -u

PREFIX=${ZCL_PREFIX:-zcl}
SUBNET=${ZCL_SUBNET:-10.77.0}
STATE=/run/${PREFIX}-cluster
HOSTS_BEGIN="# BEGIN ${PREFIX}-cluster (scripts/cluster.sh; removed by 'down')"
HOSTS_END="# END ${PREFIX}-cluster"
BR_NS=${PREFIX}-br

die() { echo "cluster.sh: $*" >&2; exit 1; }
host_ns() { echo "${PREFIX}-h$1"; }
host_ip() { echo "${SUBNET}.$((10 + $1))"; }

# Rewrite /etc/hosts without our block.  Written in place (cat >), never
# renamed over: in containers /etc/hosts is often a bind mount.
hosts_remove_block() {
  grep -qF "$HOSTS_BEGIN" /etc/hosts 2>/dev/null || return 0
  local tmp; tmp=$(mktemp)
  awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0==b{skip=1;next} skip&&$0==e{skip=0;next} !skip' \
    /etc/hosts >"$tmp" && cat "$tmp" >/etc/hosts
  rm -f "$tmp"
}

our_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-(h[0-9]+|br)$"; }

cmd_down() {
  local ns
  for ns in $(our_namespaces); do
    # Any process left inside (a hung rank) would keep the namespace alive.
    local pids; pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  # veth ends left in the root namespace by a failed `up` (created, not yet moved).
  local l
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
             grep -E "^${PREFIX}(v|b)[0-9]+$"); do
    ip link del "$l" 2>/dev/null
  done
  hosts_remove_block
  if [ -f "$STATE/hosts.orig" ] && ! cmp -s "$STATE/hosts.orig" /etc/hosts; then
    # Without our block the file may differ from the original only by the
    # newline we added: then restore the original byte for byte.
    if [ "$(cat "$STATE/hosts.orig")" = "$(cat /etc/hosts)" ]; then
      cat "$STATE/hosts.orig" >/etc/hosts
    else
      echo "cluster.sh: note: /etc/hosts changed since 'up'; only our block was removed" >&2
    fi
  fi
  rm -rf "$STATE"
  return 0
}

cmd_up() {
  local n=${1:-} rate=${2:-} lat=${3:-10ms}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up: N must be 1..200 (got '${n}')"
  [ -n "$rate" ] || die "usage: up N RATE [LATENCY]   (RATE e.g. 1gbit, 10gbit, none)"
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
  command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
  cmd_down
  mkdir -p "$STATE" || die "cannot create $STATE"
  # Tear down whatever was made if any step fails.
  trap 'echo "cluster.sh: up failed, tearing down" >&2; [ -n "${ZCL_KEEP_ON_FAIL:-}" ] || cmd_down; exit 1' ERR
  set -E
  cp /etc/hosts "$STATE/hosts.orig"
  echo "$n" >"$STATE/n"; echo "$rate" >"$STATE/rate"; echo "$lat" >"$STATE/latency"

  ip netns add "$BR_NS"
  ip -n "$BR_NS" link add br0 type bridge
  ip -n "$BR_NS" link set br0 up
  ip -n "$BR_NS" link set lo up
  local i ns hv bv
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i"); hv=${PREFIX}v$i; bv=${PREFIX}b$i
    ip netns add "$ns"
    ip link add "$hv" type veth peer name "$bv"
    ip link set "$hv" netns "$ns"
    ip link set "$bv" netns "$BR_NS"
    ip -n "$BR_NS" link set "$bv" master br0
    ip -n "$BR_NS" link set "$bv" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(host_ip "$i")/24" dev "$hv"
    ip -n "$ns" link set "$hv" up
    if [ "$rate" != none ]; then
      ip netns exec "$ns" tc qdisc add dev "$hv" root tbf rate "$rate" burst "${ZCL_BURST:-256kb}" latency "$lat"
      if [ "${ZCL_SHAPE:-both}" = both ]; then
        ip netns exec "$BR_NS" tc qdisc add dev "$bv" root tbf rate "$rate" burst "${ZCL_BURST:-256kb}" latency "$lat"
      fi
    fi
  done
  hosts_remove_block
  {
    [ -z "$(tail -c1 /etc/hosts)" ] || echo # the file may lack its last newline
    echo "$HOSTS_BEGIN"
    for ((i = 0; i < n; i++)); do echo "$(host_ip "$i") $(host_ns "$i")"; done
    echo "$HOSTS_END"
  } >>/etc/hosts

  # The "remote shell" for Open MPI: agent [options] HOST COMMAND...
  cat >"$STATE/agent.sh" <<EOF
#!/bin/sh
# Written by scripts/cluster.sh: Open MPI calls this instead of ssh.
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
mkdir -p "$STATE/tmp/\$host"
# One session directory per host: all hosts share one kernel hostname and /tmp.
export ZCL_HOST="\$host" TMPDIR="$STATE/tmp/\$host"
exec ip netns exec "\$host" sh -c "\$*"
EOF
  chmod +x "$STATE/agent.sh"

  # Every host must reach every other before MPI tries to.
  for ((i = 1; i < n; i++)); do
    local ok=0 t
    for t in 1 2 3 4 5 6 7 8 9 10; do
      # A refused connection (errno 111) proves the host answers; no ping here.
      if [ "$(ip netns exec "$(host_ns 0)" python3 -c "import socket; s=socket.socket(); s.settimeout(1)
print(s.connect_ex(('$(host_ip "$i")', 9)))" 2>/dev/null)" = 111 ]; then ok=1; break; fi
      sleep 0.2
    done
    [ "$ok" = 1 ] || { echo "cluster.sh: $(host_ns 0) cannot reach $(host_ip "$i")" >&2; false; }
  done
  trap - ERR
  set +E
  echo "cluster.sh: up: $n hosts ${PREFIX}-h0..h$((n - 1)) on ${SUBNET}.0/24, rate $rate, tbf latency $lat"
}

cmd_status() {
  if [ ! -f "$STATE/n" ] && [ -z "$(our_namespaces)" ]; then echo "cluster.sh: down"; return 0; fi
  echo "cluster.sh: $(cat "$STATE/n" 2>/dev/null || echo '?') hosts, rate $(cat "$STATE/rate" 2>/dev/null || echo '?')"
  local ns
  for ns in $(our_namespaces); do
    printf '  %-10s %s\n' "$ns" "$(ip -n "$ns" -br addr 2>/dev/null | grep -v '^lo' | tr -s ' ' | tr '\n' ';')"
    ip netns exec "$ns" tc qdisc show 2>/dev/null | grep tbf | sed 's/^/      /'
  done
  grep -A200 -F "$HOSTS_BEGIN" /etc/hosts 2>/dev/null | sed "/^${HOSTS_END}\$/q" | sed 's/^/  hosts: /'
}

cmd_run() {
  [ $# -ge 1 ] || die "usage: run CMD..."
  [ -f "$STATE/n" ] || die "no cluster is up (scripts/cluster.sh up N RATE)"
  local n i hostlist="" ppn=${ZCL_RANKS_PER_HOST:-1}; n=$(cat "$STATE/n")
  [[ "$ppn" =~ ^[1-9][0-9]*$ ]] || die "ZCL_RANKS_PER_HOST must be an integer >= 1 (got '$ppn')"
  if [ "$ppn" -gt 1 ] && [ -z "${ZIPCCL_NODE_SIZE:-}" ]; then export ZIPCCL_NODE_SIZE=$ppn; fi
  for ((i = 0; i < n; i++)); do hostlist+="${hostlist:+,}$(host_ns "$i"):$ppn"; done
  local h0; h0=$(host_ns 0)
  mkdir -p "$STATE/tmp/$h0"
  # Remote daemons inherit the agent's (so mpirun's) environment; -x makes it explicit.
  local v fwd=() flags=(--mca btl_tcp_flags "${ZCL_BTL_TCP_FLAGS:-send}")
  [ "${ZCL_BTL_TCP_FLAGS:-}" = default ] && flags=()
  for v in $(compgen -e | grep -E '^(ZIPCCL|ZRT)_'); do fwd+=(-x "$v"); done
  # shellcheck disable=SC2086
  ip netns exec "$h0" env ZCL_HOST="$h0" TMPDIR="$STATE/tmp/$h0" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" \
    mpirun --host "$hostlist" -n $((n * ppn)) --map-by slot --bind-to none \
      --mca plm_rsh_agent "$STATE/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
      --mca pml ob1 --mca btl tcp,self --mca mpi_yield_when_idle 1 "${flags[@]}" \
      --mca btl_tcp_if_include "${SUBNET}.0/24" --mca oob_tcp_if_include "${SUBNET}.0/24" \
      "${fwd[@]}" ${ZCL_MPIRUN_ARGS:-} "$@"
}

# Bulk TCP transfer from host 1 to host 0: the link's real rate as MPI would see it.
cmd_bw() {
  local mb=${1:-64}
  [ -f "$STATE/n" ] || die "no cluster is up"
  [ "$(cat "$STATE/n")" -ge 2 ] || die "bw needs at least 2 hosts"
  local port=5599 ip0; ip0=$(host_ip 0)
  ip netns exec "$(host_ns 0)" python3 - "$ip0" "$port" "$mb" <<'EOF' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(60)
c, _ = s.accept(); want = int(sys.argv[3]) << 20; got = 0
while got < want:
    b = c.recv(1 << 20)
    if not b: break
    got += len(b)
c.sendall(b"k"); c.close()
EOF
  local srv=$!
  sleep 0.5
  ip netns exec "$(host_ns 1)" python3 - "$ip0" "$port" "$mb" <<'EOF'
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
n = int(sys.argv[3]) << 20; buf = b"\0" * (1 << 20)
t0 = time.time()
for _ in range(n >> 20): c.sendall(buf)
c.recv(1)
dt = time.time() - t0
print("cluster.sh: bw: %d MiB in %.3f s = %.1f MB/s (%.3f Gbit/s)" % (n >> 20, dt, n / dt / 1e6, n * 8 / dt / 1e9))
EOF
  local rc=$?
  wait "$srv"
  return $rc
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down; echo "cluster.sh: down" ;;
  status) cmd_status ;;
  run) shift; cmd_run "$@" ;;
  bw) shift; cmd_bw "$@" ;;
  *) echo "usage: $0 up N RATE [LATENCY] | run CMD... | bw [MB] | status | down" >&2; exit 2 ;;
esac
