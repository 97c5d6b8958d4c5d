#!/bin/bash
# Slurm Epilog for greenckpt: put every node back as greenckpt found it after every job.
# slurm.conf:   Epilog=/etc/slurm/greenckpt-epilog.sh    (runs as root on every node of a job)
# Set GREENCKPT to the greenckpt of the install every node sees; the log gets one line per
# job and node, with the time and the job id. It never fails the job: an epilog that exits
# non-zero drains the node, and a node greenckpt could not restore is better named in the log.
GREENCKPT=${GREENCKPT:-/opt/greenckpt/bin/greenckpt}
LOG=${GREENCKPT_EPILOG_LOG:-/var/log/greenckpt-epilog.log}
job=${SLURM_JOB_ID:-unknown}
node=${SLURMD_NODENAME:-$(hostname)}

if out=$("$GREENCKPT" restore --json 2>&1); then
    out=$(printf '%s' "$out" | tr -s '\n ' '  ')           # the JSON on one line
else
    out="restore failed: $(printf '%s' "$out" | tr -s '\n ' '  ')"
fi
printf '%s job %s node %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$job" "$node" "$out" >>"$LOG"

# A per-job socket folder that a killed agent left behind (only an empty folder and a socket
# are removed; never through a link).
for dir in /tmp/greenckpt-*/"job-$job"; do
    [ -d "$dir" ] && [ ! -L "$dir" ] || continue
    [ -S "$dir/agent.sock" ] && rm -f -- "$dir/agent.sock"
    rmdir -- "$dir" 2>/dev/null || true
done
exit 0
