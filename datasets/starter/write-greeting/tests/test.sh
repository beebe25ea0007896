#!/bin/bash
# Harbor's verifier: reward 1 when /app/greeting.txt is exactly the requested line, else 0.
mkdir -p /logs/verifier
if [ -f /app/greeting.txt ] && [ "$(cat /app/greeting.txt)" = "Hello from the starter set!" ] \
   && [ "$(wc -l < /app/greeting.txt)" -eq 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "greeting.txt missing or wrong: $(head -c 200 /app/greeting.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
