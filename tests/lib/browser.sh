# shellcheck shell=bash
# Headless Chromium for the status-page checks (sourced by harness.sh).
#   chrome_check                        # fail when chromium is not installed
#   CHROME_WINDOW=1400,1000 chrome ARGS...   # chromium --headless ARGS in $NS
# A profile of its own under $WORK; no GPU, no sandbox (root, in a
# container); bounded by a 60 s timeout; its own log in $WORK/chromium.log.

chrome_check() {
    CHROMIUM=$(command -v chromium || true)
    [[ -n $CHROMIUM ]] || fail "chromium not installed (tests/lab/deps.sh)"
}

chrome() {
    nsx timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --user-data-dir="$WORK/chrome" --window-size="${CHROME_WINDOW:-1280,900}" "$@" \
        2>>"$WORK/chromium.log"
}
