# Sourced by release/smoke.sh and release/source-smoke.sh: `cli_check DB BINARY [RUNNER...]` runs
# the installed `fencelock` command (through RUNNER, e.g. a clean environment) on the SQLite file
# DB and checks that it held the lock while its child ran and handed it FENCELOCK_TOKEN.
cli_check() {
    local db="$1" binary="$2" out
    shift 2
    out="$("$@" "$binary" run --url "sqlite://$db" smoke -- sh -c 'echo "token=$FENCELOCK_TOKEN"')"
    case "$out" in
        token=[0-9]*) echo "   $binary run: $out" ;;
        *) echo "smoke: $binary run printed '$out'" >&2; return 1 ;;
    esac
}
