#!/bin/sh
# benchmark-cycle's dead-man switch. inference_switch (state=armed) writes this file to the host and arms a transient
# systemd timer that runs it; the cycle's controller disarms it once the unit is started again. Should the controller
# die or lose the host first, the switch brings the service back on its own:
#
#   deadman.sh --unit U.service --action start|restart [--invocation ID] [--sweep TAG]
#              [--heartbeat FILE --outer-at EPOCH --timer T.timer] [--end-wait S]
#
# inference_switch writes it to /usr/local/libexec/benchmark-cycle/deadman-<sha256>.sh (one file per content, never
# changed under an armed switch). A bad argument exits 2 having done nothing, and says why.
#
# --action start: the cycle stopped the unit. A unit running again (an operator, systemd or another cycle started it)
#   is left alone; else the cycle's sweep is ended (it holds the GPU) and the unit started.
# --action restart: the server was released in place (it runs, paused, its memory freed): only the start it was armed
#   for (--invocation, the unit's InvocationID) is ended (a stop job, SIGKILL to all) and started again. A resume from
#   a timer is never tried: a second resume kills an SGLang server.
# --heartbeat: the controller's promise of its next contact (epoch seconds in FILE). The timer runs this every few
#   seconds; while the promise holds and --outer-at is ahead, nothing is done. Past either (or a promise that cannot be
#   read: unknown is not alive) it stops its own timer and acts. Without one it fires once, at its deadline.
#
# The unit is read down before its start (at most --end-wait seconds), so the start is tried, and counted against
# systemd's start limit, once. Every step says why in the switch's journal (journalctl -u bc-deadman-<unit>).
# Tests: tests/unit/test_switch.py (this file under /bin/sh, a systemctl double); the lab's systemd: test_one_owner.py,
# test_release.py.

say() { printf '%s\n' "benchmark-cycle dead-man switch: $*"; }

# a whole number of seconds: digits, no leading zero (the shell's arithmetic reads 08 as a bad octal)
seconds() { case "$1" in '' | 0?* | *[!0-9]*) return 1 ;; esac; }

unit='' action='' invocation='' sweep='' heartbeat='' outer_at='' timer='' end_wait=30
while [ "$#" -gt 0 ]; do
  [ "$#" -ge 2 ] || { say "$1 needs a value: nothing done"; exit 2; }
  case "$1" in
    --unit) unit=$2 ;;
    --action) action=$2 ;;
    --invocation) invocation=$2 ;;
    --sweep) sweep=$2 ;;
    --heartbeat) heartbeat=$2 ;;
    --outer-at) outer_at=$2 ;;
    --timer) timer=$2 ;;
    --end-wait) end_wait=$2 ;;
    *) say "unknown argument $1: nothing done"; exit 2 ;;
  esac
  shift 2
done
case "$action" in start | restart) ;; *) say "--action is start or restart, not '$action': nothing done"; exit 2 ;; esac
seconds "$end_wait" || { say "--end-wait is whole seconds, not '$end_wait': nothing done"; exit 2; }
[ -n "$unit" ] || { say "no --unit: nothing done"; exit 2; }
[ -z "$heartbeat" ] || { [ -n "$timer" ] && seconds "$outer_at"; } || {
  say "--heartbeat needs --timer and --outer-at (whole seconds, not '$outer_at'): nothing done"
  exit 2
}
[ "$action" = start ] || [ -n "$invocation" ] || { say "--action restart needs --invocation: nothing done"; exit 2; }

# the unit still in the state the switch was armed for, else nothing is done (a serving server is never restarted)
still_armed() {
  if [ "$action" = start ]; then
    state=$(systemctl show -P ActiveState -- "$unit")
    case "$state" in
      active | activating | reloading) say "$unit is $state: started since the switch was armed, nothing done"; exit 0 ;;
    esac
  else
    now=$(systemctl show -P InvocationID -- "$unit")
    [ "$now" = "$invocation" ] || {
      say "$unit runs another start ($now) than the one the switch was armed for ($invocation): nothing done"
      exit 0
    }
  fi
}

# the sweep's tag as an extended regular expression that matches it literally (pkill -f)
literal() { printf '%s\n' "$1" | sed 's/[][\.*^$+?(){}|-]/\\&/g'; }

if [ -n "$heartbeat" ]; then
  # a kept promise: nothing to do. Past the outer bound the timer stops whatever follows; a broken promise with a unit
  # no longer in the state it was armed for (the controller died before its stop, an operator started it) leaves the
  # timer checking; a switch that acts stops its timer first
  at=$(date +%s)
  promised=$(cat -- "$heartbeat" 2>/dev/null)
  case "$promised" in '' | *[!0-9]*) promised=0 ;; esac
  [ "$at" -lt "$outer_at" ] && [ "$at" -lt "$promised" ] && exit 0
  [ "$at" -ge "$outer_at" ] && systemctl stop --no-block -- "$timer"
  still_armed
  systemctl stop --no-block -- "$timer"
  why="the heartbeat of the controller stopped, it promised its next contact by $promised and it is $at, 0 means none readable, or the outer deadline $outer_at passed"
else
  still_armed
  why="the controller of the cycle did not disarm it in time"
fi

what=''
[ -z "$sweep" ] || what="ending the sweep $sweep, then "
if [ "$action" = restart ]; then what="${what}restarting $unit (released in place)"; else what="${what}starting $unit"; fi
say "$why: $what"
if [ -n "$sweep" ]; then
  pkill -KILL -f -- "--tag $(literal "$sweep")"
  sleep 2
fi
if [ "$action" = restart ]; then
  # checked again after the sweep's end (a cycle may have brought it back meanwhile); then, as the cycle's own
  # restart, a stop job (so Restart= never applies) and SIGKILL to all
  [ -z "$sweep" ] || still_armed
  systemctl stop --no-block -- "$unit"
  systemctl kill --kill-who=all --signal=SIGKILL -- "$unit"
fi
# the unit down first (a stop of the cycle's own may still run), bounded, so that the start is tried once; past the
# bound the start is queued behind the stop all the same
i=0
while [ "$i" -lt $((end_wait * 5)) ]; do
  case "$(systemctl show -P ActiveState -- "$unit")" in inactive | failed) break ;; esac
  sleep 0.2
  i=$((i + 1))
done
systemctl reset-failed -- "$unit"
systemctl start --no-block -- "$unit"
