#!/usr/bin/env bash
# test: timeout=150 asan=no
# test_cluster.sh — scripts/cluster.sh: a 2-host emulated cluster at 100 Mbit/s
# delivers about that rate (a TCP probe and a 2-rank zipccl-bench run under
# Open MPI), two ranks per host run the hier designs right (4 ranks),
# scripts/auto_ab.sh runs on it, and `down` leaves no namespace,
# veth, /etc/hosts line or state behind, also after a failed `up`.  Uses its
# own prefix and subnet (zct, 10.78.0) so it never touches a benchmark
# cluster running at the same time.
# Where network namespaces are unavailable (not root, no iproute2, a sandbox
# without netns) it checks what it can and prints SKIP for the rest.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export ZCL_PREFIX=zct ZCL_SUBNET=10.78.0
unset ZCL_BURST ZCL_SHAPE
C=scripts/cluster.sh
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
check() { if [ "$2" = 0 ]; then pass "$1"; else fail "$1" "$3"; fi; }

bash -n "$C"
check cluster_script_parses $? "bash -n found a syntax error"
out=$(bash "$C" frobnicate 2>&1); rc=$?
[ "$rc" = 2 ] && printf '%s' "$out" | grep -q usage
check cluster_usage_on_bad_command $? "exit $rc: $out"

probe=zct-probe$$
if [ "$(id -u)" != 0 ] || ! command -v tc >/dev/null || ! ip netns add "$probe" 2>/dev/null; then
  echo "SKIP cluster: network namespaces unavailable here (need root + iproute2 + netns support)"
  exit 0
fi
ip netns del "$probe"

leftovers() { # prints what of the zct cluster still exists
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^zct-(h[0-9]+|br)$'
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^zct(v|b)[0-9]+$'
  grep -F 'zct-cluster' /etc/hosts
  [ -e /run/zct-cluster ] && echo /run/zct-cluster
  return 0
}

hosts_before=$(md5sum /etc/hosts)
trap 'bash "$C" down >/dev/null 2>&1' EXIT

# A failing `up` (a rate tc rejects) must tear down what it made.
bash "$C" up 2 notarate >/dev/null 2>&1; rc=$?
left=$(leftovers)
[ "$rc" != 0 ] && [ -z "$left" ]
check cluster_failed_up_cleans_up $? "exit $rc, left: $left"

bash "$C" up 2 100mbit >"$BUILD/.zct_up.log" 2>&1; rc=$?
check cluster_up $rc "$(tail -3 "$BUILD/.zct_up.log" | tr '\n' ' ')"
rm -f "$BUILD/.zct_up.log"
if [ "$rc" = 0 ]; then
  n=$(ip netns list | grep -cE '^zct-(h0|h1|br)( |$)')
  e=$(grep -cE '^10\.78\.0\.1[01] zct-h[01]$' /etc/hosts)
  q=$(ip netns exec zct-h0 tc qdisc show | grep -c 'tbf.*rate 100Mbit')
  [ "$n" = 3 ] && [ "$e" = 2 ] && [ "$q" = 1 ]
  check cluster_namespaces_hosts_tbf $? "namespaces $n/3, hosts lines $e/2, tbf qdiscs $q/1"

  # 100 Mbit/s = 12.5 MB/s; TCP over the shaper should land just under it.
  bw=$(bash "$C" bw 8 2>&1 | tail -1)
  mbs=$(printf '%s' "$bw" | sed -n 's/.*= \([0-9.]*\) MB\/s.*/\1/p')
  python3 -c "import sys; sys.exit(0 if 8.0 <= float('${mbs:-0}') <= 13.0 else 1)"
  check cluster_tcp_rate_near_100mbit $? "probe: $bw (want 8..13 MB/s)"

  if [ -x "$BUILD/zipccl-bench" ]; then
    # AllGather of 4 MiB on 2 ranks: each rank sends 2 MiB over its link.
    out=$(timeout 90 bash "$C" run "$BUILD/zipccl-bench" -b 4M -e 4M -n 2 -w 1 --coll allgather \
      --strategy native,compressed --json 2>&1); rc=$?
    check cluster_mpirun_bench_exit0 $rc "exit $rc: $(printf '%s' "$out" | tail -3 | tr '\n' ' ')"
    printf '%s\n' "$out" | grep '^# hosts' | grep -q '0:zct-h0 1:zct-h1'
    check cluster_ranks_on_both_hosts $? "header: $(printf '%s' "$out" | grep '^# hosts')"
    printf '%s\n' "$out" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
nat = [r for r in rows if r["strategy"] == "native"]
ok = len(rows) == 2 and all(r["wrong"] == 0 for r in rows) and nat
# busbw is what one link carried: at most the 12.5 MB/s line rate (+10%), at least a third of it
bw = nat[0]["busbw_gbps"] * 1e3 if nat else 0
print("native busbw %.2f MB/s" % bw)
sys.exit(0 if ok and 4.0 <= bw <= 13.75 else 1)' >"$BUILD/.zct_bw.txt" 2>&1
    check cluster_bench_busbw_capped_near_rate $? "$(cat "$BUILD/.zct_bw.txt")"
    rm -f "$BUILD/.zct_bw.txt"

    # Two ranks per host (ZCL_RANKS_PER_HOST=2): ranks 0,1 on h0 and 2,3 on
    # h1, the node size ZipCCL sees is the host (run sets ZIPCCL_NODE_SIZE,
    # scripts/cluster.sh says why), and the hierarchical designs (raw on the
    # loopback within a host, frames over the shaped link) give the same
    # bits as the flat ones (wrong = 0: the bench checks every rank's
    # result against its reference).
    out=$(ZCL_RANKS_PER_HOST=2 timeout 90 bash "$C" run "$BUILD/zipccl-bench" -b 256K -e 256K -n 1 -w 0 \
      --coll allgather,reducescatter,allreduce --strategy compressed,compressed:hier,raw:hier --json 2>&1); rc=$?
    [ "$rc" = 0 ] && printf '%s\n' "$out" | grep '^# hosts' | grep -q ' 0:zct-h0 1:zct-h0 2:zct-h1 3:zct-h1$' &&
      printf '%s\n' "$out" | grep -q '^# node size 2' && printf '%s\n' "$out" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
sys.exit(0 if len(rows) == 9 and all(r["wrong"] == 0 for r in rows) else 1)'
    check cluster_two_ranks_per_host_hier $? "exit $rc: $(printf '%s' "$out" | grep -E '^# (hosts|node)|wrong|rror' | head -5 | tr '\n' ' ')"

    # scripts/auto_ab.sh on this cluster: two builds (one binary, once with a
    # knob), one run each; the summary row and both builds' JSON rows.
    out=$(timeout 90 bash scripts/auto_ab.sh --no-up --runs 1 --coll alltoallv -b 4K -e 4K -n 3 \
      --out "$BUILD/.zct_ab.jsonl" a="$BUILD/zipccl-bench" b="$BUILD/zipccl-bench:ZIPCCL_AUTO_EXPLORE=0" 2>&1); rc=$?
    [ "$rc" = 0 ] && printf '%s\n' "$out" | grep -q '^alltoallv 4096 ' && python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"coll\"" in l]
vs = {(r["version"], r["strategy"]) for r in rows}
sys.exit(0 if {("a", "auto"), ("b", "auto"), ("a", "raw"), ("b", "native")} <= vs
         and all(r["wrong"] == 0 for r in rows) else 1)' "$BUILD/.zct_ab.jsonl"
    check auto_ab_script_runs_and_writes_rows $? "exit $rc: $(printf '%s' "$out" | tail -4 | tr '\n' ' ')"
    rm -f "$BUILD/.zct_ab.jsonl"
  else
    echo "SKIP cluster_mpirun_bench: $BUILD/zipccl-bench not built"
  fi
fi

bash "$C" down >/dev/null 2>&1
left=$(leftovers)
[ -z "$left" ] && [ "$(md5sum /etc/hosts)" = "$hosts_before" ]
check cluster_down_leaves_nothing $? "left: $left; /etc/hosts changed: $(md5sum /etc/hosts)"
bash "$C" down >/dev/null 2>&1
check cluster_down_idempotent $? "second down failed"
exit 0
