#!/bin/bash
[ "$(cat answer.txt 2>/dev/null)" = 5 ] && r=1 || r=0
echo "reward $r"
echo $r > /logs/verifier/reward.txt
