#!/bin/sh
# Local shell backend: start one unit of workers on this machine.
#   worker-manager --backend command \
#     --start-cmd 'sh examples/backends/local/start.sh {unit} {count} {manager_id} {access_file} {worker_type}' \
#     --stop-cmd  'sh examples/backends/local/stop.sh {unit} {manager_id}' ...
# WEIR_BIN: where the executables are (default: target/debug). Unit state lives in .weir/units/.
set -eu
unit=$1 count=$2 manager=$3 access=$4 type=$5
bin=${WEIR_BIN:-target/debug}
mkdir -p .weir/units
"$bin/worker-manager" --fixed "$count" --id "$manager" --unit "$unit" --access-file "$access" \
  --worker-type "$type" >".weir/units/$manager-$unit.log" 2>&1 &
echo $! >".weir/units/$manager-$unit.pid"
