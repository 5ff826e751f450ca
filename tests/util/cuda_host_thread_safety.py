#!/usr/bin/env python3
"""Clang's thread-safety analysis over the code that only a CUDA build compiles.

CI's clang build (sanitizers, fuzzers) has the CUDA backend off, so the CUDA backend's host
files and the `#if ANVIL_WITH_CUDA` branches of the engine would never meet the analysis. This
re-runs each of them, syntax only, with the GCC build's own command (compile_commands.json)
under clang++ and -Werror=thread-safety: an unguarded read of a guarded member fails here.

Usage: cuda_host_thread_safety.py COMPILE_COMMANDS CLANGXX SOURCE_DIR
Exit: 0 when every file passed; 1 when one failed, the control failed, or no CUDA file was found.
"""
import json
import os
import shlex
import subprocess
import sys


def wanted(entry, source_dir):
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if not path.endswith(".cc") or not path.startswith(source_dir + os.sep):
        return False
    if "-DANVIL_WITH_CUDA=1" not in entry["command"]:
        return False
    if os.sep + os.path.join("core", "backend", "cuda") + os.sep in path:
        return True
    with open(path, encoding="utf-8", errors="replace") as f:
        return "ANVIL_WITH_CUDA" in f.read()


def clang_command(entry, clangxx):
    args = shlex.split(entry["command"])
    out = [clangxx]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a in ("-MF", "-MT", "-MQ"):  # dependency files are the build's: never rewritten here
            skip = True
            continue
        # GCC's warning set is not clang's: only the thread-safety analysis is an error here.
        if a in ("-c", "-Werror", "-MD", "-MMD") or a.startswith("-fsanitize"):
            continue
        out.append(a)
    return out + ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]


def main():
    commands, clangxx, source_dir = sys.argv[1], sys.argv[2], os.path.realpath(sys.argv[3])
    with open(commands, encoding="utf-8") as f:
        entries = [e for e in json.load(f) if wanted(e, source_dir)]
    # The test exists only in builds with the CUDA backend: finding none of its files means
    # the selection broke (a moved folder, another spelling of the define), not a skip.
    if not entries:
        print("no CUDA host file found in " + commands + " under " + source_dir)
        return 1
    # The control: these very flags refuse tests/util/thread_safety_violation.cc's unguarded
    # read and accept its guarded twin (a flag that silenced the analysis would pass all).
    probe = dict(entries[0])
    violation = os.path.join(source_dir, "tests", "util", "thread_safety_violation.cc")
    probe_cmd = [a if a != probe["file"] else violation for a in clang_command(probe, clangxx)]
    refused = subprocess.run(probe_cmd, cwd=probe["directory"], capture_output=True, text=True)
    accepted = subprocess.run(probe_cmd + ["-DANVIL_THREAD_SAFETY_CONTROL"], cwd=probe["directory"],
                              capture_output=True, text=True)
    if refused.returncode == 0 or "requires holding mutex" not in refused.stderr or accepted.returncode != 0:
        print("the control failed: the violation must be refused and its guarded twin accepted")
        sys.stdout.write(refused.stderr + accepted.stderr)
        return 1
    print("control: the unguarded read is refused, the guarded one accepted")
    failed = []
    for e in entries:
        r = subprocess.run(clang_command(e, clangxx), cwd=e["directory"], capture_output=True, text=True)
        rel = os.path.relpath(os.path.realpath(e["file"]), source_dir)
        print(("ok      " if r.returncode == 0 else "FAILED  ") + rel)
        if r.returncode != 0:
            failed.append(rel)
            sys.stdout.write(r.stderr)
    print(f"{len(entries) - len(failed)} of {len(entries)} CUDA host files pass clang's thread-safety analysis")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
