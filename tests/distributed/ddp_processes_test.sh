#!/usr/bin/env bash
# Data-parallel runs as rank processes through anvil-run (tests/distributed/ddp_train_main.cc
# trains; its --compare mode compares parameter files).
#   ddp_processes_test.sh BUILD_DIR equivalence   2 and 4 ranks == 1 process (SGD, AdamW)
#   ddp_processes_test.sh BUILD_DIR kill          kill -9 of a rank: restart from the checkpoint,
#                                                 the weights of an uninterrupted run, bitwise
#   ddp_processes_test.sh BUILD_DIR divergence    a perturbed rank is named at the next check
set -euo pipefail
build=$1
mode=$2
run="$build/launcher/anvil-run"
train="$build/tests/distributed/ddp_train_main"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export ANVIL_LOG_LEVEL=warning
fail() { echo "FAIL: $*" >&2; exit 1; }

case "$mode" in
  equivalence)
    for opt in sgd adamw; do
      "$train" --optimizer "$opt" --out "$tmp/one-$opt.st" > "$tmp/one-$opt.out" 2> "$tmp/one-$opt.err" ||
        fail "one process ($opt): $(cat "$tmp/one-$opt.err")"
      for n in 2 4; do
        "$run" --nproc "$n" "$train" --optimizer "$opt" --out "$tmp/n$n-$opt.st" > "$tmp/n$n-$opt.out" \
          2> "$tmp/n$n-$opt.err" || fail "$n ranks ($opt): $(tail -5 "$tmp/n$n-$opt.err")"
        # 100 steps; the averaged gradient differs from one process's only in summation order.
        "$train" --compare "$tmp/n$n-$opt.st" "$tmp/one-$opt.st" --rtol 1e-6 ||
          fail "$n ranks ($opt) differ from one process"
        # Validation counts every sample exactly once: the same correct answers.
        one=$(grep -o 'correct=[0-9]*/[0-9]*' "$tmp/one-$opt.out")
        many=$(grep -o 'correct=[0-9]*/[0-9]*' "$tmp/n$n-$opt.out")
        [[ "$one" == "$many" ]] || fail "$n ranks ($opt): validation $many, one process $one"
        echo "$n ranks, $opt: $many like one process"
      done
    done
    # Two runs of 2 ranks are bitwise identical: the ring's reduction order is fixed.
    "$run" --nproc 2 "$train" --optimizer sgd --out "$tmp/again.st" > /dev/null 2>&1
    "$train" --compare "$tmp/again.st" "$tmp/n2-sgd.st" --rtol 0 | grep -q "bitwise identical" ||
      fail "two 2-rank runs differ"
    ;;
  kill)
    "$run" --nproc 2 "$train" --optimizer adamw --out "$tmp/plain.st" > /dev/null 2>&1 || fail "uninterrupted run"
    # Slowed down (a pause per 10 steps) so the kill lands mid-run; checkpoints every 10 steps.
    "$run" --nproc 2 --max-restarts 1 "$train" --optimizer adamw --out "$tmp/killed.st" \
      --checkpoint "$tmp/ck.safetensors" --checkpoint-every 10 --step-delay-ms 400 > "$tmp/out" 2> "$tmp/err" &
    launcher=$!
    pid1=""
    for _ in $(seq 1 300); do
      if grep -q '^\[rank 0\] step 40 ' "$tmp/err" 2>/dev/null; then
        pid1=$(sed -n 's/.*attempt 0: started ranks (rank:pid) 0:[0-9]*, 1:\([0-9]*\).*/\1/p' "$tmp/err")
        break
      fi
      sleep 0.05
    done
    [[ -n "$pid1" ]] || fail "the run did not reach step 40: $(tail -5 "$tmp/err")"
    kill -9 "$pid1"
    wait "$launcher" || fail "anvil-run did not recover: $(grep anvil-run "$tmp/err")"
    grep -q "rank 1 (pid $pid1) was killed by signal 9 (SIGKILL); the other ranks were stopped; restarting" \
      "$tmp/err" || fail "the restart does not name the killed rank: $(grep anvil-run "$tmp/err")"
    grep -q "resumed at step [1-9]" "$tmp/err" || fail "the ranks did not resume from the checkpoint"
    # Resuming restores weights, optimizer state, loader position and RNG exactly: bitwise.
    "$train" --compare "$tmp/killed.st" "$tmp/plain.st" --rtol 0 | tee "$tmp/cmp" | grep -q "bitwise identical" ||
      fail "the restarted run's weights differ: $(cat "$tmp/cmp")"
    grep 'anvil-run' "$tmp/err"
    grep 'resumed at step' "$tmp/err"
    ;;
  divergence)
    set +e
    ANVIL_FAULT_POINT='distributed:perturb:rank1:step30=fire' "$run" --nproc 2 "$train" --agreement-every 20 \
      --out "$tmp/x.st" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    set -e
    [[ $rc -ne 0 ]] || fail "a diverged run succeeded"
    grep -q "ranks disagree on parameter '0.weight' at step 40: rank 0 holds value #1; rank 1 holds value #2" \
      "$tmp/err" || fail "the divergence was not named: $(grep -v 'anvil: CPU' "$tmp/err" | tail -5)"
    grep "ranks disagree" "$tmp/err" | head -1
    ;;
  *)
    fail "unknown mode $mode"
    ;;
esac
echo "PASS $mode"
