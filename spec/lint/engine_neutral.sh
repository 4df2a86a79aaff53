#!/usr/bin/env bash
# The engine is cloud-neutral (docs/architecture.md#the-engine-is-cloud-neutral): no C file, header,
# README or proto under engine/ names a cloud or a cloud's resources. What is a cloud's lives in
# providers/ (the mapping, which exports what the engine needs: its node class descriptor, settings,
# drift reasons) and sim/ (its simulator).
#
# usage: engine_neutral.sh [ROOT]   (ROOT defaults to the repository holding this script)
# Prints one "file:line: word: text" line per hit and exits 1 when there is any.
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2

words='ecsnodeclass|v_?switch|security.?group|image|region|alibaba|aliyun|\<ecs\>|\<ack\>|hangzhou|instanceexpired'

# Kubernetes and Karpenter API names that are the same for every cloud (extended regular
# expressions, case-sensitive), removed from a line before it is searched.
allowed='topology\.kubernetes\.io/region'             # the well-known topology label
allowed+='|failure-domain\.beta\.kubernetes\.io/region' # its deprecated spelling, which Karpenter maps
allowed+='|osImage'                                     # NodeSystemInfo.osImage
allowed+='|imageID'                                     # NodeClaim status.imageID (Karpenter, every cloud)
allowed+='|image_id'                                    # the instance-shape field that fills imageID
# Per file: a pod's containers have an image (and an imageID in their status), in every cluster: the
# simulated kubelet runs pods, and the demo creates some.
declare -A allowed_in=(
  [engine/sim/kubelet_pods.c]='"image"|const char \*image|image \? image'
  [engine/cli/demo_story.c]='\\"image\\":\\"nginx\\"'
)

hits=0
report=''
while IFS= read -r hit; do
  file=${hit%%:*}
  rest=${hit#*:}
  line=${rest%%:*}
  text=${rest#*:}
  clean=$(sed -E "s#${allowed}##g" <<<"$text")
  [ -n "${allowed_in[$file]:-}" ] && clean=$(sed -E "s#${allowed_in[$file]}##g" <<<"$clean")
  word=$(grep -oiE "$words" <<<"$clean" | head -n 1)
  [ -z "$word" ] && continue
  report+="$file:$line: $word: $(sed -E 's/^[[:space:]]+//' <<<"$text")"$'\n'
  hits=$((hits + 1))
done < <(find engine -type f \( -name '*.c' -o -name '*.h' -o -name '*.proto' -o -name 'README.md' \) -print0 |
  sort -z | xargs -0 grep -nHiE "$words")

if [ "$hits" -gt 0 ]; then
  printf '%s' "$report"
  cat <<MSG

$hits line(s) under engine/ name a cloud or a cloud's resource ($words).
The engine is cloud-neutral: such code belongs in providers/<cloud>/ (the mapping, which exports what
the engine needs: its node class descriptor, settings, drift reasons; docs/contracts.md#mappings) or in
sim/<cloud>/ (its simulator). A Kubernetes or Karpenter API name that is the same for every cloud goes
on the allow-list of spec/lint/engine_neutral.sh, with the reason.
MSG
  exit 1
fi
echo "engine/ names no cloud"
