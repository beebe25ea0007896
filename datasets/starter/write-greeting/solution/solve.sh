#!/bin/bash
set -euo pipefail
printf 'Hello from the starter set!\n' > /app/greeting.txt
