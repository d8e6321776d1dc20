#!/bin/bash
if grep -qx 'hello from harbor' /app/hello.txt 2>/dev/null; then echo 1; else echo 0; fi \
  > /logs/verifier/reward.txt
