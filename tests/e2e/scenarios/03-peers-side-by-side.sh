# Both kernel peers at once on discarding backends (null_blk without memory, LIO rd_nullio), as
# the side-by-side benchmark uses them: each serves a short fio random-read run whose JSON
# lands in the artifacts; then both are torn down and set up again, to prove the teardown
# leaves nothing behind.
# e2e-timeout: 120

nvmet_peer_setup -b null -s 256
srpt_peer_setup -b null -s 256
ndev=$(nvme_connect "$NVMET_PEER_NQN" "$E2E_IP" "$NVMET_PEER_PORT")
sdev=$(srp_login "$SRPT_PEER_TARGET")

for t in "nvmet:$ndev" "srpt:$sdev"; do
  fio_json "${t%%:*}-randread" --name=randread --filename="${t#*:}" --direct=1 --ioengine=libaio \
    --rw=randread --bs=4k --iodepth=32 --time_based --runtime=2
  iops=$(jq '.jobs[0].read.iops | floor' "$E2E_LOGDIR/${t%%:*}-randread.json")
  log "${t%%:*}: $iops IOPS (4k random read, QD32, TCG guest)"
  [ "$iops" -gt 0 ] || fail "${t%%:*}: no reads completed"
done

nvme_disconnect "$NVMET_PEER_NQN"
srp_logout_all
nvmet_peer_teardown
srpt_peer_teardown
expect_fail test -d "/sys/kernel/config/nvmet/subsystems/$NVMET_PEER_NQN"
expect_fail grep -q '^ib_srpt ' /proc/modules

nvmet_peer_setup -s 16
srpt_peer_setup -s 16
fio_verify "$(nvme_connect "$NVMET_PEER_NQN" "$E2E_IP" "$NVMET_PEER_PORT")" 8M
fio_verify "$(srp_login "$SRPT_PEER_TARGET")" 8M
