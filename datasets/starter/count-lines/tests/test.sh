#!/bin/bash
# Harbor's verifier: reward 1 when /app/line_count.txt holds the line count of /app/data.txt, else 0.
# The expected count is fixed here (the data file ships with the task), so an agent that edits
# data.txt cannot make its own answer right.
mkdir -p /logs/verifier
expected=37
got=$(tr -d '[:space:]' < /app/line_count.txt 2>/dev/null)
if [ "$got" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "expected $expected, got '${got}'"
  echo 0 > /logs/verifier/reward.txt
fi
