# Harness self-test: a bare command fails under set -e; the reason names the last step.
log "the step before the failure"
false
