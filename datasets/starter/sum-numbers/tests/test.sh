#!/bin/bash
# Harbor's verifier: reward 1 when /app/total.txt holds the sum of /app/numbers.txt, else 0.
# The expected sum is fixed here (the numbers ship with the task), so editing numbers.txt cannot help.
mkdir -p /logs/verifier
expected=6477
got=$(tr -d '[:space:]' < /app/total.txt 2>/dev/null)
if [ "$got" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "expected $expected, got '${got}'"
  echo 0 > /logs/verifier/reward.txt
fi
