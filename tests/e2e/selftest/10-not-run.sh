# Harness self-test: never runs (the guest died in the previous scenario).
true
