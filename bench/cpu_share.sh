#!/bin/sh
# cpu_share.sh CMD...: runs CMD with (nearly) all of the CPU when other work
# shares the machine, for side-by-side benchmarks on a busy box. Needs root
# and cgroup v1's cpu controller at /sys/fs/cgroup/cpu.
#
# CMD and its children go into cgroup cpu/bench (cpu.shares 262144); once a
# second every other user process in the root group is moved into cpu/others
# (cpu.shares 2), so new processes are caught too. At the end everything is
# moved back to the root group. Autogrouping is switched off
# (kernel.sched_autogroup_enabled=0) because with it each session gets an
# equal share and nice values only act inside a session. Memory bandwidth
# and caches stay shared: compare engines interleaved, round by round.
set -u
C=/sys/fs/cgroup/cpu
[ -w "$C/cgroup.procs" ] || { echo "cpu_share.sh: needs root and $C" >&2; exit 2; }
[ -w /proc/sys/kernel/sched_autogroup_enabled ] && echo 0 > /proc/sys/kernel/sched_autogroup_enabled
mkdir -p "$C/bench" "$C/others"
echo 262144 > "$C/bench/cpu.shares"
echo 2 > "$C/others/cpu.shares"
echo $$ > "$C/bench/cgroup.procs"
(
    while :; do
        for p in $(cat "$C/cgroup.procs"); do
            [ "$p" -le 2 ] && continue
            [ -r "/proc/$p/exe" ] || continue # kernel threads have no exe
            echo "$p" > "$C/others/cgroup.procs" 2>/dev/null
        done
        sleep 1
    done
) &
sweeper=$!
echo $sweeper > "$C/bench/cgroup.procs"
"$@"
st=$?
kill $sweeper
for p in $(cat "$C/others/cgroup.procs") $(cat "$C/bench/cgroup.procs"); do
    echo "$p" > "$C/cgroup.procs" 2>/dev/null
done
exit $st
