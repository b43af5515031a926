#!/bin/sh
# Submits the sharded plan (plan.sbatch, a job array) and its merge
# (merge.sbatch, queued after every array task has ended well). Run it from
# the folder that holds the inputs; results go to results/plan.
set -eu
here=$(dirname "$0")
mkdir -p results/plan-shards
array=$(sbatch --parsable "$here/plan.sbatch")
array=${array%%;*}
merge=$(sbatch --parsable --dependency="afterok:$array" "$here/merge.sbatch")
echo "submitted: array $array (the shards), then $merge (the merge into results/plan)"
