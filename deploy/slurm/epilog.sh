#!/bin/sh
# Slurm Epilog: tells the node's sonde agent that the Slurm job's allocation
# on this node ended.
#
#   slurm.conf:  Epilog=/etc/slurm/sonde/epilog.sh   (job-name.sh beside it)
#
# slurmd runs it as root on each node of the job when the job ends there.
# sonde has no route that ends a job: this posts a node event of kind
# `allocation-ended` (attribute slurm.job.id) for the job task-prolog.sh
# named, through the agent's JSON ingest, from a process of role
# `slurm-epilog` (the job view lists it among the job's processes, rank -1).
# It moves the job's last time (`last_ns` of GET /api/jobs/{job}; on the
# master also this node's, in `node_last_ns`) and reaches the plugins; no
# plugin reads it as a failure or a success (the node's Epilog does not know
# the job's exit code).
#
# Where the agent is: SONDE_EPILOG_API (default http://127.0.0.1:7878, the
# agent's API on loopback, where it wants no token). An agent listening
# beyond loopback wants its API token: SONDE_API__TOKEN from the environment,
# else from /etc/sonde/sonde.env (the systemd units' secrets file).
#
# It always exits 0: a failing Epilog drains the node in Slurm, and an agent
# that is down must not take the node out of service. What went wrong goes to
# stderr (slurmd's log).
. "$(dirname "$0")/job-name.sh"
[ -n "$sonde_job" ] || exit 0

api="${SONDE_EPILOG_API:-http://127.0.0.1:7878}"
token="${SONDE_API__TOKEN:-}"
if [ -z "$token" ] && [ -r /etc/sonde/sonde.env ]; then
    token="$(sed -n 's/^SONDE_API__TOKEN=//p' /etc/sonde/sonde.env | tail -n 1)"
fi
command -v curl >/dev/null 2>&1 || { echo "sonde epilog: curl is missing; $sonde_job's end not reported" >&2; exit 0; }

body="{\"origin\": {\"job\": \"$sonde_job\", \"role\": \"slurm-epilog\"}, \"node_events\": [{\"kind\": \"allocation-ended\", \"reason\": \"Slurm epilog\", \"attributes\": {\"slurm.job.id\": \"$SLURM_JOB_ID\"}}]}"
send() {
    curl --silent --show-error --max-time 5 --output /dev/null --write-out '%{http_code}' \
        -H 'content-type: application/json' --data-binary "$body" "$@" "$api/api/ingest" 2>&1
}
# The token goes to curl on stdin (`-H @-`), never on its command line, which
# every user of the node can read.
if [ -n "$token" ]; then
    code="$(printf 'authorization: Bearer %s\n' "$token" | send -H @-)"
else
    code="$(send)"
fi
[ "$code" = 202 ] || echo "sonde epilog: could not report $sonde_job's end to $api/api/ingest: $code" >&2
exit 0
