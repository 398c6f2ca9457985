# Sourced by the service scripts (kafka.sh, hbase.sh, hdfs.sh).
#
# live_pid FILE MARK: prints the pid in FILE if that process is running and its command line
# contains MARK (the service's own directory or config file). A pid file left by a process
# that died with the machine can name another process after a reboot: "kill -0" alone took
# such a pid for a running broker (the broker was never started) and "down" would kill it.
live_pid() {
  local pid
  [ -f "$1" ] || return 1
  pid="$(cat "$1")"
  case "$pid" in '' | *[!0-9]*) return 1 ;; esac
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$2" || return 1
  echo "$pid"
}
