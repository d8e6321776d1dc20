#!/bin/bash
grep -qx hello hello.txt 2>/dev/null && r=1 || r=0
echo "reward $r"
echo $r > /logs/verifier/reward.txt
