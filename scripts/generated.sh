# Sourced by the scripts/gen-*.sh that regenerate one committed file: what they do with the new
# file once they have made it.
# shellcheck shell=bash

# install_or_check TOOL OUT NEW IGNORE [--check]: with --check, fails (exit 1) unless NEW equals
# the committed OUT apart from the lines matching the extended regular expression IGNORE (a
# version line that may differ between machines while the content may not); without it, moves
# NEW over OUT. OUT is named relative to the checkout in what it prints.
install_or_check() {
    local tool=$1 out=$2 new=$3 ignore=$4 mode=${5:-} name
    name=${out#"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"/}
    if [ "$mode" = "--check" ]; then
        if ! diff -u <(grep -Ev "$ignore" "$out") <(grep -Ev "$ignore" "$new"); then
            echo "$tool: $name is not current; run scripts/$tool.sh" >&2
            exit 1
        fi
        echo "$tool: $name is current"
    else
        mv "$new" "$out"
        echo "$tool: wrote $name"
    fi
}
