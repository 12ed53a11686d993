#!/bin/sh
# Slurm Epilog: ends, on the node's sonde agent, the sonde job that
# task-prolog.sh named after the Slurm job.
#
#   slurm.conf:  Epilog=/etc/slurm/sonde/epilog.sh   (job-name.sh beside it)
#
# slurmd runs it as root on each node of the job when the job ends there.
# It posts to the agent's POST /api/jobs/{job}/end (reason "Slurm epilog",
# attribute slurm.job.id): the job then reads as ended in GET /api/jobs
# (state "ended", not failed, no node lost), kept so across restarts, and the
# agent passes the end on to its master. An agent where no task of the job
# reported answers 404, which is no error here (a node the job held without
# running anything under sonde). The node's Epilog does not know the job's
# exit code, so the end says nothing of success or failure.
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

body="{\"reason\": \"Slurm epilog\", \"attributes\": {\"slurm.job.id\": \"$SLURM_JOB_ID\"}}"
# The job name is made of digits, "slurm-" and "_" (job-name.sh): nothing to
# escape in the path.
send() {
    curl --silent --show-error --max-time 5 --output /dev/null --write-out '%{http_code}' \
        -H 'content-type: application/json' --data-binary "$body" "$@" "$api/api/jobs/$sonde_job/end" 2>&1
}
# The token goes to curl on stdin (`-H @-`), never on its command line, which
# every user of the node can read.
if [ -n "$token" ]; then
    code="$(printf 'authorization: Bearer %s\n' "$token" | send -H @-)"
else
    code="$(send)"
fi
case "$code" in
    200 | 404) ;;
    *) echo "sonde epilog: could not report $sonde_job's end to $api: $code" >&2 ;;
esac
exit 0
