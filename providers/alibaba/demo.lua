-- The Alibaba part of `luaprov demo` (engine/cli/demo_story.c tells the story;
-- docs/getting-started.md#build-and-try-it): the node class the demo applies (its spec; apiVersion and
-- kind come from the mapping's descriptor), how its resolved status is summed up, and the edit of the
-- class that drifts the nodes. Data only: the demo reads it as JSON through the mapping's `demo` field.
return {
  -- ECSNodeClass "default": vSwitches and security groups by the simulated cluster's discovery tag,
  -- the image by alias (sim/alibaba resolves it to the newest Alibaba Cloud Linux 3 image).
  nodeclass = {
    describes = "vSwitches, security groups, image by selector",
    spec = {
      vSwitchSelectorTerms = { { tags = { ["karpenter.sh/discovery"] = "luaprov-sim" } } },
      securityGroupSelectorTerms = { { tags = { ["karpenter.sh/discovery"] = "luaprov-sim" } } },
      imageSelectorTerms = { { alias = "AlibabaCloudLinux3" } },
    },
  },
  -- "resolved: 2 vSwitches, 1 security groups, image m-..." once the class is Ready: `count` prints the
  -- length of status[field], `show` the given field of its first item.
  resolved = {
    { label = "vSwitches", field = "vSwitches", count = true },
    { label = "security groups", field = "securityGroups", count = true },
    { label = "image", field = "images", show = "id" },
  },
  -- The drift step: a merge patch of the class that the drift policy answers with `reason`.
  drift = {
    describes = "change the ECSNodeClass image",
    reason = "ImageDrift",
    patch = { spec = { imageSelectorTerms = { { id = "aliyun_3_x64_20G_alibase_20230727.vhd" } } } },
  },
}
