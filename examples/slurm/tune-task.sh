#!/usr/bin/env bash
# One tuner of a shared study: what each task of tune-array.sbatch runs (and what
# tests/project/test_slurm_recipe.py runs, several at once, on the host backend).
#
# Every tuner opens the same study in the same storage and draws from one budget: --trials is the
# total of all tuners. A tuner that dies leaves its running trials to the others (its lease
# expires; see "Tune a kernel" in the README).
#
#   MNEME_RECORDING   the recording to tune (a database <static-hash>.json or its folder); required
#   MNEME_STORAGE     the shared study: journal:/shared/fs/study.log or postgresql://user@host/db; required
#   MNEME_STUDY       the study's name (default: slurm-<job id>)
#   MNEME_TRIALS      trials of all tuners together (default 200)
#   MNEME_SPACE       search space (default standard); MNEME_SAMPLER (default optuna:tpe)
#   MNEME_SEED        base seed; tuner N samples with MNEME_SEED + N
#   MNEME_BACKEND     backend (default: the first usable one: cuda > hip > host)
#   MNEME_RESULTS     folder of the per-tuner results folders (default mneme-results/slurm-<job id>)
#   MNEME_TUNE_ARGS   more `mneme tune` options, e.g. "--workers-per-device 2 --timeout 3600"
#   MNEME             the command (default mneme; e.g. "python3 -m mneme")
set -euo pipefail

: "${MNEME_RECORDING:?set MNEME_RECORDING to the recording to tune}"
: "${MNEME_STORAGE:?set MNEME_STORAGE to journal:/shared/path/study.log or postgresql://user@host/db}"
job="${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-local}}"
task="${SLURM_ARRAY_TASK_ID:-0}"
read -ra mneme <<< "${MNEME:-mneme}"
read -ra extra <<< "${MNEME_TUNE_ARGS:-}"

args=(tune -rdb "$MNEME_RECORDING" --storage "$MNEME_STORAGE" --study "${MNEME_STUDY:-slurm-$job}"
      --trials "${MNEME_TRIALS:-200}" --space "${MNEME_SPACE:-standard}" --sampler "${MNEME_SAMPLER:-optuna:tpe}"
      --results "${MNEME_RESULTS:-mneme-results/slurm-$job}/task-$task")
# Slurm gives each task its own GPU (CUDA_VISIBLE_DEVICES), which the task sees as device 0.
args+=(--devices 0)
[ -n "${MNEME_BACKEND:-}" ] && args+=(--backend "$MNEME_BACKEND")
[ -n "${MNEME_SEED:-}" ] && args+=(--seed "$((MNEME_SEED + task))")

exec "${mneme[@]}" "${args[@]}" "${extra[@]}"
