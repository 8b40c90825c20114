"""os-release texts for lab hosts: what the real distributions ship (abridged)."""

from __future__ import annotations

OS_RELEASES = {
    "ubuntu-22.04": 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
                    'VERSION="22.04.4 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\n'
                    'ID_LIKE=debian\nUBUNTU_CODENAME=jammy\n',
    "ubuntu-24.04": 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
                    'VERSION="24.04.1 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\n'
                    'ID_LIKE=debian\n',
    "debian-12": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
                 'VERSION_ID="12"\nVERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n',
    "rocky-9": 'NAME="Rocky Linux"\nVERSION="9.4 (Blue Onyx)"\nID="rocky"\n'
               'ID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\nPLATFORM_ID="platform:el9"\n'
               'PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"\n',
    "rhel-9": 'NAME="Red Hat Enterprise Linux"\nVERSION="9.4 (Plow)"\nID="rhel"\n'
              'ID_LIKE="fedora"\nVERSION_ID="9.4"\n'
              'PRETTY_NAME="Red Hat Enterprise Linux 9.4 (Plow)"\n',
    "almalinux-9": 'NAME="AlmaLinux"\nVERSION="9.4 (Seafoam Ocelot)"\nID="almalinux"\n'
                   'ID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n'
                   'PRETTY_NAME="AlmaLinux 9.4 (Seafoam Ocelot)"\n',
    "sles-15": 'NAME="SLES"\nVERSION="15-SP5"\nVERSION_ID="15.5"\n'
               'PRETTY_NAME="SUSE Linux Enterprise Server 15 SP5"\nID="sles"\nID_LIKE="suse"\n',
    "opensuse-leap-15.5": 'NAME="openSUSE Leap"\nVERSION="15.5"\nID="opensuse-leap"\n'
                          'ID_LIKE="suse opensuse"\nVERSION_ID="15.5"\n'
                          'PRETTY_NAME="openSUSE Leap 15.5"\n',
    "alpine-3.19": 'NAME="Alpine Linux"\nID=alpine\nVERSION_ID=3.19.1\n'
                   'PRETTY_NAME="Alpine Linux v3.19"\n',
    # For tests: an OS nobody supports, and an unknown one that says what it is like.
    "unknownos-1": 'NAME="Unknown OS"\nID=unknownos\nVERSION_ID=1\nPRETTY_NAME="Unknown OS 1"\n',
    "likedebian-1": 'NAME="Like Debian"\nID=likedebian\nID_LIKE=debian\nVERSION_ID=1\n'
                    'PRETTY_NAME="Like Debian 1"\n',
}
