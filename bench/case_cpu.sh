#!/usr/bin/env bash
# bench/case_cpu.sh <pytest args...>: the wall time, the controller's CPU (the pytest process tree: ansible-playbook,
# its workers, podman) and the lab host's CPU (its container's cgroup) of lab cases run against a lab host that is
# already up and provisioned. docs/timings.md has the method ("Method and the bound").
#   BC_LAB_INVENTORY=/path/to/inventory BC_LAB_CONTAINER=bc-dev-1 bench/case_cpu.sh tests/integration/test_faults.py -k reload
set -euo pipefail
cd "$(dirname "$0")/.."
container=${BC_LAB_CONTAINER:-bc-lab-1}
cgroup=$(podman inspect "$container" --format '{{.State.CgroupPath}}')
# cgroup v1 (cpuacct.usage, ns) or v2 (cpu.stat usage_usec)
usage_ns() {
  if [ -r "/sys/fs/cgroup/cpuacct$cgroup/cpuacct.usage" ]; then cat "/sys/fs/cgroup/cpuacct$cgroup/cpuacct.usage"
  else echo $(( $(awk '/^usage_usec/ {print $2}' "/sys/fs/cgroup$cgroup/cpu.stat") * 1000 )); fi
}
before=$(usage_ns)
rc=0
BC_LAB_PROVIDED=1 BC_RELIABILITY_DOC="${BC_RELIABILITY_DOC:-/tmp/bc-case-cpu/reliability.md}" \
  /usr/bin/time -f "controller: %e s wall, %U s user, %S s sys" \
  timeout 3600 .venv/bin/python -m pytest -q -p no:cacheprovider --durations=5 "$@" || rc=$?
after=$(usage_ns)
echo "lab host ($container): $(( (after - before) / 1000000 )) ms CPU"
exit "$rc"
