#!/usr/bin/env bash
# greenckpt-dmtcp.sh: run an application under DMTCP, announcing every checkpoint and restart
# to greenckpt's runtime.
#
# Why: DMTCP checkpoints a process without changing its code, but greenckpt's runtime applies
# its checkpoint and restart settings (and attributes energy) only for the spans it is told
# about. DMTCP has no hook for that, so this script drives the checkpoints itself: it starts its
# own DMTCP coordinator, runs the application under it (or restarts it from the images a
# previous run left), and every INTERVAL seconds of computation takes one *blocking* checkpoint
# (dmtcp_command --bcheckpoint returns when the images are written and the processes run again)
# between `greenckpt notify begin checkpoint` and `greenckpt notify end checkpoint`.
#
#   greenckpt run [flags] -- greenckpt-dmtcp.sh [--interval SECONDS] [--ckpt-dir DIR]
#                                               [--level N] -- ./app args...
#
# Without greenckpt run (no GREENCKPT_RUNTIME_SOCKET) the notifications are skipped and this is
# a plain DMTCP wrapper. It exits with the application's status and never leaves the
# coordinator running. See examples/dmtcp/README.md and docs/user-guide.md ("### DMTCP").
set -euo pipefail

readonly ME=greenckpt-dmtcp
readonly MANIFEST_NAME=greenckpt-dmtcp.images   # the images of the last good checkpoint
readonly POLL_MS=200                            # how often the application's exit is looked for

usage() {
    cat <<EOF
usage: $ME [--interval SECONDS] [--ckpt-dir DIR] [--level N] -- APP [ARGS...]
  --interval SECONDS  computation time between checkpoints (default 3600); take it from
                      greenckpt plan --json: .plan.interval_s
  --ckpt-dir DIR      where DMTCP writes its images (default \$DMTCP_CHECKPOINT_DIR or
                      ./dmtcp-ckpt); images of a previous run there are restarted
  --level N           the checkpoint level announced to greenckpt (default: none)
Environment: GREENCKPT (the greenckpt command, default 'greenckpt'), DMTCP_GZIP and the other
DMTCP_* variables dmtcp_launch reads.
EOF
}

# One line on stderr and status 2: what was wrong and what would be right; nothing was started.
die_usage() {
    echo "$ME: $*" >&2
    exit 2
}

log() {
    echo "$ME: $*" >&2
}

# Milliseconds since the epoch, without a fork where bash has EPOCHREALTIME (bash >= 5).
now_ms() {
    if [[ -n ${EPOCHREALTIME:-} ]]; then
        local us=${EPOCHREALTIME//[!0-9]/}
        echo $((10#$us / 1000))
    else
        date +%s%3N
    fi
}

# "12.5" -> 12500: bash has no floating point, so seconds are kept as integer milliseconds.
seconds_to_ms() {
    local text=$1
    if [[ ! $text =~ ^([0-9]{1,9})(\.([0-9]*))?$ ]]; then
        return 1
    fi
    local whole=${BASH_REMATCH[1]} frac="${BASH_REMATCH[3]}000"
    echo $((10#$whole * 1000 + 10#${frac:0:3}))
}

ms_to_seconds() {
    printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000))
}

# Sleep without forking a `sleep` per poll: a read that times out on a pipe nobody writes to.
exec {PAUSE_FD}<> <(:)
pause() {
    read -rt "$1" -u "$PAUSE_FD" _ || true
}

# `greenckpt notify ...` when a runtime listens; begin's one-line advice goes to stderr. A refused
# or failed notification is said and the run goes on: the application must never stop for it.
notify() {
    [[ -n ${GREENCKPT_RUNTIME_SOCKET:-} ]] || return 0
    local out
    if out=$("${GK[@]}" notify "$@" 2>&1); then
        [[ $1 != begin || -z $out ]] || log "$out"   # the runtime's advice; ends say nothing
        return 0
    fi
    log "greenckpt notify $1 $2 failed, going on: ${out//$'\n'/ }"
    return 1
}

app_alive() {
    [[ -n ${APP_PID:-} ]] && kill -0 "$APP_PID" 2>/dev/null
}

# Resident bytes of the application's process tree. DMTCP writes one image per process and says
# nothing of its size beforehand, so the first checkpoint announces the memory it will save (an
# overestimate when DMTCP compresses: DMTCP_GZIP=1, its default). Reads /proc only, no fork.
resident_bytes() {
    local -A kids=()
    local dir pid stat rest ppid
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        { read -r stat <"$dir/stat"; } 2>/dev/null || continue
        rest=${stat##*) }     # after "pid (comm) ": state ppid ...
        rest=${rest#* }
        ppid=${rest%% *}
        kids[$ppid]="${kids[$ppid]:-} $pid"
    done
    local -a todo=("$APP_PID")
    local total=0 pages _size
    while ((${#todo[@]})); do
        pid=${todo[-1]}
        unset 'todo[-1]'
        if { read -r _size pages _ <"/proc/$pid/statm"; } 2>/dev/null; then
            total=$((total + pages * PAGE_BYTES))
        fi
        # shellcheck disable=SC2206  # the children are a space-separated list of numbers
        [[ -z ${kids[$pid]:-} ]] || todo+=(${kids[$pid]})
    done
    echo "$total"
}

# The images DMTCP wrote since the marker file was touched: "BYTES PATH" lines, PATH relative to
# the checkpoint directory (a second level when DMTCP's unique-checkpoint-filenames is on).
new_images() {
    find "$CKPT_DIR" -maxdepth 2 -type f -name 'ckpt_*.dmtcp' -newer "$MARKER" -printf '%s %P\n'
}

# The images a restart reads: those of the last checkpoint this script saw succeed (its
# manifest), else the ckpt_*.dmtcp files directly in the directory (written by DMTCP alone).
restart_images() {
    local manifest="$CKPT_DIR/$MANIFEST_NAME" rel
    if [[ -f $manifest ]]; then
        while IFS= read -r rel; do
            [[ -z $rel ]] || echo "$CKPT_DIR/$rel"
        done <"$manifest"
    else
        find "$CKPT_DIR" -maxdepth 1 -type f -name 'ckpt_*.dmtcp' | sort
    fi
}

# A blocking checkpoint between notify begin and end; the next one's size is this one's bytes.
checkpoint() {
    CKPT_COUNT=$((CKPT_COUNT + 1))
    local size=$PREV_BYTES source="the previous images"
    if ((size < 1)); then
        size=$(resident_bytes)
        source="resident memory of the processes"
    fi
    ((size >= 1)) || size=1
    log "checkpoint $CKPT_COUNT: announcing $size bytes ($source)"
    touch "$MARKER"
    notify begin checkpoint --path "$CKPT_DIR" --size "${size}B" "${LEVEL_ARGS[@]}" \
        && OPEN_PHASE=checkpoint
    local start took ok=1 out lines bytes=0 count=0 line
    start=$(now_ms)
    out=$(dmtcp_command --coord-port "$PORT" --bcheckpoint 2>&1) || ok=0
    took=$(($(now_ms) - start))
    lines=$(new_images)
    while IFS=' ' read -r line _; do
        [[ -z $line ]] || { bytes=$((bytes + line)); count=$((count + 1)); }
    done <<<"$lines"
    if ((ok && count > 0)); then
        # The manifest is replaced whole (temporary file + rename): a restart reads either the
        # previous good list or this one, never a half-written one.
        cut -d' ' -f2- <<<"$lines" >"$CKPT_DIR/.$MANIFEST_NAME.tmp"
        mv -f "$CKPT_DIR/.$MANIFEST_NAME.tmp" "$CKPT_DIR/$MANIFEST_NAME"
        PREV_BYTES=$bytes
        log "checkpoint $CKPT_COUNT: $count images, $bytes bytes in $(ms_to_seconds "$took") s"
    else
        ok=0
        log "checkpoint $CKPT_COUNT failed (${out//$'\n'/ }; $count new images)"
    fi
    end_phase checkpoint "$ok" "$took"
}

end_phase() {
    local kind=$1 ok=$2 took=$3 failed=()
    ((ok)) || failed=(--failed)
    if [[ $OPEN_PHASE == "$kind" ]]; then
        OPEN_PHASE=""
        notify end "$kind" --seconds "$(ms_to_seconds "$took")" "${failed[@]}" || true
    fi
}

# dmtcp_status -> "PEERS RUNNING" from dmtcp_command --status (NUM_PEERS=n, RUNNING=yes|no).
dmtcp_status() {
    local out peers=0 running=no
    out=$(dmtcp_command --coord-port "$PORT" --status 2>/dev/null) || true
    [[ $out =~ NUM_PEERS=([0-9]+) ]] && peers=${BASH_REMATCH[1]}
    [[ $out =~ RUNNING=(yes|no) ]] && running=${BASH_REMATCH[1]}
    echo "$peers $running"
}

# Restart from the images, between notify begin and end restart. The restart is over when the
# coordinator reports as many peers as images, all RUNNING: DMTCP has restored every process.
restart() {
    local -a images=("${RESTART_IMAGES[@]}")
    local bytes=0 img
    for img in "${images[@]}"; do
        bytes=$((bytes + $(stat -L -c %s "$img")))
    done
    log "restart: ${#images[@]} images, $bytes bytes from $CKPT_DIR"
    notify begin restart --path "$CKPT_DIR" --size "$((bytes > 0 ? bytes : 1))B" \
        "${LEVEL_ARGS[@]}" && OPEN_PHASE=restart
    local start took ok=0 peers running outcome=failed
    start=$(now_ms)
    dmtcp_restart --join-coordinator --coord-port "$PORT" --ckptdir "$CKPT_DIR" "${images[@]}" \
        {PAUSE_FD}<&- &
    APP_PID=$!
    while app_alive; do
        read -r peers running < <(dmtcp_status)
        if ((peers >= ${#images[@]})) && [[ $running == yes ]]; then
            ok=1
            outcome="done"
            break
        fi
        pause 0.1
    done
    took=$(($(now_ms) - start))
    log "restart $outcome in $(ms_to_seconds "$took") s"
    end_phase restart "$ok" "$took"
    PREV_BYTES=$bytes
}

# On every exit: end a phase left open (as failed), stop the coordinator and its processes.
# shellcheck disable=SC2317  # reached through the EXIT trap
cleanup() {
    local status=$?
    trap - EXIT INT TERM HUP
    if [[ -n ${OPEN_PHASE:-} ]]; then
        end_phase "$OPEN_PHASE" 0 0
    fi
    if [[ -n ${COORD_PID:-} ]] && kill -0 "$COORD_PID" 2>/dev/null; then
        if [[ -n ${PORT:-} ]]; then
            dmtcp_command --coord-port "$PORT" --quit >/dev/null 2>&1 || true
        fi
        local i
        for ((i = 0; i < 50; i++)); do
            kill -0 "$COORD_PID" 2>/dev/null || break
            pause 0.1
        done
        kill -KILL "$COORD_PID" 2>/dev/null || true
        wait "$COORD_PID" 2>/dev/null || true
    fi
    if app_alive; then
        kill -TERM "$APP_PID" 2>/dev/null || true
    fi
    [[ -z ${WORK:-} ]] || rm -rf "$WORK"
    exit "$status"
}

# --- arguments -----------------------------------------------------------------------------

INTERVAL_TEXT=3600
CKPT_DIR=${DMTCP_CHECKPOINT_DIR:-./dmtcp-ckpt}
LEVEL_ARGS=()
need_value() {
    (($# >= 2)) || die_usage "$1 needs a value: $ME --help says which"
}
while (($#)); do
    case $1 in
        --interval) need_value "$@"; INTERVAL_TEXT=$2; shift 2 ;;
        --interval=*) INTERVAL_TEXT=${1#*=}; shift ;;
        --ckpt-dir) need_value "$@"; CKPT_DIR=$2; shift 2 ;;
        --ckpt-dir=*) CKPT_DIR=${1#*=}; shift ;;
        --level) need_value "$@"; LEVEL_ARGS=(--level "$2"); shift 2 ;;
        --level=*) LEVEL_ARGS=(--level "${1#*=}"); shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        -*) die_usage "unknown option '$1': expected --interval SECONDS, --ckpt-dir DIR," \
            "--level N, then -- APP [ARGS...]" ;;
        *) break ;;
    esac
done
(($#)) || die_usage "no application given: put it after --, e.g. $ME --interval 600 -- ./app"
APP=("$@")
if ! INTERVAL_MS=$(seconds_to_ms "$INTERVAL_TEXT") || ((INTERVAL_MS < 1)); then
    die_usage "--interval '$INTERVAL_TEXT' is not a number of seconds > 0, e.g. --interval 814"
fi
if ((${#LEVEL_ARGS[@]})) && [[ ! ${LEVEL_ARGS[1]} =~ ^[1-9][0-9]{0,2}$ ]]; then
    die_usage "--level '${LEVEL_ARGS[1]}' is not a checkpoint level: a whole number >= 1, e.g. 4"
fi
[[ -n $CKPT_DIR ]] || die_usage "--ckpt-dir is empty: give a directory, e.g. --ckpt-dir ./ckpt"
for tool in dmtcp_coordinator dmtcp_launch dmtcp_command dmtcp_restart; do
    command -v "$tool" >/dev/null || die_usage "$tool is not on PATH: install DMTCP" \
        "(github.com/dmtcp/dmtcp) and add its bin directory to PATH"
done
read -r -a GK <<<"${GREENCKPT:-greenckpt}"
if [[ -n ${GREENCKPT_RUNTIME_SOCKET:-} ]] && ! command -v "${GK[0]:-}" >/dev/null; then
    die_usage "'${GREENCKPT:-greenckpt}' is not a command: put greenckpt on PATH or set" \
        "GREENCKPT, e.g. GREENCKPT=/path/to/venv/bin/greenckpt"
fi
if ! mkdir -p -- "$CKPT_DIR" 2>/dev/null || ! CKPT_DIR=$(cd -- "$CKPT_DIR" && pwd); then
    die_usage "--ckpt-dir '$CKPT_DIR' cannot be created: give a writable directory"
fi
mapfile -t RESTART_IMAGES < <(restart_images)
for img in "${RESTART_IMAGES[@]}"; do
    [[ -f $img ]] || die_usage "image $img (listed in $CKPT_DIR/$MANIFEST_NAME) is missing:" \
        "restore it, or remove $CKPT_DIR to start afresh"
done

# --- run -----------------------------------------------------------------------------------

PAGE_BYTES=$(getconf PAGESIZE)
CKPT_COUNT=0
PREV_BYTES=0
OPEN_PHASE=""
APP_PID=""
PORT=""
WORK=$(mktemp -d "${TMPDIR:-/tmp}/$ME.XXXXXX")
MARKER=$WORK/marker
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# The coordinator on a free port of its own (--port 0 and --port-file), so jobs sharing a node
# do not join each other's computation.
# Its prompts on stdout are dropped; the pause pipe is not the children's to inherit.
dmtcp_coordinator --quiet --port 0 --port-file "$WORK/port" --ckptdir "$CKPT_DIR" \
    </dev/null >/dev/null {PAUSE_FD}<&- &
COORD_PID=$!
for ((i = 0; i < 300; i++)); do
    if [[ -s $WORK/port ]]; then
        read -r PORT <"$WORK/port" || true
        [[ ! $PORT =~ ^[0-9]+$ ]] || break
    fi
    kill -0 "$COORD_PID" 2>/dev/null || { log "dmtcp_coordinator exited at start"; exit 1; }
    pause 0.1
done
[[ $PORT =~ ^[0-9]+$ ]] || { log "dmtcp_coordinator wrote no port in 30 s"; exit 1; }

if ((${#RESTART_IMAGES[@]})); then
    restart
else
    dmtcp_launch --join-coordinator --coord-port "$PORT" --ckptdir "$CKPT_DIR" "${APP[@]}" \
        {PAUSE_FD}<&- &
    APP_PID=$!
fi

# The interval counts computation only: from the end of the launch, restart or last checkpoint.
last=$(now_ms)
while app_alive; do
    left=$((last + INTERVAL_MS - $(now_ms)))
    if ((left > 0)); then
        pause "$(ms_to_seconds $((left < POLL_MS ? left : POLL_MS)))"
        continue
    fi
    checkpoint
    last=$(now_ms)
done
status=0
wait "$APP_PID" || status=$?
APP_PID=""
exit "$status"
