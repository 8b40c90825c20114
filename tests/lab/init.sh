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
own() {  # own DIR: an overlay of the machine's DIR whose writes land in the host's dir
  mkdir -p "$H/$2.upper" "$H/$2.work"
  mount -t overlay "lab-$2" -o "lowerdir=$1,upperdir=$H/$2.upper,workdir=$H/$2.work" "$1"
}
own /etc etc
own /root root
# Own /var: what a host writes there (backups, apply records) stays its own.
own /var var
own /usr usr
for d in /opt /srv; do [ -d "$d" ] && own "$d" "${d#/}"; done
mount --bind "$H/rancher-etc" /etc/rancher
mount --bind "$H/rancher-var" /var/lib/rancher
mount --bind "$H/bin" /usr/local/bin
mount --bind "$H/home" /home
for d in /mnt /media /dev/shm; do [ -d "$d" ] && mount -t tmpfs -o mode=755 "lab-${d##*/}" "$d"; done
[ ! -d /dev/shm ] || chmod 1777 /dev/shm
# Last: the host dir may itself live under /tmp.
mount -t tmpfs -o mode=1777 lab-tmp /tmp
mount -t tmpfs -o mode=755 lab-run /run
mkdir -p /run/sshd /run/lock
# What is left of the machine's is read-only here: its root file system (the checkout, the
# other hosts' directories and anything at the top level), its devices' directory, sysfs
# and the kernel's global settings. Per-mount flags: the machine's own mounts keep theirs.
mount -o remount,bind,ro /
mount -o remount,bind,ro /dev
mount -o remount,bind,ro /sys
mount --bind /proc/sys /proc/sys
# A host's own names stay its root's to change (the UTS namespace is the host's own).
for f in hostname domainname; do mount --bind "/proc/sys/kernel/$f" "/proc/sys/kernel/$f"; done
mount -o remount,bind,ro /proc/sys
exec runsvdir -P /etc/service
