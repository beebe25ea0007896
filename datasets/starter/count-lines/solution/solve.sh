#!/bin/bash
set -euo pipefail
wc -l < /app/data.txt > /app/line_count.txt
