#!/bin/bash
set -euo pipefail
printf C > /app/answer.txt
