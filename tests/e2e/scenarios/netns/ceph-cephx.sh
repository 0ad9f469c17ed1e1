#!/usr/bin/env bash
# Namespace hook: netns/ceph.sh with cephx on (`# e2e-netns: netns/ceph-cephx.sh`): the guest's
# client.rtgt has a key ($CEPH_CLIENT_KEY, written to /etc/ceph/ceph.client.rtgt.keyring) and
# the capabilities `profile rbd` on pool rbd only.
CEPH_E2E_CEPHX=1 exec "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/ceph.sh" "$@"
