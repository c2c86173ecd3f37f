#!/bin/sh
# Copies the problem folders that check.py judges (pmpp_v2, linalg, helion: a few hundred KB)
# from a reference-kernels checkout into .reference-kernels/ at the repository's root, which git
# ignores, so that they travel with the working tree to a GPU machine.
#
#   experiments/problem_folders/stage.sh CHECKOUT            a work tree (its problems/ as they are)
#   experiments/problem_folders/stage.sh GIT_DIR [REV]       a bare git directory, at REV (HEAD)
#
# .reference-kernels/COMMIT records the commit staged, for the results' table.
set -eu
[ $# -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
source=$1
revision=${2:-HEAD}
families="pmpp_v2 linalg helion"
destination="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/.reference-kernels"
rm -rf "$destination"
mkdir -p "$destination/problems"
if [ -d "$source/problems" ]; then
  for family in $families; do cp -R "$source/problems/$family" "$destination/problems/"; done
  commit=$(git -C "$source" rev-parse HEAD 2>/dev/null || echo "unknown (not a git checkout)")
else
  paths=$(for family in $families; do printf 'problems/%s ' "$family"; done)
  # shellcheck disable=SC2086  # one path per family
  git --git-dir="$source" archive "$revision" $paths | tar -x -C "$destination"
  commit=$(git --git-dir="$source" rev-parse "$revision")
fi
echo "$commit" > "$destination/COMMIT"
echo "staged $families at $commit into $destination ($(du -sk "$destination" | cut -f1) KiB)"
