#!/bin/sh
# A loaded controller's first contact, made real: the ssh client itself (/usr/bin/ssh), but a control master that does
# not exist yet takes BC_SLOW_MASTER_S seconds to open (the time a controller busy with many forks took to open its
# ssh master and send the first module). Contacts through an open master are not delayed. Set as ansible_ssh_executable
# together with a fresh ansible_control_path_dir, so that the play's first contact is the one that waits.
for arg in "$@"; do
  case "$arg" in
    ControlPath=*)
      path=${arg#ControlPath=}
      path=${path#\"}
      path=${path%\"}
      [ -S "$path" ] || sleep "${BC_SLOW_MASTER_S:?BC_SLOW_MASTER_S is not set}"
      ;;
  esac
done
exec /usr/bin/ssh "$@"
