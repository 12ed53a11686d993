#!/bin/sh
# Slurm TaskProlog: the Slurm job's ID names the sonde job its tasks report.
#
#   slurm.conf:  TaskProlog=/etc/slurm/sonde/task-prolog.sh   (job-name.sh beside it)
#
# slurmstepd runs it as the job's user before each task starts, with the
# task's environment, and reads what it prints: each `export NAME=value` line
# is set in the task's environment. It prints, for job 4242's rank 3 (local
# rank 1):
#
#   export SONDE_CLIENT_JOB=slurm-4242               sonde's Python client
#   export MPI_SONDE_JOB=slurm-4242                  the MPI probe (LD_PRELOAD)
#   export OTEL_RESOURCE_ATTRIBUTES=sonde.job=slurm-4242,sonde.rank=3,sonde.local_rank=1,slurm.job.id=4242
#                                                    any OpenTelemetry SDK: sonde reads sonde.job
#                                                    before service.name, so the service keeps its name
#
# A variable the task already has is kept: a job that names itself
# (SONDE_CLIENT_JOB, MPI_SONDE_JOB) keeps its name, and resource attributes the
# user set stay, with sonde's added after them. It never fails the task: with
# no usable SLURM_JOB_ID it prints nothing to set and says why on stderr.
#
# Values hold no spaces, quotes or commas (Slurm takes the rest of the line as
# the value, and OTel separates attributes with commas): a job name is
# digits, '_' and the prefix; the prefix must keep to that too.
. "$(dirname "$0")/job-name.sh"
[ -n "$sonde_job" ] || exit 0

[ -n "${SONDE_CLIENT_JOB:-}" ] || echo "export SONDE_CLIENT_JOB=$sonde_job"
[ -n "${MPI_SONDE_JOB:-}" ] || echo "export MPI_SONDE_JOB=$sonde_job"

attrs="sonde.job=$sonde_job"
sonde_slurm_id "${SLURM_PROCID:-}" && attrs="$attrs,sonde.rank=$SLURM_PROCID"
sonde_slurm_id "${SLURM_LOCALID:-}" && attrs="$attrs,sonde.local_rank=$SLURM_LOCALID"
attrs="$attrs,slurm.job.id=$SLURM_JOB_ID"
case ",${OTEL_RESOURCE_ATTRIBUTES:-}," in
    *,sonde.job=*) ;; # the task names its sonde job itself
    ,,) echo "export OTEL_RESOURCE_ATTRIBUTES=$attrs" ;;
    *) echo "export OTEL_RESOURCE_ATTRIBUTES=$OTEL_RESOURCE_ATTRIBUTES,$attrs" ;;
esac
exit 0
