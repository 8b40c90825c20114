#!/bin/sh
# PID 1 of a lab host, run by `unshare --uts --mount --pid --fork --kill-child --mount-proc`
# inside the host's network namespace. Mounts are private to this mount namespace: nothing
# here touches the machine's own /etc, /root, /tmp or /run.
#
# A host shares nothing writable with the machine or another host, as separate machines
# don't: root on one host must gain nothing beyond it (a program planted in its
# /usr/local/sbin is its own, not every host's and the machine's). Every place a host may
# write is its own (overlays whose upper directories are the host's, binds of the host's
# directories, tmpfs); everything else of the machine's root is read-only from inside.
set -eu
H=$1
hostname "$(cat "$H/hostname")"
# The host's own mounts, in order, from one table: one `mount -a` instead of a `mount`
# each (a mount program's start, about 2 ms of CPU, was most of a host's start-up). Each
# line: what, where, type, options. The host dir holds no spaces (Lab.up makes it).
tab=$H/fstab
: > "$tab"
own() {  # own DIR NAME: an overlay of the machine's DIR whose writes land in the host's dir
  mkdir -p "$H/$2.upper" "$H/$2.work"
  echo "lab-$2 $1 overlay lowerdir=$1,upperdir=$H/$2.upper,workdir=$H/$2.work 0 0" >> "$tab"
}
own /etc etc
own /root root
# Own /var: what a host writes there (backups, apply records) stays its own.
own /var var
own /usr usr
for d in /opt /srv; do [ -d "$d" ] && own "$d" "${d#/}"; done
{
  echo "$H/rancher-etc /etc/rancher none bind 0 0"
  echo "$H/rancher-var /var/lib/rancher none bind 0 0"
  echo "$H/bin /usr/local/bin none bind 0 0"
  echo "$H/home /home none bind 0 0"
  for d in /mnt /media /dev/shm; do
    [ -d "$d" ] && echo "lab-${d##*/} $d tmpfs mode=755 0 0"
  done
  # Last: the host dir may itself live under /tmp.
  echo "lab-tmp /tmp tmpfs mode=1777 0 0"
  echo "lab-run /run tmpfs mode=755 0 0"
  echo "/proc/sys /proc/sys none bind 0 0"
  # A host's own names stay its root's to change (the UTS namespace is the host's own).
  echo "/proc/sys/kernel/hostname /proc/sys/kernel/hostname none bind 0 0"
  echo "/proc/sys/kernel/domainname /proc/sys/kernel/domainname none bind 0 0"
} >> "$tab"
mount -a -T "$tab"
[ ! -d /dev/shm ] || chmod 1777 /dev/shm
mkdir -p /run/sshd /run/lock
# What is left of the machine's is read-only here: its root file system (the checkout, the
# other hosts' directories and anything at the top level), its devices' directory, sysfs
# and the kernel's global settings. Per-mount flags: the machine's own mounts keep theirs.
mount -o remount,bind,ro /
mount -o remount,bind,ro /dev
mount -o remount,bind,ro /sys
mount -o remount,bind,ro /proc/sys
exec runsvdir -P /etc/service
