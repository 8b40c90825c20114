#!/bin/sh
# PID 1 of a lab host, run by `unshare --uts --mount --pid --fork --kill-child --mount-proc`
# inside the host's network namespace. Mounts are private to this mount namespace: nothing
# here touches the machine's own /etc, /root, /tmp or /run.
set -eu
H=$1
hostname "$(cat "$H/hostname")"
mount -t overlay lab-etc -o "lowerdir=/etc,upperdir=$H/etc.upper,workdir=$H/etc.work" /etc
mount -t overlay lab-root -o "lowerdir=/root,upperdir=$H/root.upper,workdir=$H/root.work" /root
# Own /var: what a host writes there (backups, apply records) stays its own.
mount -t overlay lab-var -o "lowerdir=/var,upperdir=$H/var.upper,workdir=$H/var.work" /var
mount --bind "$H/rancher-etc" /etc/rancher
mount --bind "$H/rancher-var" /var/lib/rancher
mount --bind "$H/bin" /usr/local/bin
mount --bind "$H/home" /home
# Last: the host dir may itself live under /tmp.
mount -t tmpfs -o mode=1777 lab-tmp /tmp
mount -t tmpfs -o mode=755 lab-run /run
mkdir -p /run/sshd /run/lock
exec runsvdir -P /etc/service
