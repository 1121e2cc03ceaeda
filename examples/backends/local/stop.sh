#!/bin/sh
# Local shell backend: stop one unit (its workers close their connections and exit).
#   stop.sh UNIT MANAGER
set -eu
unit=$1 manager=$2
pidfile=".weir/units/$manager-$unit.pid"
[ -f "$pidfile" ] || exit 0
kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
rm -f "$pidfile"
