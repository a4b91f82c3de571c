"""A scripted agent for the tests of M3c: reads the prompt on stdin, checks that it describes
the application, and edits run.sh in its working directory (a copy of the program's source).

    fake_agent.py [faster | slower | nothing | vandal PATH]

faster: sleeps a quarter of the time of the line marked SLOW (a speedup that varies little
between runs, as the speed verdict wants); slower: sleeps longer; nothing: changes
nothing; vandal: removes the SLOW line and also appends to the file PATH (outside its
directory: the original program)."""

import sys
from pathlib import Path

prompt = sys.stdin.read()
if "Application: " not in prompt or "./run.sh" not in prompt:
    sys.exit("the prompt does not describe the application")
mode = sys.argv[1] if len(sys.argv) > 1 else "faster"
run = Path("run.sh")
lines = run.read_text().splitlines(True)
if mode == "faster":  # a quarter of the sleep: a speedup whose ratio varies little per run
    run.write_text("".join(
        f"sleep {float(line.split()[1]) / 4:g}  # a quarter\n" if "SLOW" in line else line
        for line in lines))
elif mode == "vandal":
    run.write_text("".join(line for line in lines if "SLOW" not in line))
elif mode == "slower":
    run.write_text(lines[0] + "sleep 0.25\n" + "".join(lines[1:]))
if mode == "vandal":
    with open(sys.argv[2], "a") as f:
        f.write("# the agent was here\n")
print(f"fake agent: {mode}")
