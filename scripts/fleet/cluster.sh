# A one-node Slurm cluster in a temporary folder, for scripts/fleet-slurm.sh and scripts/bench-fleet.sh (sourced).
#
#   source scripts/fleet/cluster.sh
#   cluster_install                 # apt-get installs slurmctld slurmd slurm-client munge jq when missing
#   cluster_start "$work"           # munged, slurmctld, slurmd with their own key, socket, ports, state and logs
#   cluster_submit … ; cluster_wait JOBID …
#   cluster_stop                    # every daemon stopped by its PID (also from the EXIT trap the caller sets)
#
# Needs root (munged runs as the munge user, the daemons as root). Everything the cluster writes is under
# "$work/cluster"; SLURM_CONF is exported for every Slurm command the caller runs.

cluster_log() { echo "[fleet] $*" >&2; }

cluster_install() {
    local packages=(slurmctld slurmd slurm-client munge jq) missing=() package
    for package in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    if ((${#missing[@]} > 0)); then
        cluster_log "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# A TCP port nobody listens on now.
cluster_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

CLUSTER_PIDS=()

cluster_start() {
    local work=$1 dir node ctld_port slurmd_port hardware
    dir="$work/cluster"
    mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
    chmod 755 "$work" "$dir"
    # munge: a key of its own, a socket of its own, run as the munge user (it refuses root).
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chown -R munge:munge "$dir/munge"
    chmod 755 "$dir/munge"  # munged requires the socket folder to be searchable by all
    chmod 400 "$dir/munge/munge.key"
    runuser -u munge -- munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
    CLUSTER_PIDS+=("$(cat "$dir/munge/munged.pid")")
    munge -n --socket="$dir/munge/munge.socket" | unmunge --socket="$dir/munge/munge.socket" >/dev/null \
        || { cluster_log "munge does not work: see $dir/munge/munged.log"; return 1; }

    node=$(hostname -s)
    ctld_port=$(cluster_free_port)
    slurmd_port=$(cluster_free_port)
    while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(cluster_free_port); done
    hardware=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //')
    export SLURM_CONF="$dir/slurm.conf"
    cat > "$SLURM_CONF" <<EOF
ClusterName=fleettest
SlurmctldHost=$node
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=10
MinJobAge=600
NodeName=$node $hardware State=UNKNOWN
PartitionName=fleet Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    slurmctld -D -f "$SLURM_CONF" > "$dir/log/slurmctld.out" 2>&1 &
    CLUSTER_PIDS+=("$!")
    slurmd -D -f "$SLURM_CONF" > "$dir/log/slurmd.out" 2>&1 &
    CLUSTER_PIDS+=("$!")
    local waited=0 state=""
    while ((waited < 90)); do
        state=$(sinfo -h -o %T 2>/dev/null | head -1 || true)
        [[ $state == idle* ]] && break
        sleep 1
        waited=$((waited + 1))
    done
    [[ $state == idle* ]] || { cluster_log "the node is not idle after 90 s ($state): see $dir/log"; return 1; }
    cluster_log "Slurm $(sinfo -V | awk '{print $2}') up in ${waited}s: node $node ($hardware), ports $ctld_port/$slurmd_port, SLURM_CONF=$SLURM_CONF"
}

# Submits Samples/fleet/batch.slurm as it is; prints the job ID. Arguments: sbatch options, then --export's list.
cluster_submit() {
    sbatch --parsable "$@" | cut -d';' -f1
}

# Waits until none of the given jobs is in squeue (a job array counts until its last task ends).
cluster_wait() {
    local limit=${CLUSTER_WAIT_LIMIT:-900} waited=0 job
    for job in "$@"; do
        while squeue -h -j "$job" 2>/dev/null | grep -q .; do
            sleep 1
            waited=$((waited + 1))
            ((waited < limit)) || { cluster_log "job $job still running after ${limit}s"; squeue >&2; return 1; }
        done
    done
}

cluster_stop() {
    local pid
    if [[ -n ${SLURM_CONF:-} && -f ${SLURM_CONF:-} ]]; then scancel --user=root >/dev/null 2>&1 || true; fi
    for pid in "${CLUSTER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${CLUSTER_PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    CLUSTER_PIDS=()
}
