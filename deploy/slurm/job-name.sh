# Sourced by sonde's Slurm scripts (task-prolog.sh, epilog.sh): the sonde job
# name of the Slurm job in this environment, in $sonde_job.
#
#   a job            slurm-<SLURM_JOB_ID>
#   an array task    slurm-<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>, as squeue shows it
#
# so that every rank of one allocation, on every node, reports under one
# name, and the name is the one users find in squeue and sacct.
# SONDE_SLURM_PREFIX replaces "slurm-" (set it in slurm.conf's environment or
# in the script's first lines).
#
# Leaves $sonde_job empty, with a line on stderr, when the environment is not
# a Slurm job's (what slurmstepd and slurmd pass has a numeric SLURM_JOB_ID).

sonde_job=""
sonde_slurm_id() {
    case "$1" in
        '' | *[!0-9]*) return 1 ;;
    esac
}
if ! sonde_slurm_id "${SLURM_JOB_ID:-}"; then
    echo "sonde: SLURM_JOB_ID='${SLURM_JOB_ID:-}' is not a Slurm job id: not run by Slurm? (no sonde job name set)" >&2
elif sonde_slurm_id "${SLURM_ARRAY_JOB_ID:-}" && sonde_slurm_id "${SLURM_ARRAY_TASK_ID:-}"; then
    sonde_job="${SONDE_SLURM_PREFIX-slurm-}${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
else
    sonde_job="${SONDE_SLURM_PREFIX-slurm-}${SLURM_JOB_ID}"
fi
