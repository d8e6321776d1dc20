#!/bin/bash
heading=0; word=0
[ "$(head -n1 /work/report.md 2>/dev/null)" = "# Report" ] && heading=1
grep -qw done /work/report.md 2>/dev/null && word=1
echo "heading=$heading mentions_done=$word"  # why, as a task's tests say it
python3 - "$heading" "$word" <<'PY'
import json, sys
heading, word = (int(x) for x in sys.argv[1:])
with open("/logs/verifier/reward.json", "w") as out:
    json.dump({"passed": heading * word, "heading": heading, "mentions_done": word}, out)
PY
