#!/usr/bin/env bash
# Runs the libFuzzer targets of Fuzz/ for a given time each, starting from the committed seed
# corpus (Fuzz/Corpus/TARGET, never written to), and prints executions and coverage per target.
# A crash fails the script with the input saved under the output folder: turn it into a
# regression test, and add it to the seed corpus. AddressSanitizer is on; LeakSanitizer is off,
# because Swift keeps flags in the spare bits of pointers and the leak scan then misses live
# objects (it reported a cache entry held by a global as leaked).
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]      (defaults: 30 seconds, every target)
#   FUZZ_OUT=DIR keeps the grown corpora and any crash inputs there (default: a temporary folder).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
seconds=${1:-30}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(FuzzSignatureHeader FuzzCapturedHTTP FuzzJWS FuzzLegacyReceipt FuzzConfiguration FuzzRevenueCatExport FuzzEntitlementToken)
fi
out=${FUZZ_OUT:-$(mktemp -d)}
mkdir -p "$out"

echo "== building the fuzz targets (release, -sanitize=fuzzer,address)"
# SwiftPM keeps the build plan of a path dependency and does not notice source files added or
# moved there since; dropping the plan makes it plan again (a few seconds).
rm -f Fuzz/.build/release.yaml Fuzz/.build/*/release/description.json
# Each target gives SwiftPM the <Target>_main it links every executable to and starts libFuzzer
# from there (LLVMFuzzerRunDriver); linked with lld (gold fails on the sanitized objects).
(cd Fuzz && swift build -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library 2>&1 \
    | grep -Ev "warning: Cannot export local symbol" | tail -3)
bin=$(cd Fuzz && swift build -c release --show-bin-path)

status=0
for target in "${targets[@]}"; do
    mkdir -p "$out/$target/corpus" "$out/$target/crashes"
    log="$out/$target/fuzz.log"
    echo "== $target for ${seconds}s"
    if ! ASAN_OPTIONS=detect_leaks=0 "$bin/$target" "$out/$target/corpus" "Fuzz/Corpus/$target" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=65536 -detect_leaks=0 \
        -print_final_stats=1 -artifact_prefix="$out/$target/crashes/" >"$log" 2>&1; then
        echo "error: $target failed; the input is in $out/$target/crashes/, the log in $log" >&2
        grep -E "ERROR|==[0-9]+==|Fatal error|precondition" "$log" | head -5 >&2 || true
        status=1
        continue
    fi
    runs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$" || echo "?")
    coverage=$(grep -Eo "cov: [0-9]+ ft: [0-9]+" "$log" | tail -1 || echo "cov: ?")
    corpus=$(find "$out/$target/corpus" -type f | wc -l)
    echo "   $runs executions, $coverage, $corpus new corpus entries, no crash"
done
exit $status
