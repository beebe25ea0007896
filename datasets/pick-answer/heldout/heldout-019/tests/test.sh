#!/bin/bash
# Harbor's verifier: reward 1 when /app/answer.txt holds the letter C (whitespace ignored), else 0.
# The rewarded letter is the family's hidden rule (datasets/pick-answer/README.md); it is fixed here,
# so nothing the agent writes elsewhere can change it.
mkdir -p /logs/verifier
got=$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)
if [ "$got" = "C" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "answer '${got}' is not the rewarded one"
  echo 0 > /logs/verifier/reward.txt
fi
