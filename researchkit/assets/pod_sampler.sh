# researchkit pod sampler; argv: INTERVAL_US FIRST_DEADLINE_US OUT; one line "k t_us cpu_ns" per deadline met
iv=$1 next=$2 out=$3 k=0
if [ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ]; then f=/sys/fs/cgroup/cpuacct/cpuacct.usage m=1
elif [ -r /sys/fs/cgroup/cpu.stat ]; then f=/sys/fs/cgroup/cpu.stat m=1000
else echo "no cpuacct.usage or cpu.stat under /sys/fs/cgroup" >&2; exit 2; fi
exec 3<> <(:)    # a pipe nobody writes: `read -t` on it sleeps without a fork
: > "$out"
while :; do
  d=$(( next - ${EPOCHREALTIME/[.,]/} ))
  if (( d > 0 )); then printf -v s '%d.%06d' $(( d / 1000000 )) $(( d % 1000000 )); read -t "$s" -u 3; fi
  t=${EPOCHREALTIME/[.,]/} u=
  if (( m == 1 )); then read -r u < "$f"; else while read -r key val; do [[ $key == usage_usec ]] && { u=$val; break; }; done < "$f"; fi
  [[ -n $u ]] && echo "$k $t $(( u * m ))" >> "$out"
  (( k += 1, next += iv ))
  while (( next <= ${EPOCHREALTIME/[.,]/} )); do (( k += 1, next += iv )); done   # deadlines already past: missed
done
