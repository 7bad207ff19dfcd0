#!/usr/bin/env bash
# A real Slurm on this machine for tests/integration/slurm.rs: Debian 12's slurm-wlm (22.05) and
# munge, one local node with four fake GPUs as gres, started by hand (a container has no systemd).
# Idempotent: installed packages are kept, the configuration is rewritten only when it changed,
# and running daemons are left alone (restarted only after a configuration change), so a second
# run takes about a second. Needs root. Prints where the logs are when the node does not come up.
set -euo pipefail

series="22.05" # Debian 12's Slurm; the packages are pinned to this series
packages=(munge slurmctld slurmd slurm-client)
state=/var/lib/iteragpu-slurm # fake GPU files, spool, state, logs
conf=/etc/slurm

[ "$(id -u)" = 0 ] || { echo "tools/ci/slurm.sh: needs root (installs packages, starts daemons)" >&2; exit 1; }

installed() {
  for p in "${packages[@]}"; do
    dpkg-query -W -f '${Status} ${Version}\n' "$p" 2>/dev/null | grep -q "^install ok installed" || return 1
  done
  dpkg-query -W -f '${Version}' slurmctld | grep -q "^$series\."
}
if ! installed; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  pins=()
  for p in "${packages[@]}"; do
    v=$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')
    if [ "$p" != munge ] && [[ "$v" != "$series".* ]]; then
      echo "tools/ci/slurm.sh: $p $v is not Slurm $series (Debian 12's); the tests expect $series" >&2
      exit 1
    fi
    pins+=("$p=$v")
  done
  apt-get install -y -qq --no-install-recommends "${pins[@]}" >/dev/null
fi

host=$(hostname -s)
mkdir -p "$state"/{gpus,ctld,slurmd,log} /run/munge "$conf"
# Slurm wants device files for a GPU's gres: four character devices with /dev/null's numbers
# (nothing opens them; Slurm only reads them to set CUDA_VISIBLE_DEVICES for each task).
for i in 0 1 2 3; do
  [ -c "$state/gpus/gpu$i" ] || { rm -f "$state/gpus/gpu$i"; mknod "$state/gpus/gpu$i" c 1 3; }
done

# The node claims 8 CPUs whatever the machine has (config_overrides), so that four one-GPU
# tasks run at once on a 2-core CI machine; the tasks of the tests sleep more than they compute.
new_conf=$(cat <<CONF
# Written by tools/ci/slurm.sh: one local node for iteragpu's tests.
ClusterName=iteragpu-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/slurmd
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
GresTypes=gpu
# Short waits for tests: a killed task gets 2 s after SIGTERM, an ended job stays in squeue and
# scontrol for 60 s, a time limit is enforced without grace.
KillWait=2
MinJobAge=60
OverTimeLimit=0
InactiveLimit=0
SchedulerParameters=sched_interval=2
NodeName=$host CPUs=8 RealMemory=4000 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=cpu Nodes=$host MaxTime=INFINITE State=UP
CONF
)
new_gres="NodeName=$host Name=gpu File=$state/gpus/gpu[0-3]"
changed=0
if [ "$(cat "$conf/slurm.conf" 2>/dev/null)" != "$new_conf" ]; then printf '%s\n' "$new_conf" >"$conf/slurm.conf"; changed=1; fi
if [ "$(cat "$conf/gres.conf" 2>/dev/null)" != "$new_gres" ]; then printf '%s\n' "$new_gres" >"$conf/gres.conf"; changed=1; fi

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if [ "$changed" = 1 ] || grep -q "not a valid character" "$state/log/slurmd.log" 2>/dev/null; then
  : >"$state/log/slurmd.log"
  for d in slurmd slurmctld; do
    if running "$state/$d.pid"; then kill "$(cat "$state/$d.pid")"; sleep 1; fi
  done
fi

# munge: its key comes with the package; the daemon runs as the munge user.
[ -s /etc/munge/munge.key ] || { mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
fi
running "$state/slurmctld.pid" || /usr/sbin/slurmctld
running "$state/slurmd.pid" || /usr/sbin/slurmd

for _ in $(seq 60); do
  s=$(sinfo -h -n "$host" -o '%T' 2>/dev/null | head -1 || true)
  case "$s" in
    idle|mixed|allocated) echo "slurm: node $host $s ($(sinfo -V), gres $(sinfo -h -n "$host" -o '%G' | head -1))"; exit 0 ;;
    down*|drain*) scontrol update nodename="$host" state=resume 2>/dev/null || true ;;
  esac
  sleep 1
done
echo "tools/ci/slurm.sh: the node $host did not come up (state: ${s:-none}); logs in $state/log" >&2
tail -n 20 "$state"/log/*.log >&2 || true
exit 1
